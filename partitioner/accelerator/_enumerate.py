"""Branch and bound over every plan of a small graph under the physical cost model: the exact
search the ``optimal`` mode runs before CP-SAT where the graph has at most :data:`MAX_OPS` ops.

Plain numbers in, plain numbers out; it runs in a worker process with a time limit
(:mod:`.optimal` builds the input and reads the answer).

# NOTE: [Plan enumeration]
A plan under the physical cost model is a sequence of partitions in the order they run, each a
set of ops on one device, every op's inputs placed in the same or an earlier partition (the
plan's ids are a topological order in which each device runs its partitions). The search builds
that sequence one partition at a time, depth first: a partition is a device and a down-set of
the ops not yet placed (an op comes with its unplaced inputs) whose device memory (the union
rule) stays within capacity. Its start is the latest of its device's free time and each parent
partition's finish plus the edge's transfer (the bytes of every parent output it reads), exactly
as :meth:`CostModel.schedule` computes it, so a complete sequence's latency is the plan's.

Four cuts, none of which loses the best plan:
- Bound: an unplaced op on a device finishes no earlier than its time plus the latest of the
  device's free time and each input's arrival (a placed input at its partition's finish, an
  unplaced one at its own earliest finish on whichever device suits it, each plus its one
  tensor's transfer where the devices differ); the op finishes no earlier than the least of
  these over the devices whose memory it fits. A branch whose bound is no better than the best
  plan found is dropped. The unplaced ops must also fit in the memory the devices have left.
- Devices of equal memory are interchangeable (every device has the same speed and every pair
  the same rate): of the unused ones only the first of each memory is tried.
- A partial plan is dominated by another already searched with the same unplaced ops, the same
  ops on each device (so the same memory), the same partitions still to feed unplaced ops (the
  same ops of theirs on the same devices) and no later times (each device's free time, each such
  partition's finish, the latest finish): every completion of the first is one of the second,
  no slower, since a start is a maximum of such times. This also folds the orders of partitions
  that do not depend on each other, which give one schedule.
- The unplaced ops must fit the memory the devices have left, each on a device where its bound
  is below the best plan found: a memoised search places them one by one (a partition per op is
  always a plan, so memory alone decides whether a placement exists).
A proven lower bound (CP-SAT's node-level relaxation, run first) ends the search early when a
plan reaches it. The search is exhaustive when it ends within its time limit; the best plan found is then
optimal (and the heuristics' best plan is its starting incumbent). Exponential in the op count
(every ordered set partition, times the devices): see :data:`MAX_OPS`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

from partitioner.accelerator._cpsat import RelaxInput, solve_relaxation
from partitioner.accelerator._enumerate_sets import Tables
from partitioner.plan.records import OPTIMALITY_TOLERANCE

__all__ = ["EnumInput", "EnumResult", "search", "bounded_search", "MAX_OPS"]

MAX_OPS = 14  # graphs with more ops go to CP-SAT alone


@dataclass(frozen=True)
class EnumInput:
    w: tuple[float, ...]  # seconds per op, ops in a topological order
    preds: tuple[tuple[int, ...], ...]  # op inputs
    op_bytes: tuple[int, ...]  # each op's total bytes (output and parameters)
    reads: tuple[tuple[int, ...], ...]  # tensors each op reads: op index, or n + an outside input
    tensor_bytes: tuple[int, ...]  # bytes of each tensor (ops first, then outside inputs)
    rate: float  # bytes per second between devices; math.inf: transfers are free
    transfer_latency_s: float
    capacity: tuple[int, ...]  # bytes per device index
    upper_s: float  # latency of the best plan known (math.inf when none)
    time_limit_s: float
    lower_s: float = 0.0  # a proven lower bound: a plan this fast ends the search


@dataclass(frozen=True)
class EnumResult:
    """``complete``: every plan was searched, so ``plan`` (when found) is optimal and no plan is
    faster than ``upper_s``. ``plan``: (device index, ops) per partition in run order, or None
    when none beat the starting incumbent. ``visited``: partial plans searched."""

    complete: bool
    upper_s: float
    plan: tuple[tuple[int, tuple[int, ...]], ...] | None
    visited: int
    wall_s: float
    lower_s: float = 0.0  # the proven lower bound the search was given


class _Timeout(Exception):
    pass


class _Reached(Exception):
    pass


def bounded_search(inp: EnumInput, relax: RelaxInput, tick_s: float) -> EnumResult:
    """The worker's entry: CP-SAT's node-level relaxation (NOTE: [Relaxation bound]) first, with
    part of the time limit; its proven bound (``tick_s`` per tick) then ends the plan search as
    soon as a plan reaches it."""
    began = time.perf_counter()
    found = solve_relaxation(relax)
    lower = found.bound * tick_s if found.status in ("OPTIMAL", "FEASIBLE", "UNKNOWN") else 0.0
    rest = max(0.0, inp.time_limit_s - (time.perf_counter() - began))
    return search(dataclasses.replace(inp, lower_s=lower, time_limit_s=rest))


def search(inp: EnumInput) -> EnumResult:
    """The branch and bound of NOTE: [Plan enumeration]. Exponential in the op count."""
    began = time.perf_counter()
    run = _Search(
        Tables(inp.w, inp.preds, inp.op_bytes, inp.reads, inp.tensor_bytes, inp.capacity), inp, began + inp.time_limit_s
    )
    complete = True
    try:
        if inp.upper_s <= inp.lower_s * (1 + OPTIMALITY_TOLERANCE):
            raise _Reached
        n, devices = len(inp.w), len(inp.capacity)
        run.step((1 << n) - 1, [], (0.0,) * devices, [0.0] * n, [-1] * n, (0,) * devices, 0.0)
    except _Timeout:
        complete = False
    except _Reached:
        pass
    plan = run.best_plan[0] if run.best_plan else None
    return EnumResult(complete, run.best, plan, run.visited, time.perf_counter() - began, inp.lower_s)


class _Search:
    """One depth-first search: the best plan found so far, the partial plans seen (for the
    dominance cut) and the steps that extend a partial plan by one partition."""

    def __init__(self, tables: Tables, inp: EnumInput, deadline: float) -> None:
        self.t, self.inp, self.deadline = tables, inp, deadline
        self.free_comm = not inp.rate or math.isinf(inp.rate)
        tbytes = inp.tensor_bytes
        self.one_comm = [
            0.0 if self.free_comm else inp.transfer_latency_s + tbytes[u] / inp.rate for u in range(tables.n)
        ]
        self.best = inp.upper_s  # the latency to beat
        self.best_plan: list[tuple[tuple[int, tuple[int, ...]], ...]] = []
        self.visited = 0
        self.seen: dict[tuple[object, ...], list[tuple[float, ...]]] = {}

    def bound(
        self, rest: int, free: tuple[float, ...], fin: list[float], dev: list[int], dev_ops: tuple[int, ...]
    ) -> tuple[float, tuple[int, ...]]:
        """The latest earliest finish of an unplaced op, and per device the unplaced ops that
        could finish there before the best plan found. An op on a device (its memory alone
        permitting) finishes no earlier than its time after the device is free and after each
        input arrived: a placed input from its partition, an unplaced one at its own earliest
        finish on the device that suits, each plus its one tensor's transfer between devices."""
        t = self.t
        n, devices, preds, w, one_comm = t.n, t.devices, t.preds, t.w, self.one_comm
        early: list[list[float]] = [[]] * n
        elsewhere = [0.0] * n  # an unplaced op's output on any device, with its transfer
        top = 0.0
        limit = self.best
        may = [0] * devices
        rooms = [t.room(d, dev_ops[d]) for d in range(devices)]
        for v in t.bits_of(rest):
            row = []
            for d in range(devices):
                if not rooms[d] >> v & 1:
                    row.append(math.inf)
                    continue
                r = free[d]
                for u in preds[v]:
                    if rest >> u & 1:
                        a = early[u][d]
                        if elsewhere[u] < a:
                            a = elsewhere[u]
                    elif dev[u] != d:
                        a = fin[u] + one_comm[u]
                    else:
                        a = fin[u]
                    if a > r:
                        r = a
                r += w[v]
                if r < limit:
                    may[d] |= 1 << v
                else:
                    r = math.inf
                row.append(r)
            early[v] = row
            low = min(row)
            if low >= limit:  # this op alone rules the branch out: the rest need not be bounded
                return low, tuple(may)
            elsewhere[v] = low + one_comm[v]
            if low > top:
                top = low
        return top, tuple(may)

    def dominated(
        self,
        rest: int,
        dev_ops: tuple[int, ...],
        free: tuple[float, ...],
        parts: list[tuple[int, int, float]],
        latest: float,
    ) -> bool:
        """Whether a partial plan searched before is no later everywhere (NOTE: [Plan enumeration])."""
        user_mask, bits_of = self.t.user_mask, self.t.bits_of
        live = [(ops & ~rest & sum(user_mask[u] & rest and 1 << u for u in bits_of(ops)), d, f) for d, ops, f in parts]
        live = sorted((m, d, f) for m, d, f in live if m)
        key = (rest, dev_ops, tuple((m, d) for m, d, _ in live))
        times = (latest,) + free + tuple(f for _, _, f in live)
        stored = self.seen.setdefault(key, [])
        for other in stored:
            if all(a <= b for a, b in zip(other, times)):
                return True
        stored[:] = [o for o in stored if not all(b <= a for a, b in zip(o, times))]
        stored.append(times)
        return False

    def children(
        self,
        rest: int,
        parts: list[tuple[int, int, float]],
        free: tuple[float, ...],
        dev_ops: tuple[int, ...],
        may: tuple[int, ...],
    ) -> list[tuple[float, int, int, int]]:
        """The next partitions worth trying, soonest finish first: (finish, -op count, device, ops)."""
        t, inp = self.t, self.inp
        children = []
        for d in t.open_devices(dev_ops):
            for ops in t.downsets(rest, dev_ops[d], t.capacity[d]):
                if ops & ~may[d]:  # an op that cannot finish there before the best plan found
                    continue
                start = free[d]
                reads = 0
                for v in t.bits_of(ops):
                    reads |= t.pred_mask[v]
                reads &= ~ops
                if reads:
                    for qd, qops, qfin in parts:
                        got = reads & qops
                        if got:
                            a = (
                                qfin
                                if qd == d or self.free_comm
                                else (qfin + inp.transfer_latency_s + t.sent_bytes(got) / inp.rate)
                            )
                            if a > start:
                                start = a
                finish = start + t.critical(ops)
                if finish < self.best:
                    children.append((finish, -ops.bit_count(), d, ops))
        children.sort()
        return children

    def complete(self, parts: list[tuple[int, int, float]], latest: float) -> None:
        """Every op is placed: keep the plan if it is the best so far."""
        if latest < self.best:
            self.best = latest
            self.best_plan[:] = [tuple((d, tuple(self.t.bits_of(ops))) for d, ops, _ in parts)]
            if latest <= self.inp.lower_s * (1 + OPTIMALITY_TOLERANCE):
                raise _Reached

    def step(
        self,
        rest: int,
        parts: list[tuple[int, int, float]],
        free: tuple[float, ...],
        fin: list[float],
        dev: list[int],
        dev_ops: tuple[int, ...],
        latest: float,
    ) -> None:
        """Extend the partial plan ``parts`` (the unplaced ops ``rest``) every way the cuts allow."""
        self.visited += 1
        if self.visited & 255 == 0 and time.perf_counter() > self.deadline:
            raise _Timeout
        if not rest:
            self.complete(parts, latest)
            return
        low, may = self.bound(rest, free, fin, dev, dev_ops)
        if max(latest, low) >= self.best:
            return
        if not self.t.fits(rest, dev_ops, may) or self.dominated(rest, dev_ops, free, parts, latest):
            return
        for finish, _, d, ops in self.children(rest, parts, free, dev_ops, may):
            if max(latest, finish) >= self.best:
                continue
            parts.append((d, ops, finish))
            for v in self.t.bits_of(ops):
                fin[v], dev[v] = finish, d
            self.step(
                rest & ~ops,
                parts,
                free[:d] + (finish,) + free[d + 1 :],
                fin,
                dev,
                dev_ops[:d] + (dev_ops[d] | ops,) + dev_ops[d + 1 :],
                max(latest, finish),
            )
            parts.pop()
