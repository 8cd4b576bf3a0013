"""Shared fixtures."""

from __future__ import annotations

import os

import pytest
import torch

import partitioner
from examples import WorkedExample

# The disk cache of traces is off in the tests (a test that patches the tracer must see its own
# trace); the cache's own tests turn it on in a folder of their own.
os.environ.setdefault("PARTITION_EXPLORER_CACHE", "off")


@pytest.fixture
def worked_example() -> tuple[partitioner.Graph, torch.Tensor]:
    torch.manual_seed(0)
    a = torch.rand(4)
    return partitioner.trace(WorkedExample(), (a,)), a
