"""Composed runs by a sharding plan's styles: Hugging Face models (tiny configs, nothing downloaded): data parallelism (an
all-reduce, or FSDP2 with ZeRO 3) over tensor parallelism by the model's own plan (attention by
heads, the MLP column then row, the embedding and head by rows), every other parameter
replicated, on 4 gloo processes; outputs and every gradient equal one process's."""

from __future__ import annotations

import pytest
import tiny_hf

import partitioner
import sample_models
from partitioner.cluster.run.compose import run_layout
from partitioner.cluster.run.tp_plans import model_tp_plan
from partitioner.cluster.words import parse_layout
from partitioner.sharding import tensor_parallel

SMALL = {**tiny_hf.DECODER, "vocab_size": 256, "batch_size": 4, "seq_len": 16}
GPT2 = {**tiny_hf.GPT2, "vocab_size": 256, "batch_size": 4, "seq_len": 16}


def _plan(name: str, graph: partitioner.Graph) -> tensor_parallel.TPPlan:
    if name == "gpt2":  # no plan of its own: each MLP's Conv1D pair, column then row
        spec = {
            f"transformer.h.{i}.mlp.{layer}.weight": split
            for i in range(2)
            for layer, split in (("c_fc", "1,2"), ("c_proj", "2,1"))
        }
        return tensor_parallel.tp_plan(graph, spec, 2)
    plan = model_tp_plan(graph, 2)  # the model's own, with the embedding and head split as torchtitan splits them
    assert plan is not None and plan.spec["model.embed_tokens.weight"] == plan.spec["lm_head.weight"] == "2,1"
    return plan


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, layout",
    [("llama", "dp2 tp2 mb1"), ("llama", "dp2 tp2 zero3"), ("qwen2", "dp2 tp2 mb2 zero2"), ("gpt2", "dp2 tp2")],
)
def test_dp_over_the_models_own_tensor_parallel_plan_equals_one_process(name, layout):
    module, inputs, kwargs = sample_models.load(f"hf:{name}", overrides=GPT2 if name == "gpt2" else SMALL)
    graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
    lay = parse_layout(layout, batch=4)
    run = run_layout(module, inputs, lay, tp_plan=_plan(name, graph), example_kwargs=kwargs, timeout_s=300)
    assert run.outputs_equal, run.mismatch
    assert run.gradients_equal, run.mismatch
    assert {(r.dp, r.tp) for r in run.ranks} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    sharded = sum(
        p.numel() * p.element_size()
        for n, p in module.named_parameters()
        if any(n.startswith(path + ".") for path, _ in run.tp_plan)
    )
    whole = sum(p.numel() * p.element_size() for p in module.parameters())
    held = max(r.parameter_bytes for r in run.ranks)
    assert held < whole  # tensor parallelism (and ZeRO) split the weights
    if lay.zero < 2:  # replicated over dp: each rank holds the replicated part whole and 1/tp of the rest
        assert held == pytest.approx(whole - sharded + sharded / 2, rel=0.02)


def test_a_model_without_a_plan_of_its_own_composes_by_its_mlp_pairs():
    module, inputs, kwargs = sample_models.load("hf:gpt2", overrides=GPT2)
    plan = model_tp_plan(partitioner.trace(module, inputs, example_kwargs=kwargs), 2)
    assert plan is not None and set(plan.styles) == {
        f"transformer.h.{i}.mlp.{layer}" for i in range(2) for layer in ("c_fc", "c_proj")
    }
    assert set(plan.transposed) == set(plan.styles)  # GPT-2's Conv1D, run as the equal Linear
    mlp, inputs, _ = sample_models.load("mlp")
    assert model_tp_plan(partitioner.trace(mlp, inputs), 2) is None  # its Linear pairs serve


@pytest.mark.slow
def test_a_sample_decoder_composes_by_its_mlp_pairs_with_norms_and_attention_replicated():
    module, inputs, _ = sample_models.load("transformer", overrides={"batch_size": 4})
    graph = partitioner.trace(module, inputs)
    plan = model_tp_plan(graph, 2)  # its Linear pairs do not cover it: LayerNorms, attention, embeddings
    assert plan is not None and all(".mlp." in name for name in plan.spec)
    run = run_layout(graph.graph_module, inputs, parse_layout("dp2 tp2 zero2", batch=4), tp_plan=plan, timeout_s=300)
    assert run.outputs_equal and run.gradients_equal, run.mismatch
