"""Merging neighbouring partitions while the latency does not grow (the fine path of
``cost_aware``), on the local search's state (:mod:`._search`)."""

from __future__ import annotations

from partitioner.accelerator._base import Assignment, Problem
from partitioner.accelerator._search import _EPS, _score, _State
from partitioner.units import format_seconds

__all__ = ["merge_partitions"]


def _contract_chains(problem: Problem, a: Assignment) -> Assignment:
    """Merge every partition into its only parent when that parent has no other child and both
    sit on the same devices. Such a merge never lengthens a path (the pair still starts when the
    parent did and its critical path is at most the sum of theirs), so it needs no evaluation.
    O(N + E)."""
    ev = problem.cost.evaluate(a.part, a.devices_of)
    if ev.order is None:
        return a
    num = len(a.devices_of)
    parents: list[set[int]] = [set() for _ in range(num)]
    children: list[set[int]] = [set() for _ in range(num)]
    for x, y in ev.edges:
        children[x].add(y)
        parents[y].add(x)
    root = list(range(num))
    for p in ev.order:
        if len(children[p]) == 1:
            (q,) = children[p]
            if parents[q] == {p} and a.devices_of[q] == a.devices_of[p]:
                root[q] = root[p]
    return Assignment([root[p] if p >= 0 else -1 for p in a.part], [list(d) for d in a.devices_of])


def merge_partitions(problem: Problem, a: Assignment, budget: int) -> Assignment:
    """Merge neighbouring partitions on the same devices while the latency does not grow.

    Chains are contracted first without evaluation (:func:`_contract_chains`); then it sweeps the partition edges in topological order and merges the two ends when the exact
    latency stays the same or drops (the reference ``cost_aware`` accepts such merges too);
    repeats until a sweep merges nothing or the budget is spent. O(budget * (N + E)).
    """
    contracted = _contract_chains(problem, a)
    s = _State(problem, contracted)
    if problem.record is not None:
        shifts = [(v, q) for v, (p, q) in enumerate(zip(a.part, contracted.part)) if p != q]
        problem.record(
            "contract",
            f"{len({a.part[v] for v, _ in shifts})} partition(s) merged into their only "
            "parent on the same devices (never slower, no evaluation needed)",
            shifts,
            latency_s=s.latency,
        )
    merged = True
    while merged and s.evals < budget:
        merged = False
        for v in range(len(s.part)):
            p = s.part[v]
            if p < 0:
                continue
            for u in s.cost.op_preds[v]:
                q = s.part[u]
                p = s.part[v]
                if q == p or s.devices_of[q] != s.devices_of[p] or s.evals >= budget:
                    continue
                moves = tuple((w, q) for w in sorted(s.members[p]))
                lat = _score(s, moves)
                ok = lat <= s.latency + _EPS
                if s.record is not None:
                    s.record(
                        "merge",
                        f"merge P{p} into P{q}: latency {format_seconds(lat)}, "
                        + ("not longer: merged" if ok else "longer: kept apart"),
                        moves,
                        accepted=ok,
                        latency_s=lat,
                    )
                if ok:
                    s.apply(moves)
                    s.latency = min(lat, s.latency)
                    merged = True
    return s.assignment()
