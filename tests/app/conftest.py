"""Fixtures shared by the builder tests: graphs traced once a module, and plans of every mode."""

from __future__ import annotations

import pytest
from builder_helpers import default_devices, traced

import partitioner
from partitioner import Plan


@pytest.fixture(scope="module")
def dlrm() -> partitioner.Graph:
    return traced("dlrm")


@pytest.fixture(scope="module")
def mlp() -> partitioner.Graph:
    return traced("mlp", n_layer=4, in_features=32, hidden=32, out_features=32, batch_size=8)


@pytest.fixture(scope="module")
def plans(dlrm) -> dict[str, Plan]:
    devices = default_devices("dlrm")
    return {
        mode: partitioner.partition(dlrm, devices, mode=mode, transfer_rate_bytes_per_s=1e9)
        for mode in ("size_based", "sparse_nn", "cost_aware")
    }
