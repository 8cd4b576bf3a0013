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


def search(inp: EnumInput) -> EnumResult:  # noqa: C901 - one search, its cuts kept together
    """The branch and bound of NOTE: [Plan enumeration]. Exponential in the op count."""
    began = time.perf_counter()
    n, devices = len(inp.w), len(inp.capacity)
    w, preds, capacity = inp.w, inp.preds, inp.capacity
    pred_mask = [sum(1 << u for u in ps) for ps in preds]
    read_mask = [sum(1 << t for t in rs) for rs in inp.reads]
    user_mask = [sum(1 << v for v in range(n) if u in preds[v]) for u in range(n)]
    tbytes = inp.tensor_bytes
    free_comm = not inp.rate or math.isinf(inp.rate)
    one_comm = [0.0 if free_comm else inp.transfer_latency_s + tbytes[u] / inp.rate for u in range(n)]
    best = [inp.upper_s]  # the latency to beat
    best_plan: list[tuple[tuple[int, tuple[int, ...]], ...]] = []
    visited = [0]
    deadline = began + inp.time_limit_s
    memo_memory: dict[int, int] = {}
    memo_critical: dict[int, float] = {}
    memo_downsets: dict[tuple[int, int, int], list[int]] = {}
    memo_fits: dict[tuple[int, tuple[int, ...], tuple[int, ...]], bool] = {}
    seen: dict[tuple[object, ...], list[tuple[float, ...]]] = {}

    memo_bits: dict[int, list[int]] = {}
    memo_room: dict[tuple[int, int], int] = {}
    memo_open: dict[tuple[bool, ...], list[int]] = {}

    def bits_of(mask: int) -> list[int]:
        got = memo_bits.get(mask)
        if got is None:
            got = memo_bits[mask] = [v for v in range(n) if mask >> v & 1]
        return got

    def room(d: int, held: int) -> int:
        """The ops that device d, holding ``held``, could still take one at a time."""
        got = memo_room.get((d, held))
        if got is None:
            got = sum(1 << v for v in range(n) if memory(held | 1 << v) <= capacity[d])
            memo_room[(d, held)] = got
        return got

    def memory(ops: int) -> int:
        """Bytes a device holding ``ops`` stores: their totals and every tensor they read from
        elsewhere, once."""
        got = memo_memory.get(ops)
        if got is None:
            reads = 0
            got = 0
            for v in bits_of(ops):
                got += inp.op_bytes[v]
                reads |= read_mask[v]
            reads &= ~ops
            got += sum(tbytes[t] for t in range(len(tbytes)) if reads >> t & 1)
            memo_memory[ops] = got
        return got

    def sent_bytes(mask: int) -> int:
        return sum(tbytes[u] for u in bits_of(mask))

    def critical(ops: int) -> float:
        got = memo_critical.get(ops)
        if got is None:
            longest = [0.0] * n
            got = 0.0
            for v in bits_of(ops):
                m = 0.0
                for u in preds[v]:
                    if ops >> u & 1 and longest[u] > m:
                        m = longest[u]
                longest[v] = m + w[v]
                if longest[v] > got:
                    got = longest[v]
            memo_critical[ops] = got
        return got

    def downsets(rest: int, held: int, cap: int) -> list[int]:
        """Every non-empty down-set of the unplaced ops ``rest`` that a device holding ``held``
        can take within ``cap`` bytes."""
        key = (rest, held, cap)
        found = memo_downsets.get(key)
        if found is not None:
            return found
        found = []
        order = bits_of(rest)

        def grow(i: int, chosen: int) -> None:
            if i == len(order):
                if chosen:
                    found.append(chosen)
                return
            v = order[i]
            grow(i + 1, chosen)
            if pred_mask[v] & rest & ~chosen:  # an unplaced input left out
                return
            if memory(held | chosen | 1 << v) <= cap:  # memory only grows with more ops
                grow(i + 1, chosen | 1 << v)

        grow(0, 0)
        memo_downsets[key] = found
        return found

    def open_devices(dev_ops: tuple[int, ...]) -> list[int]:
        """The used devices and, of the unused, the first of each memory (it stands for the others)."""
        used = tuple(bool(ops) for ops in dev_ops)
        got = memo_open.get(used)
        if got is None:
            got = memo_open[used] = [
                d
                for d in range(devices)
                if used[d] or not any(not used[e] and capacity[e] == capacity[d] for e in range(d))
            ]
        return got

    def fits(rest: int, dev_ops: tuple[int, ...], may: tuple[int, ...]) -> bool:
        """Whether the ops of ``rest`` can go to devices within their memory, op v to device d
        only where bit v of ``may[d]`` is set (memoised)."""
        if not rest:
            return True
        key = (rest, dev_ops, may)
        got = memo_fits.get(key)
        if got is None:
            v = (rest & -rest).bit_length() - 1
            got = False
            for d in open_devices(dev_ops):
                grown = dev_ops[d] | 1 << v
                if may[d] >> v & 1 and room(d, dev_ops[d]) >> v & 1:
                    if fits(rest & ~(1 << v), dev_ops[:d] + (grown,) + dev_ops[d + 1 :], may):
                        got = True
                        break
            memo_fits[key] = got
        return got

    def bound(
        rest: int, free: tuple[float, ...], fin: list[float], dev: list[int], dev_ops: tuple[int, ...]
    ) -> tuple[float, tuple[int, ...]]:
        """The latest earliest finish of an unplaced op, and per device the unplaced ops that
        could finish there before the best plan found. An op on a device (its memory alone
        permitting) finishes no earlier than its time after the device is free and after each
        input arrived: a placed input from its partition, an unplaced one at its own earliest
        finish on the device that suits, each plus its one tensor's transfer between devices."""
        early: list[list[float]] = [[]] * n
        elsewhere = [0.0] * n  # an unplaced op's output on any device, with its transfer
        top = 0.0
        limit = best[0]
        may = [0] * devices
        rooms = [room(d, dev_ops[d]) for d in range(devices)]
        for v in bits_of(rest):
            row = []
            for d in range(devices):
                if not rooms[d] >> v & 1:
                    row.append(math.inf)
                    continue
                r = free[d]
                for u in preds[v]:
                    if rest >> u & 1:
                        t = early[u][d]
                        if elsewhere[u] < t:
                            t = elsewhere[u]
                    elif dev[u] != d:
                        t = fin[u] + one_comm[u]
                    else:
                        t = fin[u]
                    if t > r:
                        r = t
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
        rest: int, dev_ops: tuple[int, ...], free: tuple[float, ...], parts: list[tuple[int, int, float]], latest: float
    ) -> bool:
        live = [(ops & ~rest & sum(user_mask[u] & rest and 1 << u for u in bits_of(ops)), d, f) for d, ops, f in parts]
        live = sorted((m, d, f) for m, d, f in live if m)
        key = (rest, dev_ops, tuple((m, d) for m, d, _ in live))
        times = (latest,) + free + tuple(f for _, _, f in live)
        stored = seen.setdefault(key, [])
        for other in stored:
            if all(a <= b for a, b in zip(other, times)):
                return True
        stored[:] = [o for o in stored if not all(b <= a for a, b in zip(o, times))]
        stored.append(times)
        return False

    def step(
        rest: int,
        parts: list[tuple[int, int, float]],
        free: tuple[float, ...],
        fin: list[float],
        dev: list[int],
        dev_ops: tuple[int, ...],
        latest: float,
    ) -> None:
        visited[0] += 1
        if visited[0] & 255 == 0 and time.perf_counter() > deadline:
            raise _Timeout
        if not rest:
            if latest < best[0]:
                best[0] = latest
                best_plan[:] = [tuple((d, tuple(bits_of(ops))) for d, ops, _ in parts)]
                if latest <= inp.lower_s * (1 + OPTIMALITY_TOLERANCE):
                    raise _Reached
            return
        allowed = open_devices(dev_ops)
        low, may = bound(rest, free, fin, dev, dev_ops)
        if max(latest, low) >= best[0]:
            return
        if not fits(rest, dev_ops, may) or dominated(rest, dev_ops, free, parts, latest):
            return
        children = []
        for d in allowed:
            for ops in downsets(rest, dev_ops[d], capacity[d]):
                if ops & ~may[d]:  # an op that cannot finish there before the best plan found
                    continue
                start = free[d]
                reads = 0
                for v in bits_of(ops):
                    reads |= pred_mask[v]
                reads &= ~ops
                if reads:
                    for qd, qops, qfin in parts:
                        got = reads & qops
                        if got:
                            t = (
                                qfin
                                if qd == d or free_comm
                                else (qfin + inp.transfer_latency_s + sent_bytes(got) / inp.rate)
                            )
                            if t > start:
                                start = t
                finish = start + critical(ops)
                if finish < best[0]:
                    children.append((finish, -ops.bit_count(), d, ops))
        children.sort()
        for finish, _, d, ops in children:
            if max(latest, finish) >= best[0]:
                continue
            parts.append((d, ops, finish))
            saved = [(v, fin[v], dev[v]) for v in bits_of(ops)]
            for v, _, _ in saved:
                fin[v], dev[v] = finish, d
            step(
                rest & ~ops,
                parts,
                free[:d] + (finish,) + free[d + 1 :],
                fin,
                dev,
                dev_ops[:d] + (dev_ops[d] | ops,) + dev_ops[d + 1 :],
                max(latest, finish),
            )
            parts.pop()

    complete = True
    try:
        if inp.upper_s <= inp.lower_s * (1 + OPTIMALITY_TOLERANCE):
            raise _Reached
        step((1 << n) - 1, [], (0.0,) * devices, [0.0] * n, [-1] * n, (0,) * devices, 0.0)
    except _Timeout:
        complete = False
    except _Reached:
        pass
    return EnumResult(
        complete, best[0], best_plan[0] if best_plan else None, visited[0], time.perf_counter() - began, inp.lower_s
    )
