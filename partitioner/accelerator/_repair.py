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
    ops = list(problem.graph.op_indices)
    if not ops:
        return None
    search = _TabuSearch(problem, tally, ops, seed)
    search.place_all()
    return runs(problem, tally.where) if search.run(max_tries) else None


class _TabuSearch:
    """One start of NOTE: [Repairing a placement]: every node placed, then single-node moves off
    the devices over capacity until none is over or the tries run out."""

    def __init__(self, problem: Problem, tally: _Tally, ops: list[int], seed: int) -> None:
        self.tally, self.ops, self.seed = tally, ops, seed
        self.capacity = problem.capacity
        self.devices = [d.logical_id for d in problem.devices_by_memory()]
        self.rng = random.Random(seed)
        self.tabu = [0] * len(problem.graph)  # the step until which a moved node stays put
        self.step = self.tries = 0

    def over(self, d: int, extra: int = 0) -> int:
        return max(0, self.tally.bytes[d] + extra - self.capacity[d])

    def place_all(self) -> None:
        """Each node where it adds the least overflow, then the fewest bytes, then leaves the least
        room (or, from a seed, on a random device)."""
        tally, capacity = self.tally, self.capacity
        for v in self.ops:  # least overflow, then the fewest bytes added, then the least room left
            if self.seed:
                best = self.rng.choice(self.devices)
            else:
                best = min(
                    self.devices,
                    key=lambda d: (
                        self.over(d, more := tally.change(v, d, 1)) - self.over(d),
                        more,
                        capacity[d] - tally.bytes[d] - more,
                    ),
                )
            tally.place(v, best, 1)

    def run(self, max_tries: int) -> bool:
        """Moves until no device is over capacity (True) or the tries or moves run out."""
        total = sum(self.over(d) for d in self.devices)
        lowest = total
        while total and self.tries < max_tries:
            self.step += 1
            choice = self.best_move(total, lowest)
            if choice is None:  # every move tabu: wait for the first to expire
                pending = [t for t in self.tabu if t > self.step]
                if not pending:
                    break
                self.step = min(pending) - 1
                continue
            _, _, v, b, delta = choice
            self.tally.place(v, self.tally.where[v], -1)
            self.tally.place(v, b, 1)
            self.tabu[v] = self.step + 3 + self.rng.randrange(max(2, len(self.ops) // 8))
            total += delta
            lowest = min(lowest, total)
        return not total

    def best_move(self, total: int, lowest: int) -> tuple[float, float, int, int, int] | None:
        """The move off a device over capacity that lowers the overflow plus the bytes held most
        (random ties), not tabu unless it gives the lowest overflow yet: (key, v, device, change
        in overflow)."""
        tally, over = self.tally, self.over
        full = {d for d in self.devices if over(d)}
        choice: tuple[float, float, int, int, int] | None = None
        for v in self.ops:
            a = tally.where[v]
            if a not in full:
                continue
            gone = tally.change(v, a, -1)
            freed = over(a, gone) - over(a)
            for b in self.devices:
                if b == a:
                    continue
                self.tries += 1
                more = tally.change(v, b, 1)
                delta = freed + over(b, more) - over(b)
                if self.tabu[v] > self.step and total + delta >= lowest:
                    continue
                key = (delta + (gone + more) * _HELD_WEIGHT, self.rng.random(), v, b, delta)
                if choice is None or key < choice:
                    choice = key
        return choice
