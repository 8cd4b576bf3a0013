"""Shared graphs and plans for the builder tests."""

from __future__ import annotations

import pytest

import partitioner
import sample_models
from partitioner import Device, Plan
from partitioner.testing.synthetic import synthetic_graph

MiB = 2**20


def traced(name: str, **overrides) -> partitioner.Graph:
    module, example = sample_models.build(name, **overrides)
    return partitioner.trace(module, example, name=name)


@pytest.fixture(scope="module")
def dlrm() -> partitioner.Graph:
    return traced("dlrm")


@pytest.fixture(scope="module")
def mlp() -> partitioner.Graph:
    return traced("mlp", n_layer=4, in_features=32, hidden=32, out_features=32, batch_size=8)


def default_devices(name: str) -> list[Device]:
    count, memory = sample_models.default_devices(name)
    return partitioner.parse_devices(f"{count}x{memory}B")


@pytest.fixture(scope="module")
def plans(dlrm) -> dict[str, Plan]:
    devices = default_devices("dlrm")
    return {
        mode: partitioner.partition(dlrm, devices, mode=mode, transfer_rate_bytes_per_s=1e9)
        for mode in ("size_based", "sparse_nn", "cost_aware")
    }


def over_capacity_plan() -> tuple[partitioner.Graph, Plan]:
    graph = synthetic_graph([(0, 1), (1, 2)], [600, 600, 100])
    plan = partitioner.evaluate_plan(graph, partitioner.parse_devices("2x1KiB"),
                                     {"op0": 0, "op1": 0, "op2": 1}, {0: [0], 1: [1]},
                                     transfer_rate_bytes_per_s=1e6)
    return graph, plan
