"""The command-line tests' shared fixtures: the small MLP traced once, and its four-device plan."""

from __future__ import annotations

import pytest
from cli_helpers import DEVICES, SETTINGS

import partitioner
import sample_models
from partitioner import Plan


@pytest.fixture(scope="session")
def graph() -> partitioner.Graph:
    module, inputs = sample_models.build("mlp", **SETTINGS)
    return partitioner.trace(module, inputs, name="mlp")


@pytest.fixture(scope="session")
def base_plan(graph: partitioner.Graph) -> Plan:
    plan = partitioner.partition(graph, partitioner.parse_devices(DEVICES))
    assert [p.node_names for p in plan.partitions] == [
        ("layers_0", "relu"),
        ("layers_1", "relu_1"),
        ("layers_2", "relu_2"),
        ("layers_3",),
    ]
    return plan
