"""One count of a model's weights, whatever it was built on and however it was traced: the plan,
the pipeline's stages, sharding and training memory agree with ``model.num_parameters()``
(times the element size, plus the buffers the forward reads) to the byte."""

from __future__ import annotations

import pytest
import tiny_hf

import partitioner
import sample_models
from partitioner import pipeline, sharding
from partitioner.remat.memory import RematResult, training_memory

SMALL = tiny_hf.DECODER
CONFIGS = {
    "hf:llama": SMALL,
    "hf:qwen2": SMALL,
    "hf:mistral": SMALL,
    "hf:mixtral": tiny_hf.SMALL["hf:mixtral"],
    "hf:gpt2": tiny_hf.GPT2,
    "hf:bert": tiny_hf.SMALL["hf:bert"],
    "hf:t5": {"num_layers": 2, "d_model": 64, "d_ff": 128, "num_heads": 4, "vocab_size": 1000, "d_kv": 16},
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def traced(request):
    module, inputs, kwargs = sample_models.load(request.param, overrides=CONFIGS[request.param])
    graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
    return request.param, module, graph, expected_bytes(module, graph)


def expected_bytes(module, graph) -> int:
    """``num_parameters()`` at the element size, plus the buffers some operation of the graph reads."""
    read = {nd.target for v, nd in enumerate(graph.nodes) if nd.op == "get_attr" and graph.users[v]}
    buffers = sum(b.numel() * b.element_size() for name, b in module.named_buffers() if name in read)
    return module.num_parameters() * next(module.parameters()).element_size() + buffers


def test_the_graph_counts_every_weight_once(traced):
    _, module, graph, expected = traced
    assert graph.parameter_bytes == expected


def test_a_plan_holds_the_weights_once(traced):
    _, _, graph, expected = traced
    plan = partitioner.partition(graph, partitioner.parse_devices("1x64GiB"))
    activations = sum(graph.output_bytes[v] for v in graph.op_indices) + sum(
        nd.output_bytes for nd in graph.nodes if nd.op == "placeholder"
    )
    assert plan.device_memory_bytes()[0] == expected + activations


def test_pipeline_stages_hold_the_weights_once(traced):
    name, _, graph, expected = traced
    pp = pipeline.plan(graph, partitioner.parse_devices("2x64GiB"), stages=2, microbatches=2, schedule="gpipe")
    weights = sum(m - s for m, s in zip(pp.stage_memory_bytes, pp.stage_stash_bytes))
    # A weight read by several operations (a tied embedding and LM head) may be held by both stages.
    shared = sum(
        nd.output_bytes
        for v, nd in enumerate(graph.nodes)
        if nd.op == "get_attr" and sum(graph.nodes[u].is_op for u in graph.users[v]) > 1
    )
    assert expected <= weights <= expected + shared
    if not shared:
        assert weights == expected


def test_sharding_counts_the_parameters_once(traced):
    _, module, graph, expected = traced
    device = partitioner.parse_devices("1x64GiB")
    used = sharding.device_memory(graph, device, {})[0]
    activations = sum(nd.output_bytes for nd in graph.nodes if nd.op != "get_attr")
    size = next(module.parameters()).element_size()
    assert used - activations == module.num_parameters() * size


def test_training_memory_holds_the_weights_once(traced):
    _, _, graph, expected = traced
    plan = partitioner.partition(graph, partitioner.parse_devices("1x64GiB"))
    nothing = RematResult(
        budget=1.0,
        saved=(),
        recomputed=(),
        saved_activation_bytes=0,
        saved_input_bytes=0,
        recompute_flops=0,
        recompute_time_s=0.0,
    )
    assert training_memory(plan, graph, nothing, optimizer="adam")[0].parameters == expected


@pytest.mark.slow
def test_llama_3_8b_on_meta_weights_splits_its_15_gib_over_pipeline_stages():
    module, inputs, kwargs = sample_models.load("hf:llama-3-8b", overrides={"dtype": "bf16"})
    graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
    expected = expected_bytes(module, graph)
    assert expected >= module.num_parameters() * 2 and graph.parameter_bytes == expected
    with pytest.raises(partitioner.InfeasibleError):
        pipeline.plan(graph, partitioner.parse_devices("2x1GiB"), stages=2, microbatches=2)
    pp = pipeline.plan(graph, partitioner.parse_devices("2x12GiB"), stages=2, microbatches=2)
    assert sum(m - s for m, s in zip(pp.stage_memory_bytes, pp.stage_stash_bytes)) == expected


@pytest.mark.parametrize("name", sample_models.names())
def test_sample_models_count_tied_weights_once(name):
    """symbolic_trace charges each module's parameters to its node; weights two modules share
    (the transformers' tied embedding and LM head) count once in the model's total, and the
    pipeline's stages hold them once unless split apart."""
    module, inputs = sample_models.build(name, **({"n_layer": 2} if name == "gpt2_small" else {}))
    graph = partitioner.trace(module, inputs)
    read = {nd.target for v, nd in enumerate(graph.nodes) if nd.op == "get_attr" and graph.users[v]}
    buffers = sum(b.numel() * b.element_size() for n, b in module.named_buffers() if n in read)
    assert graph.parameter_bytes == sum(p.numel() * p.element_size() for p in module.parameters()) + buffers
    pp = pipeline.plan(graph, partitioner.parse_devices("1x64GiB"), stages=1, microbatches=1, schedule="gpipe")
    assert pp.stage_memory_bytes[0] - pp.stage_stash_bytes[0] == graph.parameter_bytes
