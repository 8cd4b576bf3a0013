"""``cost_aware``: merge partitions while the critical-path latency does not grow.

Reference: ``Partitioner.cost_aware_partition`` (torch.fx.experimental.accelerator_partitioner),
which starts from one node per partition and, each round, tries every pair of partitions,
re-mapping devices and re-walking every path for each pair: O(N^2) evaluations per round, each
exponential in the branching. # NOTE: [Cost-aware search]
Here the devices come from a size-based fill; the plan starts from one node per partition on
those devices (whose latency is the node-level critical path plus the transfers the devices
force: the best any merging can reach), boundary nodes change device where that shortens the
critical path, and neighbouring partitions on the same devices are merged whenever the exact
latency does not grow. A Kernighan-Lin pass then moves boundary nodes
between devices. The coarse start (one partition per device, refined) is scored too and the
lower latency wins, fewer partitions breaking ties. O(budget * (N + E)).
"""

from __future__ import annotations

from .base import Assignment, Problem, fill_in_order
from .search import default_budget, improve_by_moves, merge_partitions

__all__ = ["partition"]


def partition(problem: Problem) -> Assignment:
    graph = problem.graph
    budget = int(problem.options.get("search_budget") or default_budget(problem))
    coarse = fill_in_order(problem, graph.op_indices)
    candidates = [improve_by_moves(problem, coarse, budget // 2, swaps=False)]
    if budget < 2 * len(graph.op_indices):
        # Too few evaluations to merge node-sized partitions into a readable plan.
        return candidates[0]
    # One node per partition on the fill's devices, then merge.
    part = [-1] * len(graph)
    devices_of: list[list[int]] = []
    for v in graph.op_indices:
        part[v] = len(devices_of)
        devices_of.append(list(coarse.devices_of[coarse.part[v]]))
    fine = improve_by_moves(problem, Assignment(part, devices_of), budget // 4, swaps=False)
    merged = merge_partitions(problem, fine, budget)
    candidates.append(improve_by_moves(problem, merged, budget // 4, swaps=False))

    def key(a: Assignment) -> tuple[bool, float, int]:
        return (not problem.fits(a), problem.latency(a), len({p for p in a.part if p >= 0}))

    return min(candidates, key=key)
