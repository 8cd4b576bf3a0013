"""``size_based``: greedy fill of devices in topological order.

Reference: ``Partitioner.size_based_partition`` in ``torch.fx.experimental.accelerator_partitioner``.
Differences: the next partition opens on the largest unused device (the reference takes the
first in list order), and when devices run out the remaining nodes go to the device with the
most free memory instead of one partition per leftover node. O(N + E).
"""

from __future__ import annotations

from .base import Assignment, Problem, initial_fill

__all__ = ["partition"]


def partition(problem: Problem) -> Assignment:
    return initial_fill(problem)
