"""FLOPs for every op the Hugging Face architectures emit: the mixture-of-experts' grouped
matmuls and CPU attention priced, checked against the analytic count; unpriced ops reported."""

from __future__ import annotations

import tiny_hf

import partitioner
import sample_models
from partitioner.tracing.flops import describe_unpriced, unpriced

SMALL = tiny_hf.DECODER


def test_mixtral_forward_flops_equal_the_analytic_count():
    """2 x (matmul rows x inner x outer) summed over the layer's matmuls: q and o (h x h), k and v
    (h x kv), attention's scores and values (T x T x h each, unmasked as torch's sdpa formula
    counts), the router (h x E), top_k experts of three h x I matmuls per token, and the head."""
    module, inputs, kwargs = sample_models.load("hf:mixtral", overrides={**SMALL, "num_local_experts": 4})
    graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
    c = module.config
    t, h, i = inputs[0].numel(), c.hidden_size, c.intermediate_size
    kv = c.num_key_value_heads * (h // c.num_attention_heads)
    layer = (
        2 * t * h * h * 2
        + 2 * t * h * kv * 2
        + 2 * t * t * h * 2
        + 2 * t * h * c.num_local_experts
        + 2 * t * c.num_experts_per_tok * 3 * h * i
    )
    analytic = c.num_hidden_layers * layer + 2 * t * h * c.vocab_size
    ours = sum(nd.flops for nd in graph.nodes)
    assert abs(ours - analytic) <= 0.05 * analytic
    assert graph.unpriced_ops == ()


def test_attention_is_priced_on_cpu_for_the_decoders():
    for name in ("hf:llama", "hf:qwen2", "hf:mistral"):
        module, inputs, kwargs = sample_models.load(name, overrides=SMALL)
        graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
        attention = [nd for nd in graph.nodes if "scaled_dot_product" in nd.target]
        assert attention and all(nd.flops > 0 for nd in attention), name
        assert graph.unpriced_ops == (), name


def test_unpriced_matmuls_are_named_with_counts():
    found = unpriced(
        [("aten::bmm", 0), ("aten::bmm", 0), ("aten::relu", 0), ("aten::mm", 10), ("my::grouped_mm_thing", 0)]
    )
    assert found == (("aten::bmm", 2), ("my::grouped_mm_thing", 1))
    assert describe_unpriced(found).startswith("3 ops with no FLOP formula")


def test_export_checks_are_no_nodes_and_the_split_still_equals_the_model():
    import torch

    for name, knobs in (
        ("hf:gpt2", {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1000}),
        ("hf:llama", SMALL),
    ):
        module, inputs, kwargs = sample_models.load(name, overrides=knobs)
        graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
        names = [nd.name for nd in graph.nodes] + [nd.module_path for nd in graph.nodes]
        assert not [n for n in names if n.startswith(("_guards", "_assert"))], name
        plan = partitioner.partition(graph, partitioner.parse_devices("3x64GiB"), force_partition=True)
        args = tuple(inputs) + tuple(kwargs.values())
        torch.testing.assert_close(partitioner.split(plan, graph)(*args), graph.graph_module(*args))
