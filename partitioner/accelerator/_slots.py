"""The ``optimal`` mode's plan model inputs (NOTE: [Plan model] in :mod:`._cpsat`): op nodes
grouped into units, slots per device, the integer model input, a plan as a start hint, and the
solver's slots read back as a plan.
"""

from __future__ import annotations

import math
from typing import Sequence

from partitioner.accelerator._base import Assignment, Problem
from partitioner.accelerator._cpsat import SlotInput, SolveResult, Tensor

__all__ = ["coarsen", "comm_s", "slots_per_device", "slot_input", "slot_hint", "decode", "MAX_SLOTS"]

MAX_SLOTS = 16  # slots (partitions) the plan model holds over all devices


def comm_s(problem: Problem, u: int) -> float:
    rate = problem.cost.rate
    return 0.0 if not rate or math.isinf(rate) else problem.graph.output_bytes[u] / rate


def coarsen(problem: Problem, limit: int) -> tuple[list[list[int]], bool]:
    """Op nodes grouped into at most ``limit`` units listed in a topological order: each op its
    own unit when there are few enough; else chains (an op whose only op input has it as its only
    op user) contracted, then consecutive units merged. Returns the units and whether any were
    merged. O(N + E)."""
    cost, ops = problem.cost, problem.graph.op_indices
    if len(ops) <= limit:
        return [[v] for v in ops], False
    unit_of: dict[int, int] = {}
    units: list[list[int]] = []
    for v in ops:
        preds = cost.op_preds[v]
        if len(preds) == 1 and len(cost.op_users[preds[0]]) == 1:
            g = unit_of[preds[0]]
        else:
            g = len(units)
            units.append([])
        units[g].append(v)
        unit_of[v] = g
    if len(units) > limit:  # every edge goes forward in this order, so runs of it stay acyclic
        size = math.ceil(len(units) / limit)
        units = [sum(units[i : i + size], []) for i in range(0, len(units), size)]
    return [sorted(u) for u in units], True


def slots_per_device(problem: Problem, units: Sequence[Sequence[int]], best: Assignment | None) -> int:
    if problem.cost.torch:
        return 1
    most = MAX_SLOTS // len(problem.devices)
    if len(units) * len(problem.devices) <= MAX_SLOTS:
        return len(units)  # small enough for every plan
    want = 2
    if best is not None:
        per_device: dict[int, int] = {}
        for p in {p for p in best.part if p >= 0}:
            for d in best.devices_of[p]:
                per_device[d] = per_device.get(d, 0) + 1
        want = max(want, max(per_device.values(), default=1))
    return max(1, min(want, most))


def slot_input(
    problem: Problem,
    units: Sequence[Sequence[int]],
    tick: float,
    k: int,
    hint: tuple[int, ...] | None,
    time_limit_s: float,
) -> SlotInput:
    cost, graph = problem.cost, problem.graph
    unit_of = {v: g for g, members in enumerate(units) for v in members}
    w, preds, size = [], [], []
    for members in units:
        inside = set(members)
        longest: dict[int, float] = {}
        for v in members:  # the unit's own critical path
            longest[v] = cost.node_s[v] + max((longest[u] for u in cost.op_preds[v] if u in inside), default=0.0)
        w.append(int(max(longest.values()) // tick))
        preds.append(tuple(sorted({unit_of[u] for v in members for u in cost.op_preds[v]} - {unit_of[members[0]]})))
        size.append(sum(cost.total[v] for v in members))
    tensors: list[Tensor] = []
    for u in range(len(graph)):
        src = unit_of.get(u, -1)
        if src < 0 and cost.is_op[u]:
            continue
        counts: dict[int, int] = {}
        for v in graph.users[u]:
            if cost.is_op[v] and unit_of[v] != src:
                counts[unit_of[v]] = counts.get(unit_of[v], 0) + 1
        if counts:
            ticks = int(comm_s(problem, u) // tick)
            tensors.append((src, cost.out[u], tuple(sorted(counts.items())), ticks, cost.total[u]))
    capacity = tuple(d.memory_bytes for d in problem.devices)
    return SlotInput(tuple(w), tuple(preds), tuple(size), tuple(tensors), capacity, k, cost.torch, hint, time_limit_s)


def slot_hint(problem: Problem, units: Sequence[Sequence[int]], a: Assignment, k: int) -> tuple[int, ...] | None:
    """``a`` as a slot per unit, when it fits the plan model (one device per partition, at most
    ``k`` partitions per device)."""
    index = {d.logical_id: i for i, d in enumerate(problem.devices)}
    ev = problem.cost.evaluate(a.part, a.devices_of)
    if ev.order is None or any(len(a.devices_of[p]) != 1 for p in set(a.part) if p >= 0):
        return None
    position: dict[int, int] = {}
    used: dict[int, int] = {}
    for p in ev.order:
        if not ev.members[p]:
            continue
        d = index[a.devices_of[p][0]]
        position[p] = d * k + used.get(d, 0)
        used[d] = used.get(d, 0) + 1
    if any(n > k for n in used.values()):
        return None
    hint = []
    for members in units:  # a unit split between partitions goes where most of it is (CP-SAT repairs)
        parts = [a.part[v] for v in members]
        hint.append(position[max(set(parts), key=lambda p: (parts.count(p), -p))])
    return tuple(hint)


def decode(problem: Problem, units: Sequence[Sequence[int]], k: int, answer: SolveResult) -> Assignment:
    """The solver's slots as partitions numbered in the order they run (rank, then start)."""
    assert answer.slot is not None
    slot = answer.slot
    used = sorted(set(slot), key=lambda s: (answer.rank[s], answer.start[s], s))
    ids = {s: i for i, s in enumerate(used)}
    part = [-1] * len(problem.graph)
    for g, members in enumerate(units):
        for v in members:
            part[v] = ids[slot[g]]
    devices_of = [[problem.devices[s // k].logical_id] for s in used]
    return Assignment(part, devices_of, ordered=True)
