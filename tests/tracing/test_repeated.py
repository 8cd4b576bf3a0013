"""A model of repeated blocks traced once a kind of block and repeated (NOTE: [Tracing a repeated
block once]) gives, node for node, the graph a whole trace gives: same names, ops, targets, edges,
module paths, shapes, bytes, parameters and FLOPs, on every hf: preset's architecture at a small
width, a DeepSeek-style model (dense layers, then MoE ones) and Gemma 3 (sliding and full
attention layers in a pattern); a model the rule does not fit is traced whole."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from partitioner.tracing import cache, tracer
from partitioner.tracing.blocks import plan_blocks
from partitioner.tracing.expand import first_difference
from partitioner.tracing.repeated import trace_repeated

transformers = pytest.importorskip("transformers")

from sample_models import _hf, _loading  # noqa: E402 - after the importorskip

# Each preset's architecture, narrow (same blocks, fewer and smaller numbers), with 6 layers a stack.
NARROW = {
    "llama": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=300),
    "mistral": dict(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=300
    ),
    "mixtral": dict(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=300,
        num_local_experts=4,
    ),
    "gpt2": dict(n_embd=64, n_head=4, vocab_size=300, n_positions=64),
    "bert": dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=300),
    "t5": dict(d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=300),
    "vit": dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, image_size=64, patch_size=16),
}
FAST = ("llama-3-8b", "t5-base")  # one stack of one run; two stacks whose first block differs


def _narrow(preset: str, layers: int = 6) -> dict:
    model_type, _ = _hf.PRESETS[preset]
    return {**NARROW[model_type], **{f: layers for f in _hf.layer_fields(preset)}, "dtype": "bf16"}


def _both(spec: str, overrides: dict):
    module, inputs, kwargs = _loading.load(spec, overrides)
    repeated, outcome = trace_repeated(module, inputs, name=spec, example_kwargs=kwargs or None, even_if_shallow=True)
    whole = tracer.trace(module, inputs, name=spec, example_kwargs=kwargs or None)
    return repeated, outcome, whole


def _same(repeated, whole) -> None:
    assert first_difference(repeated, whole) == ""
    assert repeated.fingerprint() == whole.fingerprint()
    assert repeated.model_info == whole.model_info
    assert repeated.named_parameters == whole.named_parameters is not None  # sharding reads them, no module
    assert repeated.parameter_bytes == whole.parameter_bytes
    assert sum(n.flops for n in repeated.nodes) == sum(n.flops for n in whole.nodes)


@pytest.mark.parametrize(
    "preset",
    [p if p in FAST else pytest.param(p, marks=pytest.mark.slow) for p in sorted(_hf.PRESETS)],
)
def test_every_preset_repeated_is_its_whole_trace_node_for_node(preset):
    repeated, outcome, whole = _both(f"hf:{preset}", _narrow(preset))
    assert outcome.repeated, outcome.reason
    assert outcome.traced_layers < outcome.layers
    _same(repeated, whole)


def test_t5_keeps_its_first_block_apart_and_every_block_reads_its_position_bias():
    module, _, _ = _loading.load("hf:t5-base", _narrow("t5-base", 7))
    plan = plan_blocks(module)
    assert not isinstance(plan, str)
    assert [(s.path, s.runs, s.keep) for s in plan.stacks] == [
        ("encoder.block", ((0, 0), (1, 6)), (0, 1, 2, 6)),
        ("decoder.block", ((0, 0), (1, 6)), (0, 1, 2, 6)),
    ]


def test_a_repeated_graph_scales_quantized_weights_and_traces_its_module_on_first_use():
    overrides = {**_narrow("llama-3-8b", 9), "dtype": "int8"}  # bf16 weights counted at half their bytes
    module, inputs, _ = _loading.load("hf:llama-3-8b", overrides)
    graph = _loading.trace_loaded("hf:llama-3-8b", overrides, (module, inputs, {}), "llama")
    assert not cache.module_loaded(graph) and cache.weights_on_meta(graph) is False  # small: real weights
    assert len(module.model.layers) == 9 and module.config.num_hidden_layers == 9  # put back after the cut
    _same(graph, tracer.trace(module, inputs, name="llama").with_weight_bytes(0.5))
    gm = graph.graph_module  # the whole model traced now, checked to have the same fingerprint
    assert isinstance(gm, torch.fx.GraphModule) and cache.module_loaded(graph)
    assert {n.name for n in gm.graph.nodes} == {n.name for n in graph.nodes}


DEEPSEEK = dict(
    num_hidden_layers=7,
    first_k_dense_replace=2,  # layers 0-1 dense, 2-6 mixtures of experts
    hidden_size=64,
    intermediate_size=128,
    moe_intermediate_size=32,
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_group=2,
    topk_group=1,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=16,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=8,
    vocab_size=300,
)


def test_dense_then_moe_layers_are_two_runs_repeated_to_the_whole_trace():
    repeated, outcome, whole = _both("hf:deepseek_v3", DEEPSEEK)
    assert outcome.repeated, outcome.reason
    assert outcome.plan == "model.layers: 7 layers in 2 run(s) 0-1, 2-6"
    assert outcome.traced_layers == 5
    _same(repeated, whole)


@pytest.mark.slow
def test_a_pattern_of_sliding_and_full_attention_layers_repeats_each_run():
    overrides = dict(
        num_hidden_layers=14,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=300,
    )
    repeated, outcome, whole = _both("hf:gemma3_text", overrides)
    assert outcome.repeated and outcome.plan.endswith("in 5 run(s) 0-4, 5, 6-10, 11, 12-13")
    _same(repeated, whole)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) + first


class _ReadsTheFirstBlock(nn.Module):
    """Every block after the first reads the first block's output (an absolute read within one
    run of same-kind blocks): the repeat rule reads the layer before, and its check must see it."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = x = self.blocks[0](x, x)
        for block in self.blocks[1:]:
            x = block(x, first)
        return x


