"""``largest_first``: greedy fill in topological order, the largest device first.

The project's own fill, kept beside torch's (``size_based``): the next partition opens on the
largest unused device rather than the first in list order, and when devices run out the remaining
nodes go to the device where they cost least room rather than one partition per leftover node.
When fragmentation leaves a node nowhere to go it falls back to a best-fit packing, a packing by
size, and (small graphs) an exhaustive search. Often fewer partitions than ``size_based``: on
torch's own device-mapping test (devices of 120 B and 160 B) two where torch makes three.
O(N + E).
"""

from __future__ import annotations

from partitioner.accelerator._base import Assignment, Problem
from partitioner.accelerator._fills import initial_fill

__all__ = ["partition"]


def partition(problem: Problem) -> Assignment:
    return initial_fill(problem)
