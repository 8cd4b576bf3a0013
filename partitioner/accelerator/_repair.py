"""A placement that fits where every fill ran out of room: a tabu search that moves single nodes
between devices to drive the memory over capacity to zero, the fills' last fallback.

NOTE: [Repairing a placement] Any map of op nodes to devices is a valid plan once each device's
nodes are cut into runs of the topological order (every partition edge then goes forward), so a
plan exists exactly when some map keeps every device within its memory. The fills decide each
node once, in order, and a choice made early (the encoder's embedding on one device, the tied
output projection that reads the same weight on the other: the tiny T5 on two devices of 60 %)
can leave a later node nowhere to go. Here every node starts where it adds the least over
capacity (then the fewest bytes, then the least room left), and each step makes the move of one
node off a device over capacity that lowers the total overflow plus the bytes all devices hold
most: a node that shares an input with another device's nodes, or whose users sit there, moves
there at little cost, so shared weights gather even where the overflow does not fall at once.
Where no move lowers it, the least harmful move is made among those not made recently (tabu
search: a node moved stays put for a few steps, unless moving it gives the lowest overflow yet).
Seven more starts from seeded random maps share the budget (on graphs of 13 to 40 ops with a
map planted to fit exactly, one start left 8 of 300 unsolved, eight starts none of 800). The
tally counts a device as both cost models count runs: each member's output and parameters, each
placeholder or attribute read once, an op output from another device once per device (physical:
a tensor is stored once) or once per reader (torch's ``get_extra_size_of``); torch's rule also
counts a placeholder again for each partition that reads it, which the runs decide, so a map
that :meth:`Problem.fits` refuses there is searched for again with those counted per reader.
Deterministic. Each step costs O(D deg) per node on the devices over capacity; the search stops
after ``1000 N D`` tries (at most ``max_tries``).
"""

from __future__ import annotations

import random
from typing import Sequence

from partitioner.accelerator._base import Assignment, Problem

__all__ = ["repair_fit", "runs"]

_HELD_WEIGHT = 1.0  # a byte less held on all devices together counts as a byte less over


def runs(problem: Problem, device_of: Sequence[int]) -> Assignment:
    """Node -> device as partitions: maximal runs of one device in topological order, so the
    partition DAG is acyclic whatever the placement (every edge goes forward in the order)."""
    part = [-1] * len(problem.graph)
    devices_of: list[list[int]] = []
    last = None
    for v in problem.graph.op_indices:
        if device_of[v] != last:
            devices_of.append([device_of[v]])
            last = device_of[v]
        part[v] = len(devices_of) - 1
    return Assignment(part, devices_of)


class _Tally:
    """Bytes each device holds for a node -> device map, under NOTE: [Repairing a placement]'s
    rule, with the change a move would make in O(deg)."""

    def __init__(self, problem: Problem, inputs_per_reader: bool = False) -> None:
        cost = problem.cost
        self.out, self.total, self.preds = cost.out, cost.total, cost.preds
        self.is_op = cost.is_op
        self.per_reader = cost.torch
        self.inputs_per_reader = inputs_per_reader  # placeholders and attributes too
        self.where = [-1] * cost.n
        self.bytes = {d.logical_id: 0 for d in problem.devices}
        self.readers: dict[int, dict[int, int]] = {d: {} for d in self.bytes}  # d -> u -> ops on d reading u

    def change(self, v: int, d: int, sign: int) -> int:
        """Bytes on ``d`` after adding (``sign`` 1) or removing (-1) node v, minus before."""
        out, where, readers = self.out, self.where, self.readers[d]
        delta = self.total[v]
        for u in self.preds[v]:
            if self.is_op[u]:
                if where[u] != d and (self.per_reader or not readers.get(u) or sign < 0 and readers[u] == 1):
                    delta += out[u]
            elif self.inputs_per_reader or not readers.get(u) or sign < 0 and readers[u] == 1:
                delta += out[u]
        n = readers.get(v, 0)  # members of d that read v: v's output is outside once v is not
        if n:
            delta -= out[v] * (n if self.per_reader else 1)
        return sign * delta

    def place(self, v: int, d: int, sign: int) -> None:
        self.bytes[d] += self.change(v, d, sign)
        readers = self.readers[d]
        for u in self.preds[v]:
            left = readers.get(u, 0) + sign
            if left:
                readers[u] = left
            else:
                del readers[u]
        self.where[v] = d if sign > 0 else -1


