"""The annotation memo: every node's shape, dtype, bytes and FLOPs equal the plain run's (each
node dispatched on fake tensors), on the sample models, tiny Hugging Face models and graphs made
to trip a memo (settings only a module's attributes hold, a user's module, in-place view ops);
and the annotation records no autograd graph."""

import logging

import pytest
import tiny_hf
import torch
import torch.fx as fx
from torch import nn

import partitioner
import sample_models
from partitioner.tracing.annotate import annotate, changes_metadata
from sample_models._registry import names

TINY = {spec: tiny_hf.SMALL[spec] for spec in ("hf:llama", "hf:mixtral", "hf:gpt2", "hf:t5")}


def _both(gm: fx.GraphModule, inputs: tuple) -> tuple[dict, dict]:
    return annotate(gm, inputs), annotate(gm, inputs, memo=False)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n == "gpt2_small" else n for n in names()]
)  # GPT-2 small's plain run takes seconds
def test_memo_equals_the_plain_run_on_every_sample_model(name):
    model, inputs = sample_models.build(name)
    graph = partitioner.trace(model, inputs)
    memo, plain = _both(graph.graph_module, graph.example_inputs)
    assert memo == plain and len(memo) == len(graph)


@pytest.mark.slow
@pytest.mark.parametrize("spec", list(TINY))
def test_memo_equals_the_plain_run_on_tiny_hf_models(spec):
    pytest.importorskip("transformers")
    module, args, kwargs = sample_models.load(spec, TINY[spec])
    graph = partitioner.trace(module, args, example_kwargs=kwargs)
    memo, plain = _both(graph.graph_module, graph.example_inputs)
    assert memo == plain and len(memo) == len(graph)


def test_repeated_layers_are_dispatched_once(caplog):
    # 8 Linear layers of one width and 7 ReLUs: the first of each kind runs, 13 come from the memo
    model, inputs = sample_models.build("mlp", n_layer=8, in_features=32, hidden=32, out_features=32)
    gm = fx.symbolic_trace(model)
    with caplog.at_level(logging.INFO, logger="partitioner.tracing.annotate"):
        annotate(gm, inputs)
    assert "annotated 17 nodes, 13 of them from the memo" in caplog.text


class Take(nn.Module):
    """A user's module whose output shape hangs on a setting the memo cannot see."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, : self.k]


def test_modules_alike_but_for_a_setting_are_told_apart():
    root = nn.Module()
    root.flat0, root.flat1 = nn.Flatten(0), nn.Flatten(1)  # same class, no weights, other settings
    root.take2, root.take3 = Take(2), Take(3)
    g = fx.Graph()
    x = g.placeholder("x")
    outs = [g.call_module(m, (x,)) for m in ("flat0", "flat1", "take2", "take3")]
    g.output(tuple(outs))
    gm = fx.GraphModule(root, g)
    memo, plain = _both(gm, (torch.randn(2, 4, 3),))
    assert memo == plain
    assert [memo[n][0][0] for n in ("flat0", "flat1", "take2", "take3")] == [(24,), (2, 12), (2, 2, 3), (2, 3, 3)]


def test_an_inplace_view_op_turns_the_memo_off():
    class Model(nn.Module):
        def forward(self, x):
            a, b = x.clone(), x.clone()  # one key: the memo would hand both nodes one tensor
            a.unsqueeze_(0)  # ...and this would change b's shape too
            return a.sum(0), b.sum(0)

    gm = fx.symbolic_trace(Model())
    assert [n.name for n in gm.graph.nodes if changes_metadata(n, gm)] == ["unsqueeze_"]
    memo, plain = _both(gm, (torch.randn(3, 4),))
    assert memo == plain and memo["sum_2"][0][0] == (4,)


def test_value_writes_and_torch_modules_keep_the_memo():
    gm = fx.symbolic_trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True)))
    assert not any(changes_metadata(n, gm) for n in gm.graph.nodes)
    user = fx.symbolic_trace(nn.Sequential(nn.Linear(4, 4)))
    user.add_submodule("take", Take(2))
    with user.graph.inserting_before(list(user.graph.nodes)[-1]):
        user.graph.call_module("take", (list(user.graph.nodes)[1],))
    assert [n.name for n in user.graph.nodes if changes_metadata(n, user)] == ["take"]


def test_annotation_records_no_autograd_graph():
    # A chain of 40,000 ops whose autograd graph was freed recursively overflowed the C stack.
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(torch.is_grad_enabled())
            return x * 2

    root = nn.Module()
    root.fc, root.probe = nn.Linear(4, 4), Probe()
    g = fx.Graph()
    g.output(g.call_module("probe", (g.call_module("fc", (g.placeholder("x"),)),)))
    annotate(fx.GraphModule(root, g), (torch.randn(2, 4),))
    assert seen == [False]
