"""``kl_based``: Kernighan-Lin refinement of the ``cost_aware`` plan.

Reference: ``Partitioner.kl_based_partition`` (torch.fx.experimental.accelerator_partitioner),
which tries swapping every node with every node of every other partition and re-evaluates the
whole graph by enumerating paths for each try. Here a try updates the two partitions it touches
(:mod:`partitioner.cost.incremental`); on large graphs only boundary nodes are tried (a node with no
neighbour in the other partition rarely shortens a path by moving there); each round applies the
best move found, not the last one tried, and whole partitions may change device (the reference
re-maps devices after each swap). KL is a refinement, only as good as where it starts: it starts
from the ``cost_aware`` plan, computed with cost_aware's whole budget from the same fills, and
keeps that plan where its moves and swaps find nothing better, so it is never worse than
cost_aware. (Runs from the fills themselves, as the reference starts, cost a quarter of the
time and, once cost_aware refines the time-ordered fills, gained 1 % on one of 27 graphs
and lost as much on another.) O(budget * (N + E)); the budget defaults to
:func:`search.default_budget`.
"""

from __future__ import annotations

from partitioner.accelerator import cost_aware
from partitioner.accelerator._base import Assignment, Problem, pick_best
from partitioner.accelerator._search import default_budget, improve_by_moves

__all__ = ["partition"]


def partition(problem: Problem) -> Assignment:
    budget = problem.options.search_budget or default_budget(problem)
    merged = cost_aware.search(problem, budget)  # cost_aware's own plan: never worse than it
    refined = improve_by_moves(problem, merged, budget // 3, swaps=True)
    same = refined.part == merged.part and refined.devices_of == merged.devices_of
    return merged if same else pick_best(problem, [merged, refined])
