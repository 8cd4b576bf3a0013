"""The physical cost model kept up to date under node moves, for the local searches.

NOTE: [Incremental] :meth:`CostModel.evaluate` walks every node and edge, O(N + E), for each candidate a search
tries. A move of node v from partition p to q changes only p's and q's internal critical paths
and the partition edges at v; the rest of the plan is as it was. :class:`IncrementalCost` keeps
each partition's members and internal latency and the partition edges (with, for each op and
partition, how many members read it), updates them per move in O(|p| + |q| + deg v), and
schedules the partition DAG it keeps as :meth:`CostModel.schedule` would (O(P log P + E)) for
the latency, so a try costs the touched partitions' nodes and the partition DAG instead of the
whole graph. A test checks it against :meth:`CostModel.evaluate` after every move of random
move sequences on random graphs. The "torch" cost model counts edge bytes per parent's held
inputs and is evaluated in full.
:class:`DeviceMemory` keeps what each device holds the same way (both cost models' searches).
"""

from __future__ import annotations

import heapq
import math
from typing import AbstractSet, Iterable, Mapping, Sequence

from partitioner.cost.model import CostModel

__all__ = ["IncrementalCost", "DeviceMemory"]


class IncrementalCost:
    """Latency and critical path of ``part`` on ``devices_of`` under the physical cost model.

    ``part`` and ``devices_of`` are shared, not copied: :meth:`move` writes ``part``, and a
    caller may change ``devices_of[p]`` in place (a partition placed on another device) between
    calls, since placement changes no edge and no internal path.
    """

    def __init__(self, cost: CostModel, part: list[int], devices_of: list[list[int]]) -> None:
        if cost.torch:
            raise ValueError("incremental evaluation covers the physical cost model only")
        self.cost = cost
        self.part = part
        self.devices_of = devices_of
        num = len(devices_of)
        self.members: list[set[int]] = [set() for _ in range(num)]
        for v, p in enumerate(part):
            if p >= 0:
                self.members[p].add(v)
        # readers[u][p]: members of partition p reading op u (indexed lists of dicts: no key tuples)
        self.readers: list[dict[int, int]] = [{} for _ in range(cost.n)]
        self._links: list[dict[int, int]] = [{} for _ in range(num)]  # [dst][src] -> (u, dst) pairs behind the edge
        # The partition DAG both ways: parents[dst][src] = bytes, as evaluate() counts them.
        self.parents: list[dict[int, int]] = [{} for _ in range(num)]
        self.children: list[set[int]] = [set() for _ in range(num)]
        self._backward = 0  # edges from a higher partition id to a lower one
        self._free_transfers = not cost.rate or math.isinf(cost.rate)  # as CostModel.comm_s
        op_preds, out = cost.op_preds, cost.out
        for v, p in enumerate(part):
            if p < 0:
                continue
            for u in op_preds[v]:
                read = self.readers[u]
                n = read.get(p, 0)
                read[p] = n + 1
                if not n and part[u] != p and part[u] >= 0:
                    self._link(part[u], p, out[u])
        self._best = [0.0] * cost.n  # scratch: the longest path ending at each node, within its partition
        self.inner = [self._inner(p) for p in range(num)]
        self._dirty: set[int] = set()

    # -- updates ----------------------------------------------------------------------------
    @property
    def edges(self) -> dict[tuple[int, int], int]:
        """(src, dst) -> bytes, as :meth:`CostModel.evaluate` counts them."""
        return {(a, b): n for b, ps in enumerate(self.parents) for a, n in ps.items()}

    def _link(self, a: int, b: int, nbytes: int) -> None:
        links = self._links[b]
        n = links.get(a, 0)
        links[a] = n + 1
        into = self.parents[b]
        if n:
            into[a] += nbytes
        else:
            into[a] = nbytes
            self.children[a].add(b)
            self._backward += a > b

    def _unlink(self, a: int, b: int, nbytes: int) -> None:
        links = self._links[b]
        left = links[a] - 1
        if left:
            links[a] = left
            self.parents[b][a] -= nbytes
        else:
            del links[a], self.parents[b][a]
            self.children[a].discard(b)
            self._backward -= a > b

    def move(self, v: int, q: int) -> None:
        """Node v into partition q: O(deg v) now, O(|p| + |q|) at the next :meth:`schedule`."""
        part, out, readers = self.part, self.cost.out, self.readers
        p = part[v]
        if p == q:
            return
        for u in self.cost.op_preds[v]:  # v reads u: from p's readers to q's
            r = part[u]
            read = readers[u]
            n = read[p] - 1
            if n:
                read[p] = n
            else:
                del read[p]
                if r != p and r >= 0:
                    self._unlink(r, p, out[u])
            n = read.get(q, 0)
            read[q] = n + 1
            if not n and r != q and r >= 0:
                self._link(r, q, out[u])
        read = readers[v]
        if read:
            for r in {part[w] for w in self.cost.op_users[v]}:  # v's output now leaves from q
                if r < 0 or r not in read:
                    continue
                if r != p:
                    self._unlink(p, r, out[v])
                if r != q:
                    self._link(q, r, out[v])
        part[v] = q
        self.members[p].discard(v)
        self.members[q].add(v)
        self._dirty.update((p, q))  # their internal paths, recomputed when next scheduled

    def apply(self, moves: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        """Apply ``moves``; returns the moves that undo them (apply those to revert)."""
        undo = []
        for v, q in moves:
            undo.append((v, self.part[v]))
            self.move(v, q)
        undo.reverse()
        return undo

    # -- queries ----------------------------------------------------------------------------
    def _inner(self, p: int) -> float:
        """p's internal critical path, with evaluate()'s order and ties (its ops' sum on a device
        that runs them one at a time: NOTE: [A partition's ops run one at a time])."""
        part, best, node_s, op_preds = self.part, self._best, self.cost.node_s, self.cost.op_preds
        if self.cost.serial:
            return sum(node_s[v] for v in self.members[p])
        longest = 0.0
        for v in sorted(self.members[p]):
            top = 0.0
            for u in op_preds[v]:
                if part[u] == p and best[u] > top:
                    top = best[u]
            cur = top + node_s[v]
            best[v] = cur
            if cur > longest:
                longest = cur
        return longest

    def _flush(self) -> None:
        for p in self._dirty:
            self.inner[p] = self._inner(p)
        self._dirty.clear()

    def trial(self, moves: Sequence[tuple[int, int]]) -> tuple[float, list[int]]:
        """:meth:`schedule` with ``moves`` applied, then undone (the touched partitions' paths
        are restored, not recomputed)."""
        self._flush()  # the saved paths must be current ones
        saved = {p: self.inner[p] for v, q in moves for p in (self.part[v], q)}
        undo = self.apply(moves)
        result = self.schedule()
        self.apply(undo)
        for p, inner in saved.items():
            self.inner[p] = inner
        self._dirty.difference_update(saved)
        return result

    def _order(self) -> list[int] | None:
        """:func:`partitioner.graph.toposort_children` of the partition DAG kept: lowest id first
        among the ready partitions, None for a cycle. Each in-degree is read off the parents
        kept, and the ids are scanned in turn: only a partition passed over while it waited
        for a parent goes on the heap once ready (the searches' DAGs have few backward edges),
        so the pops are the few, not all P. O(P log P + E)."""
        parents, children = self.parents, self.children
        num = len(parents)
        indeg = list(map(len, parents))
        waiting: list[int] = []  # ready partitions passed over by the scan: a heap
        order = []
        nxt = 0  # the scan: every id below it is in order or passed over
        pop, push = heapq.heappop, heapq.heappush
        while True:
            while nxt < num and indeg[nxt]:
                nxt += 1
            if waiting and (nxt >= num or waiting[0] < nxt):
                p = pop(waiting)
            elif nxt < num:
                p = nxt
                nxt += 1
            else:
                break
            order.append(p)
            for c in children[p]:
                n = indeg[c] - 1
                indeg[c] = n
                if not n and c < nxt:
                    push(waiting, c)
        return order if len(order) == num else None

    def schedule(self) -> tuple[float, list[int]]:
        """(end-to-end latency, critical path of partition ids) of the current plan: what
        :meth:`CostModel.schedule` gives for it (its order, ties and arithmetic), from the
        partition DAG kept by the moves instead of one rebuilt from the edges, and without the
        start times and levels a search does not read. O(P log P + E), O(P + E) while every
        edge goes from a lower partition id to a higher one: the lowest-id-first topological
        order is then the ids in turn, and needs no heap. Each partition takes the latest
        arrival, the lowest parent id among equals (whatever order its parents are visited in),
        then waits for its devices."""
        self._flush()
        num = len(self.devices_of)
        if not num:
            return 0.0, []
        devices_of, inner = self.devices_of, self.inner
        finish = [0.0] * num
        came_from = [-1] * num
        order = self._order() if self._backward else range(num)
        if order is None:  # a cycle
            return math.inf, []
        on: dict[int, int] = {}  # device -> the partition it ran last (free at that one's finish)
        for p in order:
            start, came = self._arrival(p, finish)
            # An unused device never delays: start is never below 0.
            start, came = _wait_for_devices(p, devices_of[p], on, finish, start, came)
            finish[p], came_from[p] = start + inner[p], came
        return _critical_path(finish, came_from)

    def _arrival(self, p: int, finish: list[float]) -> tuple[float, int]:
        """When the last input of partition ``p`` arrives, and from which parent (the lowest id
        among equals; -1: none)."""
        start, came = 0.0, -1
        ps = self.parents[p]
        if not ps:
            return start, came
        if self._free_transfers:
            for q in ps:
                t = finish[q]
                if t > start or t == start and (came < 0 or q < came):
                    start, came = t, q
            return start, came
        devices_of, rate, alpha = self.devices_of, self.cost.rate, self.cost.transfer_latency_s
        dst = devices_of[p]
        one = dst[0] if len(dst) == 1 else None  # one device: no sets
        for q, nbytes in ps.items():
            src = devices_of[q]
            if src and (dst == src or (one in src if one is not None else set(dst) <= set(src))):
                t = finish[q]
            else:
                t = finish[q] + alpha + nbytes / rate  # type: ignore[operator]  # not free: a rate
            if t > start or t == start and (came < 0 or q < came):
                start, came = t, q
        return start, came


def _wait_for_devices(
    p: int, dst: list[int], on: dict[int, int], finish: list[float], start: float, came: int
) -> tuple[float, int]:
    """Partition ``p`` starts once each of its devices ``dst`` finished the partition it ran
    last (``on``, then updated to ``p``); its start and the partition it waited for."""
    if len(dst) == 1:
        d = dst[0]
        last = on.get(d, -1)
        if last >= 0 and finish[last] > start:
            start, came = finish[last], last
        on[d] = p
        return start, came
    for d in dst:
        last = on.get(d, -1)
        if last >= 0 and finish[last] > start:
            start, came = finish[last], last
    for d in dst:
        on[d] = p
    return start, came


def _critical_path(finish: list[float], came_from: list[int]) -> tuple[float, list[int]]:
    """The latest finish and the path of partitions that led to it."""
    total = max(finish)
    p = finish.index(total)  # the first of equals: the lowest id
    path = []
    while p >= 0:
        path.append(p)
        p = came_from[p]
    path.reverse()
    return total, path


class DeviceMemory:
    """Memory held on each device, updated per node move in O(degree).

    A device holds the union of its partitions: every member's total size, plus the output of
    every non-member that a member reads (once, however many members read it).
    """

    def __init__(
        self, cost: CostModel, part: Sequence[int], devices_of: Sequence[Sequence[int]], capacity: Mapping[int, int]
    ) -> None:
        self.out, self.total, self.preds = cost.out, cost.total, cost.preds
        self.bytes = {d: 0 for d in capacity}
        self.count: dict[int, dict[int, int]] = {d: {} for d in capacity}
        self.readers: dict[int, dict[int, int]] = {d: {} for d in capacity}
        for v, p in enumerate(part):
            if p >= 0:
                for d in devices_of[p]:
                    self.add(v, d)

    def add(self, v: int, d: int) -> None:
        count, readers = self.count[d], self.readers[d]
        if not count.get(v):
            if readers.get(v):
                self.bytes[d] -= self.out[v]
            self.bytes[d] += self.total[v]
        count[v] = count.get(v, 0) + 1
        for u in self.preds[v]:
            if not readers.get(u) and not count.get(u):
                self.bytes[d] += self.out[u]
            readers[u] = readers.get(u, 0) + 1

    def added(self, v: int, d: int) -> int:
        """The bytes :meth:`add` would add to ``d``, without adding."""
        count, readers, out = self.count[d], self.readers[d], self.out
        more = 0 if count.get(v) else self.total[v] - (out[v] if readers.get(v) else 0)
        for u in self.preds[v]:
            if not readers.get(u) and not count.get(u):
                more += out[u]
        return more

    def fits(self, members: AbstractSet[int], d: int, capacity: int) -> bool:
        """Whether ``members`` (none of them held on ``d``) can join device ``d`` and keep it within
        ``capacity`` bytes: the union rule of :meth:`add`, priced without writing the tally and
        stopping once the room is used up. O(|members| deg)."""
        count, readers, out, total = self.count[d], self.readers[d], self.out, self.total
        room = capacity - self.bytes[d]
        counted: set[int] = set()
        for v in members:
            room -= total[v] - (out[v] if readers.get(v) else 0)
            for u in self.preds[v]:
                if u not in members and u not in counted and not readers.get(u) and not count.get(u):
                    counted.add(u)
                    room -= out[u]
            if room < 0:
                return False
        return True

    def removed(self, v: int, d: int) -> int:
        """The bytes :meth:`remove` would free on ``d``, without removing."""
        count, readers, out = self.count[d], self.readers[d], self.out
        less = self.total[v] - (out[v] if readers.get(v) else 0) if count[v] == 1 else 0
        for u in self.preds[v]:
            if readers[u] == 1 and not count.get(u):
                less += out[u]
        return less

    def remove(self, v: int, d: int) -> None:
        count, readers = self.count[d], self.readers[d]
        for u in self.preds[v]:
            readers[u] -= 1
            if not readers[u] and not count.get(u):
                self.bytes[d] -= self.out[u]
        count[v] -= 1
        if not count[v]:
            self.bytes[d] -= self.total[v]
            if readers.get(v):
                self.bytes[d] += self.out[v]
