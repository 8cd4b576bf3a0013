"""Shared graphs and plans for the builder tests."""

from __future__ import annotations

import partitioner
import sample_models
from partitioner import Device, Plan
from partitioner.testing.synthetic import synthetic_graph

MiB = 2**20


def traced(name: str, **overrides) -> partitioner.Graph:
    module, example = sample_models.build(name, **overrides)
    return partitioner.trace(module, example, name=name)


def default_devices(name: str) -> list[Device]:
    count, memory = sample_models.default_devices(name)
    return partitioner.parse_devices(f"{count}x{memory}B")


def over_capacity_plan() -> tuple[partitioner.Graph, Plan]:
    graph = synthetic_graph([(0, 1), (1, 2)], [600, 600, 100])
    plan = partitioner.evaluate_plan(
        graph,
        partitioner.parse_devices("2x1KiB"),
        {"op0": 0, "op1": 0, "op2": 1},
        {0: [0], 1: [1]},
        transfer_rate_bytes_per_s=1e6,
    )
    return graph, plan
