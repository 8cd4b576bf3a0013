"""A view of a weight holds no bytes of its own: Mixtral's packed expert weights, transposed for
grouped_mm, count once (as the weights), so a plan of the model holds its weights once."""

from __future__ import annotations

import pytest

import partitioner
import sample_models

pytest.importorskip("transformers")


def test_transposed_expert_weights_are_not_counted_again():
    # One layer of Mixtral-8x7B at full width, on meta weights: 3.2 GiB of weights in bf16.
    module, inputs, kwargs = sample_models.load("hf:mixtral-8x7b", {"num_hidden_layers": 1, "dtype": "bf16"})
    graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
    weights = module.num_parameters() * 2
    views = [
        v
        for v in graph.op_indices
        if "transpose" in graph.nodes[v].target and all(graph.nodes[u].op == "get_attr" for u in graph.preds[v])
    ]
    assert views and all(graph.nodes[v].output_bytes == 0 for v in views)
    plan = partitioner.partition(graph, partitioner.parse_devices("1x80GiB"), mode="size_based")
    held = plan.partitions[0].memory_bytes
    activations = sum(graph.nodes[v].output_bytes for v in graph.op_indices)
    assert held >= weights and held == pytest.approx(weights + activations, rel=1e-6)  # and the input ids
    assert activations < 0.02 * weights  # 32 tokens: megabytes, not the 2.6 GiB of transposed experts