class _Chain(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, x)
        return x


def test_a_chain_of_plain_blocks_repeats_under_symbolic_trace_from_nine_blocks():
    x = torch.randn(2, 8)
    shallow = _Chain(8)  # the cuts' 3 and 4 blocks and a trace's fixed cost: no gain
    graph, outcome = trace_repeated(shallow, (x,))
    assert not outcome.repeated and outcome.reason.startswith("too shallow to gain: 8 layers against 3 + 4")
    _same(graph, tracer.trace(shallow, (x,)))
    model = _Chain(9)
    repeated, outcome = trace_repeated(model, (x,))
    assert outcome.repeated and outcome.traced_layers == 3
    _same(repeated, tracer.trace(model, (x,)))


def test_a_block_reading_the_first_block_is_traced_whole_and_says_why():
    model = _ReadsTheFirstBlock(8)
    x = torch.randn(2, 8)
    graph, outcome = trace_repeated(model, (x,), even_if_shallow=True)
    assert not outcome.repeated
    assert "differs from its trace" in outcome.reason
    _same(graph, tracer.trace(model, (x,)))


def test_blocks_of_different_sizes_are_no_run_and_a_model_without_blocks_is_traced_whole():
    model = _Chain(4)
    model.blocks[2].fc = nn.Linear(8, 8, bias=False)  # one block unlike the others: runs of 2, 1, 1
    assert (
        plan_blocks(model) == "no run of same-kind layers is longer than three (blocks: 4 layers in 3 run(s) 0-1, 2, 3)"
    )
    graph, outcome = trace_repeated(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), (torch.randn(2, 8),))
    assert not outcome.repeated and outcome.reason == "no list of same-class blocks"
    assert len(graph.op_indices) == 2


def test_llama_3_1_405b_traces_from_three_layers_to_its_126():
    module, inputs, _ = _loading.load("hf:llama-3.1-405b", {"dtype": "bf16"})
    graph, outcome = trace_repeated(module, inputs, name="405b")  # deep enough to cut by default
    assert outcome.repeated and (outcome.traced_layers, outcome.layers) == (3, 126)
    assert cache.weights_on_meta(graph) is True and not cache.module_loaded(graph)  # said without a trace
    layers = [[n for n in graph.nodes if n.module_path.startswith(f"model.layers.{i}.")] for i in range(126)]
    assert all(len(nodes) == len(layers[1]) > 0 for nodes in layers)
    assert {sum(n.flops for n in nodes) for nodes in layers[1:]} == {sum(n.flops for n in layers[0])}
    weights = sum(p.numel() * p.element_size() for p in module.parameters())
    buffers = sum(b.numel() * b.element_size() for b in module.buffers())
    assert weights <= graph.parameter_bytes <= weights + buffers  # 405B parameters in bf16, each once
    assert round(weights / 2 / 1e9) == 406


@pytest.mark.slow
def test_llama_3_70b_at_full_size_repeated_is_its_whole_trace():
    repeated, outcome, whole = _both("hf:llama-3-70b", {"dtype": "bf16"})
    assert outcome.repeated and outcome.layers == 80
    _same(repeated, whole)


def test_a_repeated_graph_read_back_from_the_trace_cache_keeps_its_figures_and_says_its_weights_are_real(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    overrides = _narrow("llama-3-8b", 9)
    key = cache.model_key("hf:llama-3-8b", overrides)
    built = []

    def build():
        built.append(1)
        return _loading.trace_loaded("hf:llama-3-8b", overrides, _loading.load("hf:llama-3-8b", overrides), "llama")

    fresh = cache.cached_trace(key, build)
    hit = cache.cached_trace(key, build)
    assert len(built) == 1 and isinstance(hit, cache.CachedGraph) and hit is not fresh
    assert first_difference(hit, fresh) == "" and hit.model_info == fresh.model_info
    assert hit.named_parameters == fresh.named_parameters and len(hit.named_parameters) == 9 * 9 + 3
    assert cache.weights_on_meta(hit) is False and not cache.module_loaded(hit)


class _ReadsTheEighthBlock(_Chain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.blocks[7].fc.bias  # a block by its number: no cut has it


def test_a_model_that_will_not_run_cut_is_traced_whole_and_says_why():
    model = _ReadsTheEighthBlock(9)
    x = torch.randn(2, 8)
    graph, outcome = trace_repeated(model, (x,))
    assert not outcome.repeated and outcome.reason.startswith("the cut model failed: TraceError")
    assert len(model.blocks) == 9  # put back after the failed cut
    _same(graph, tracer.trace(model, (x,)))
