"""Torch's ``cost_aware`` merge sequence, step for step, scored by the "torch" cost model.

Reference: ``Partitioner.cost_aware_partition``: one node per partition; each round tries every
pair of partitions whose BFS levels differ by at most one or that are connected, merges the pair
whose merged plan (re-mapped onto devices) has the lowest latency not above the current one
(the last such pair on ties), and stops when no pair qualifies. Under ``cost_model="torch"`` the
``cost_aware`` and ``kl_based`` searches take this plan as one more candidate on small graphs, so
they are never slower than torch's by torch's own latency. Each try is one O(N + E) evaluation
instead of torch's path enumeration, but the rounds are O(P^2) tries as in torch: O(P^3 (N + E))
in all, so it runs within an evaluation budget the caller gives (the search's own budget: torch's
plan is a candidate wherever it can be found in the time the search may take) and only up to
:data:`MAX_OPS` op nodes.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from partitioner.accelerator._base import Assignment, Problem
from partitioner.accelerator.size_based import map_onto_devices
from partitioner.cost.model import CostModel

__all__ = ["MAX_OPS", "merge_sequence"]

MAX_OPS = 400  # the rounds' pair loops alone grow as P^3 beyond


def merge_sequence(problem: Problem, max_evaluations: int | None = None) -> Assignment | None:
    """Torch's cost_aware plan, or None when the graph is larger than :data:`MAX_OPS` ops, the
    sequence needs more than ``max_evaluations`` plan evaluations, or torch's final partitions
    cannot all be mapped onto devices."""
    graph = problem.graph
    if len(graph.op_indices) > MAX_OPS:
        return None
    scorer = _Scorer(problem, max_evaluations)
    parts: list[frozenset[int]] = [frozenset([v]) for v in graph.op_indices]
    try:
        while len(parts) > 1:
            pair = _best_pair(problem, parts, scorer)
            if pair is None:
                break
            parts = _merged(parts, *pair)
    except _OverBudget:
        return None
    members = [sorted(p) for p in parts]
    devices_of = map_onto_devices(problem, members)
    if devices_of is None:
        return None
    return Assignment(_part(len(graph), members), devices_of)


class _OverBudget(Exception):
    """The sequence needs more evaluations than it was given."""


class _Scorer:
    """Torch's latency of a list of partitions, re-mapped onto devices, counting evaluations."""

    def __init__(self, problem: Problem, max_evaluations: int | None) -> None:
        self.problem = problem
        self.max_evaluations = max_evaluations
        self.spent = 0

    def score(self, ps: list[frozenset[int]], mapped: bool) -> float:
        self.spent += 1
        devices_of = map_onto_devices(self.problem, [sorted(p) for p in ps])
        if devices_of is None and mapped:
            return math.inf
        part = _part(len(self.problem.graph), ps)
        return self.problem.cost.evaluate(part, devices_of or [[] for _ in ps]).latency_s

    def check_budget(self) -> None:
        if self.max_evaluations is not None and self.spent >= self.max_evaluations:
            raise _OverBudget


def _best_pair(problem: Problem, parts: list[frozenset[int]], scorer: _Scorer) -> tuple[int, int] | None:
    """One round: the pair whose merge gives the lowest latency not above the current one (the
    last on ties), among pairs whose BFS levels differ by at most one or that are connected and
    whose merge leaves no cycle; None when no pair qualifies."""
    cost = problem.cost
    current = scorer.score(parts, mapped=False)
    level, kids = _levels(cost, parts), _children(cost, parts)
    best: tuple[int, int] | None = None
    for i in range(len(parts) - 1):
        for j in range(i + 1, len(parts)):
            if abs(level[i] - level[j]) > 1 and j not in kids[i] and i not in kids[j]:
                continue
            merged = _merged(parts, i, j)
            if _cyclic(merged, _children(cost, merged)):
                continue
            scorer.check_budget()
            new = scorer.score(merged, mapped=True)
            if new <= current:
                best, current = (i, j), new
    return best


def _merged(parts: list[frozenset[int]], i: int, j: int) -> list[frozenset[int]]:
    """Partitions ``i`` and ``j`` merged, last, the others in order."""
    return [p for k, p in enumerate(parts) if k not in (i, j)] + [parts[i] | parts[j]]


def _part(n: int, groups: Sequence[Iterable[int]]) -> list[int]:
    part = [-1] * n
    for i, p in enumerate(groups):
        for v in p:
            part[v] = i
    return part


def _children(cost: CostModel, ps: list[frozenset[int]]) -> list[set[int]]:
    owner = {v: i for i, p in enumerate(ps) for v in p}
    return [{owner[u] for v in p for u in cost.op_users[v] if owner[u] != i} for i, p in enumerate(ps)]


def _levels(cost: CostModel, ps: list[frozenset[int]]) -> list[int]:
    """Torch's ``get_bfs_level_partition``: each partition's longest path depth."""
    kids = _children(cost, ps)
    indeg = [0] * len(ps)
    for ks in kids:
        for k in ks:
            indeg[k] += 1
    level = [0] * len(ps)
    frontier = [i for i in range(len(ps)) if indeg[i] == 0]
    while frontier:
        i = frontier.pop()
        for k in kids[i]:
            level[k] = max(level[k], level[i] + 1)
            indeg[k] -= 1
            if not indeg[k]:
                frontier.append(k)
    return level


def _cyclic(parts: list[frozenset[int]], kids: list[set[int]]) -> bool:
    """Torch's ``check_dependency`` on the merged (last) partition: does it reach itself?"""
    start = len(parts) - 1
    seen, stack = {start}, [start]
    while stack:
        for k in kids[stack.pop()]:
            if k == start:
                return True
            if k not in seen:
                seen.add(k)
                stack.append(k)
    return False
