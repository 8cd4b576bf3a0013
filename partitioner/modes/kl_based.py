"""``kl_based``: Kernighan-Lin refinement of the size-based plan.

Reference: ``Partitioner.kl_based_partition`` (torch.fx.experimental.accelerator_partitioner),
which tries swapping every node with every node of every other partition and re-evaluates the
whole graph by enumerating paths for each try. Here only boundary nodes are tried (a node with no
neighbour in the other partition cannot shorten a path by moving there), each try is one
O(N + E) evaluation, and each round applies the best move found, not the last one tried.
O(budget * (N + E)); the budget defaults to :func:`search.default_budget`.
"""

from __future__ import annotations

from .base import Assignment, Problem, fill_in_order
from .search import default_budget, improve_by_moves

__all__ = ["partition"]


def partition(problem: Problem) -> Assignment:
    start = fill_in_order(problem, problem.graph.op_indices)
    budget = int(problem.options.get("search_budget") or default_budget(problem))
    return improve_by_moves(problem, start, budget, swaps=True)
