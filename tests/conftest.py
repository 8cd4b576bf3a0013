"""Shared fixtures."""

from __future__ import annotations

import pytest
import torch

import partitioner
from examples import WorkedExample


@pytest.fixture
def worked_example() -> tuple[partitioner.Graph, torch.Tensor]:
    torch.manual_seed(0)
    a = torch.rand(4)
    return partitioner.trace(WorkedExample(), (a,)), a
