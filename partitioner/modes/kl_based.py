"""``kl_based``: Kernighan-Lin refinement of the size-based plan.

Reference: ``Partitioner.kl_based_partition`` (torch.fx.experimental.accelerator_partitioner),
which tries swapping every node with every node of every other partition and re-evaluates the
whole graph by enumerating paths for each try. Here each try is one O(N + E) evaluation; on
large graphs only boundary nodes are tried (a node with no neighbour in the other partition
rarely shortens a path by moving there); each round applies the best move found, not the last
one tried, and whole partitions may change device (the reference re-maps devices after each
swap). The search runs from the contiguous size-based fill, from a best-fit packing and from the
``cost_aware`` plan, computed with cost_aware's whole budget (KL is a refinement; its result is
only as good as where it starts, and it is never worse than cost_aware's), and the lowest
latency wins. O(budget * (N + E)); the budget defaults to
:func:`search.default_budget`.
"""

from __future__ import annotations

from . import cost_aware
from .base import Assignment, Problem, pick_best
from .search import default_budget, improve_by_moves
from .fills import starts

__all__ = ["partition"]


def partition(problem: Problem) -> Assignment:
    budget = problem.options.search_budget or default_budget(problem)
    begin = starts(problem)
    results = [improve_by_moves(problem, a, budget // (3 * len(begin)), swaps=True) for a in begin]
    merged = cost_aware.search(problem, budget, begin)  # cost_aware's own plan: never worse than it
    results += [merged, improve_by_moves(problem, merged, budget // 3, swaps=True)]
    return pick_best(problem, results)