def repair_fit(problem: Problem, max_tries: int = 400_000) -> Assignment | None:
    """A node -> device map within every device's memory, as runs (NOTE: [Repairing a
    placement]); None when the search ends without one. Under torch's cost model a placeholder
    or attribute counts once for each partition on a device that reads it, which the tally can
    not see before the runs are cut: a map the first pass finds that does not fit so is searched
    again with them counted once per reader (more than torch counts)."""
    ops = len(problem.graph.op_indices)
    per_start = min(max_tries, _TRIES_PER_NODE * ops * len(problem.devices)) // _STARTS
    found = _first(problem, per_start, inputs_per_reader=False)
    if found is None or problem.fits(found):
        return found
    found = _first(problem, per_start, inputs_per_reader=True)
    return found if found is not None and problem.fits(found) else None


def _first(problem: Problem, per_start: int, inputs_per_reader: bool) -> Assignment | None:
    """The first map that one of the starts brings within memory by the tally, if any."""
    for start in range(_STARTS):
        found = _search(problem, _Tally(problem, inputs_per_reader), per_start, start)
        if found is not None:
            return found
    return None


_STARTS = 8  # the first from the greedy placement, the others from random ones
_TRIES_PER_NODE = 1000  # tries per node and device, up to ``max_tries`` in all


def _search(problem: Problem, tally: _Tally, max_tries: int, seed: int = 0) -> Assignment | None:
    graph = problem.graph
    ops = list(graph.op_indices)
    if not ops:
        return None
    capacity = problem.capacity
    devices = [d.logical_id for d in problem.devices_by_memory()]

    def over(d: int, extra: int = 0) -> int:
        return max(0, tally.bytes[d] + extra - capacity[d])

    rng = random.Random(seed)
    for v in ops:  # least overflow, then the fewest bytes added, then the least room left
        if seed:
            best = rng.choice(devices)
        else:
            best = min(
                devices,
                key=lambda d: (
                    over(d, more := tally.change(v, d, 1)) - over(d),
                    more,
                    capacity[d] - tally.bytes[d] - more,
                ),
            )
        tally.place(v, best, 1)
    total = sum(over(d) for d in devices)
    lowest = total
    tabu = [0] * len(graph)
    tries = step = 0
    while total and tries < max_tries:
        step += 1
        full = {d for d in devices if over(d)}
        choice: tuple[float, float, int, int, int] | None = None
        for v in ops:
            a = tally.where[v]
            if a not in full:
                continue
            gone = tally.change(v, a, -1)
            freed = over(a, gone) - over(a)
            for b in devices:
                if b == a:
                    continue
                tries += 1
                more = tally.change(v, b, 1)
                delta = freed + over(b, more) - over(b)
                if tabu[v] > step and total + delta >= lowest:
                    continue
                key = (delta + (gone + more) * _HELD_WEIGHT, rng.random(), v, b, delta)
                if choice is None or key < choice:
                    choice = key
        if choice is None:  # every move tabu: wait for the first to expire
            pending = [t for t in tabu if t > step]
            if not pending:
                break
            step = min(pending) - 1
            continue
        _, _, v, b, delta = choice
        tally.place(v, tally.where[v], -1)
        tally.place(v, b, 1)
        tabu[v] = step + 3 + rng.randrange(max(2, len(ops) // 8))
        total += delta
        lowest = min(lowest, total)
    return runs(problem, tally.where) if not total else None
