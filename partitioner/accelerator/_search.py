"""Local search shared by ``kl_based`` and ``cost_aware``: node moves, swaps and merges.

Every candidate is scored with the exact cost model, kept up to date per move under the
physical model (:class:`~partitioner.cost.incremental.IncrementalCost`; :meth:`CostModel.evaluate`,
O(N + E), under torch's), checked against device memory, and only strict improvements (moves,
swaps) or non-increases (merges, which make the plan simpler) are kept. Unlike the reference
``kl_based_partition``, which applies the last swap it tried, each round applies the best one found.
"""

from __future__ import annotations

import math
from typing import Iterable, Iterator, Sequence

from partitioner.accelerator._base import Assignment, Problem
from partitioner.accelerator._described import describe as _describe
from partitioner.accelerator._scored import SCORED_NODES, scored_trial
from partitioner.cost.incremental import DeviceMemory, IncrementalCost
from partitioner.units import format_seconds

__all__ = ["improve_by_moves", "default_budget"]

_EPS = 1e-12
_CHECKS_PER_EVAL = 20  # memory checks that cost the budget one evaluation
_KL_STEPS = 8  # moves a KL pass may take through worse plans before rolling back


def default_budget(problem: Problem) -> int:
    """Cost-model evaluations a search may spend, each O(N + E): 40 per op node while the
    graph is small, then capped so the whole search costs about 200,000 node visits, but at
    least 100 evaluations up to 10,000 nodes and 1,000,000 node visits beyond (20 at 50,000
    nodes: a try there moves one node between partitions of thousands, and the fills' plans
    gain under 0.01 % from the moves a larger budget affords, for a second more)."""
    n = max(1, len(problem.graph))
    return max(min(100, 1_000_000 // n), min(2000, 40 * len(problem.graph.op_indices), 200_000 // n))


class _State:
    def __init__(self, problem: Problem, a: Assignment) -> None:
        self.problem = problem
        self.cost = problem.cost
        self.capacity = problem.capacity
        # A fill's tally of this plan, or the state of a search that ended in it: O(N deg) saved.
        kept = problem.take_tally(a)
        if not isinstance(kept, tuple):
            self.part = list(a.part)
            self.devices_of = [list(d) for d in a.devices_of]
            self.memory = kept or DeviceMemory(self.cost, self.part, self.devices_of, self.capacity)
            # Physical model: each try updates the touched partitions only (NOTE: [Incremental]).
            self.inc = None if self.cost.torch else IncrementalCost(self.cost, self.part, self.devices_of)
            self.members = self.inc.members if self.inc is not None else [set() for _ in self.devices_of]
            for v, p in enumerate(self.part if self.inc is None else ()):  # inc.move keeps its own
                if p >= 0:
                    self.members[p].add(v)
        else:
            self.part, self.devices_of, self.memory, self.inc, self.members = kept
        self.path: list[int] = []  # critical path of the plan scored last
        # Plans scored before on this problem (NOTE: [Scored plans]); physical model only. The
        # plan's key: an XOR of (node, partition) hashes kept per move, and the placement's hash.
        self.scored = problem.scored if self.inc is not None and len(self.part) <= SCORED_NODES else None
        self.part_hash = 0
        if self.scored is not None:
            for v, p in enumerate(self.part):
                if p >= 0:
                    self.part_hash ^= hash((v, p))
        self.placed()
        self.tries = 0
        self.record = problem.record
        self.evals = 0
        self.latency = self.score()
        self.critical = set(self.path)
        self.evals = 0  # the start's own scoring is not the search's

    def placed(self) -> None:
        """Take note of ``devices_of`` after a partition moved to other devices."""
        if self.scored is None:
            return
        self.placement = tuple(map(tuple, self.devices_of))
        self.placement_hash = hash(self.placement)

    def _shift(self, v: int, p: int, q: int) -> None:
        self._shift_devices(v, self.devices_of[p], self.devices_of[q])

    def _shift_devices(self, v: int, old: Sequence[int], new: Sequence[int]) -> None:
        for d in old:
            self.memory.remove(v, d)
        for d in new:
            self.memory.add(v, d)

    def fits(self, moves: Sequence[tuple[int, int]]) -> bool:
        """True when every device touched by ``moves`` (distinct nodes, each with its new
        partition) stays within capacity. One move is priced per device; more are applied to the
        memory tally and undone."""
        if len(moves) == 1:
            ((v, q),) = moves
            old, new = self.devices_of[self.part[v]], self.devices_of[q]
            memory, capacity = self.memory, self.capacity
            if len(old) == 1 == len(new) and old != new and not self.cost.torch:  # the common case
                a, b = old[0], new[0]
                return memory.bytes[a] - memory.removed(v, a) <= capacity[a] and (
                    memory.bytes[b] + memory.added(v, b) <= capacity[b]
                )
            touched = {*old, *new}
            ok = all(
                memory.bytes[d] + (0 if d in old else memory.added(v, d)) - (0 if d in new else memory.removed(v, d))
                <= capacity[d]
                for d in touched
            )
            return ok and (not self.cost.torch or self._fits_torch(moves, touched))
        touched = set()
        for v, q in moves:
            self._shift(v, self.part[v], q)
            touched.update(self.devices_of[self.part[v]])
            touched.update(self.devices_of[q])
        ok = all(self.memory.bytes[d] <= self.capacity[d] for d in touched)
        for v, q in reversed(moves):
            self._shift(v, q, self.part[v])
        if ok and self.cost.torch:
            ok = self._fits_torch(moves, touched)
        return ok

    def _fits_torch(self, moves: Sequence[tuple[int, int]], touched: set[int]) -> bool:
        """Torch's memory rule (each partition on its own, an outside input counted per reader)
        is never below the union rule the tally keeps: check the touched devices exactly."""
        moved = dict(moves)
        members: list[list[int]] = [[] for _ in self.devices_of]
        for v, p in enumerate(self.part):
            if p >= 0:
                members[moved.get(v, p)].append(v)
        on = [p for p, m in enumerate(members) if m and touched & set(self.devices_of[p])]
        used = self.cost.device_memory([members[p] for p in on], [self.devices_of[p] for p in on])
        return all(used[d] <= self.capacity[d] for d in touched if d in used)

    def score(self) -> float:
        self.evals += 1
        if self.inc is not None:
            latency, self.path = self.inc.schedule()
            return latency
        last = self.cost.evaluate(self.part, self.devices_of)
        self.path = last.critical_path
        return last.latency_s

    def touches_critical(self, moves: Iterable[tuple[int, int]]) -> bool:
        """Whether ``moves`` change a partition on the current critical path. # NOTE: [Pruning]
        A move of node v from p to q changes only p's and q's latencies and the edges at p and
        q; if the critical path passes through neither, it keeps its length and the plan cannot
        get faster, so such moves need no evaluation in a descent."""
        return any(self.part[v] in self.critical or q in self.critical for v, q in moves)

    def settle(self, latency: float, evaluation_is_current: bool) -> None:
        """Record the latency of the state just reached and its critical path."""
        if not evaluation_is_current:
            self.score()
        self.latency = latency
        self.critical = set(self.path)

    def boundary(self) -> list[tuple[int, int]]:
        """(node, other partition) pairs where the node has an op neighbour in that partition:
        each op edge read once, for both its ends. O(N + E)."""
        pairs = set()
        part, op_users = self.part, self.cost.op_users
        for u in self.cost.op_order:
            p = part[u]
            for w in op_users[u]:
                q = part[w]
                if q != p:
                    if p >= 0:
                        pairs.add((u, q))
                    if q >= 0:
                        pairs.add((w, p))
        return sorted(pairs)

    def apply(self, moves: Iterable[tuple[int, int]]) -> None:
        for v, q in moves:
            self._shift(v, self.part[v], q)
            if self.scored is not None:
                self.part_hash ^= hash((v, self.part[v])) ^ hash((v, q))
            if self.inc is not None:
                self.inc.move(v, q)  # part and members
            else:
                self.members[self.part[v]].discard(v)
                self.members[q].add(v)
                self.part[v] = q

    def assignment(self) -> Assignment:
        return Assignment(self.part, self.devices_of)


def improve_by_moves(problem: Problem, a: Assignment, budget: int, swaps: bool = True) -> Assignment:
    """Kernighan-Lin refinement.

    A descent applies every strictly improving move as soon as it is found (moving a boundary
    node to a neighbouring partition or, with ``swaps``, exchanging it with a node there). When
    a sweep finds none, a KL pass takes the best move among nodes not yet moved in the pass even
    if it costs latency, locks the node, repeats, and rolls back to the best plan it saw: going
    through worse plans is what lets KL leave a plateau that stops a plain descent. Stops when a
    pass gains nothing or the budget of evaluations is spent. O(budget * (N + E)).
    """
    s = _State(problem, a)
    while s.evals < budget:
        _descend(s, budget, swaps)
        start_latency = best_latency = s.latency
        best_part = list(s.part)
        locked: set[int] = set()
        for _ in range(_KL_STEPS):
            step = _best_step(s, budget, swaps, locked)
            if step is None:
                break
            lat, moves = step
            if s.record is not None:
                s.record(
                    "take",
                    _describe(s, moves, lat, "the best of this KL step, taken even if slower"),
                    moves,
                    latency_s=lat,
                )
            s.apply(moves)
            s.settle(lat, evaluation_is_current=False)
            locked.update(v for v, _ in moves)
            if lat < best_latency - _EPS:
                best_latency, best_part = lat, list(s.part)
        rollback = [(v, p) for v, p in enumerate(best_part) if p >= 0 and s.part[v] != p]
        if s.record is not None and rollback:
            s.record(
                "roll back",
                f"the KL pass rolls back {len(rollback)} move(s) to the best plan it saw "
                f"(latency {format_seconds(best_latency)})",
                rollback,
                latency_s=best_latency,
            )
        s.apply(rollback)
        s.settle(best_latency, evaluation_is_current=not rollback and s.latency == best_latency)
        if not best_latency < start_latency - _EPS:
            break
    found = s.assignment()
    problem.know_latency(found, s.latency)  # scored exactly: NOTE: [Known plans] in _base.py
    # A search from this plan starts where this one ended (not the state: it holds the problem).
    problem.keep_tally(found, (s.part, s.devices_of, s.memory, s.inc, s.members))
    return found


def _candidates(s: _State, budget: int, locked: set[int]) -> list[tuple[int, int]]:
    ops = [v for v, p in enumerate(s.part) if p >= 0 and v not in locked]
    live = [q for q, m in enumerate(s.members) if m]
    if len(ops) * len(live) * 4 <= budget - s.evals:
        # Small enough to try every node in every partition, as the reference does.
        return [(v, q) for v in ops for q in live if q != s.part[v]]
    return [(v, q) for v, q in s.boundary() if v not in locked]


def _options(s: _State, pairs: list[tuple[int, int]], swaps: bool) -> Iterator[tuple[tuple[int, int], ...]]:
    """Moves to try, lazily: each (node, partition) pair, then its swaps with that partition's
    boundary nodes."""
    by_part: dict[int, set[int]] = {}
    for v, q in pairs:
        by_part.setdefault(s.part[v], set()).add(v)
    ordered = {p: sorted(nodes) for p, nodes in by_part.items()}
    for v, q in pairs:
        p = s.part[v]
        yield ((v, q),)
        if swaps:
            for w in ordered.get(q, ()):
                if w != v:
                    yield ((v, q), (w, p))


def _descend(s: _State, budget: int, swaps: bool) -> None:
    improved = True
    while improved and s.evals < budget:
        improved = False
        for moves in _options(s, _candidates(s, budget, set()), swaps):
            if s.evals >= budget:
                return
            if any(s.part[v] == q for v, q in moves) or len({s.part[v] for v, _ in moves}) < len(moves):
                continue  # an earlier move in this sweep changed the picture
            if len(moves) == 2 and (s.part[moves[0][0]] != moves[1][1] or s.part[moves[1][0]] != moves[0][1]):
                continue
            if not s.touches_critical(moves):
                continue
            lat = _try(s, moves)
            taken = lat is not None and lat < s.latency - _EPS
            if s.record is not None:
                s.record(
                    "move",
                    _describe(s, moves, lat, "shorter: taken" if taken else "not shorter"),
                    moves,
                    accepted=taken,
                    latency_s=lat,
                )
            if taken and lat is not None:
                s.apply(moves)
                s.settle(lat, evaluation_is_current=True)
                improved = True
        improved = _move_partitions(s, budget) or improved


def _move_partitions(s: _State, budget: int) -> bool:
    """Re-place whole partitions on another device where that shortens the critical path (the
    reference re-maps devices after every change; partitions landing together talk for free).
    A try prices the partition on the new device first (:func:`_room_for`, no tally written)
    and re-tallies memory only for the placement it keeps: one pass over the partition per
    device tried, not four (at 50,000 nodes the tally's writes were most of a search)."""
    improved = False
    for p, members in enumerate(s.members):
        if not members or len(s.devices_of[p]) != 1 or p not in s.critical:
            continue
        for d in sorted(s.capacity):
            if s.evals >= budget:
                return improved
            old = s.devices_of[p]
            if old == [d]:
                continue
            fits = _room_for(s, p, d)
            lat = math.inf
            if fits:
                s.devices_of[p] = [d]
                lat = s.score()
            taken = lat < s.latency - _EPS
            if s.record is not None:
                said = (
                    f"latency {format_seconds(lat)}, {'taken' if taken else 'not shorter'}" if fits else "does not fit"
                )
                s.record(
                    "device",
                    f"P{p} to device {d}: {said}",
                    devices=[(p, [d])],
                    accepted=taken,
                    latency_s=lat if fits else None,
                )
            if taken:
                for v in members:
                    s._shift_devices(v, old, [d])
                s.placed()
                s.settle(lat, evaluation_is_current=True)
                improved = True
            else:
                s.devices_of[p] = old
    return improved


def _room_for(s: _State, p: int, d: int) -> bool:
    """Whether device ``d`` (not p's) can take partition p's members: :meth:`DeviceMemory.fits`
    (the union rule priced without writing the tally); under torch's rule, the exact check after
    that. O(|members| deg)."""
    if not s.memory.fits(s.members[p], d, s.capacity[d]):
        return False
    if not s.cost.torch:
        return True
    old, s.devices_of[p] = s.devices_of[p], [d]
    try:
        return s._fits_torch((), {d})
    finally:
        s.devices_of[p] = old


def _best_step(
    s: _State, budget: int, swaps: bool, locked: set[int]
) -> tuple[float, tuple[tuple[int, int], ...]] | None:
    best: tuple[float, tuple[tuple[int, int], ...]] | None = None
    for moves in _options(s, _candidates(s, budget, locked), swaps):
        if s.evals >= budget:
            break
        lat = _try(s, moves)
        if s.record is not None:
            s.record(
                "try", _describe(s, moves, lat, "a candidate of this KL step"), moves, accepted=False, latency_s=lat
            )
        if lat is not None and math.isfinite(lat) and (best is None or lat < best[0] - _EPS):
            best = (lat, moves)
    return best


def _try(s: _State, moves: tuple[tuple[int, int], ...]) -> float | None:
    s.tries += 1
    if s.tries % _CHECKS_PER_EVAL == 0:
        s.evals += 1  # memory checks are cheap, not free: they draw on the budget too
    if not s.fits(moves):
        return None
    return _score(s, moves)


def _score(s: _State, moves: Sequence[tuple[int, int]]) -> float:
    """The latency with ``moves`` applied, then undone; a plan scored before is read back
    (NOTE: [Scored plans] in :mod:`._scored`)."""
    if s.inc is not None:
        s.evals += 1
        if s.scored is None:
            lat, s.path = s.inc.trial(moves)
        else:
            lat, s.path = scored_trial(s, moves)
        return lat
    old = [(v, s.part[v]) for v, _ in moves]
    for v, q in moves:
        s.part[v] = q
    lat = s.score()
    for v, p in old:
        s.part[v] = p
    return lat
