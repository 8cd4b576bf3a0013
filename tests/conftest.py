"""Shared fixtures."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import torch

import partitioner
from examples import WorkedExample

if TYPE_CHECKING:
    from partitioner.processes.records import RankStep

# The disk cache of traces is off in the tests (a test that patches the tracer must see its own
# trace); the cache's own tests turn it on in a folder of their own.
os.environ.setdefault("PARTITION_EXPLORER_CACHE", "off")


@pytest.fixture
def worked_example() -> tuple[partitioner.Graph, torch.Tensor]:
    torch.manual_seed(0)
    a = torch.rand(4)
    return partitioner.trace(WorkedExample(), (a,)), a


@pytest.fixture
def rank_steps(monkeypatch: pytest.MonkeyPatch) -> list[RankStep]:
    """What every rank of the runs in a test sent back, as the parent received it."""
    from partitioner.processes import launch as launcher

    seen: list[RankStep] = []
    real = launcher.launch

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.extend(out)
        return out

    monkeypatch.setattr(launcher, "launch", spy)
    return seen
