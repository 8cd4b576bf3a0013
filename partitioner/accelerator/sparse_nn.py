"""``sparse_nn``: embedding tables spread over devices, the dense part replicated on each.

Reference: ``Partitioner.sparse_nn_partition`` (torch.fx.experimental.accelerator_partitioner),
which requires devices of equal memory and packs embedding partitions in node order.
# NOTE: [Sparse NN on unequal devices]
Here devices may differ: the dense part (every non-embedding node, one partition per contiguous
stretch in topological order) is replicated on every device large enough to hold it, and the
embedding nodes of each contiguous embedding stretch are packed largest first onto the device
with the most room left (LPT), so tables are spread for balance and the big ones land on big
devices. O(N log N + E).
# NOTE: [Sparse NN packings]
Spreading is a heuristic for bin packing, and where each table's lookup sits in a stretch of its
own (a model that picks a table's ids just before the lookup: ``table(ids[i], offsets[i])``), the
stretch-by-stretch rule places each table on the emptiest device in node order, which can leave
no device for a large table that a tighter packing holds (a DLRM-like model with six tables on
four devices of 1.2x a quarter of the model, which torch's own ``sparse_nn`` places). So when the
spread refuses, or its plan does not fit, the tables of all stretches are packed together:
largest first onto the device with the most room, largest first onto the first device that holds
it (first fit decreasing), in node order onto the first that holds it (torch's order), and last
an exhaustive search over table -> device maps with the largest tables first (up to
``_EXACT_STEPS`` steps). These plans group partitions by embedding level as torch combines its
own (:meth:`_Packer.by_level`), and the first that fits wins. Where the spread fits, its plan is
kept unless the same map grouped by level fits and is faster (one pick by the best-plan rule:
on that DLRM-like model 4.3 us against 15.6 us under the physical cost model, whose devices run
one partition at a time).
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from partitioner.accelerator._base import Assignment, Problem, pick_best
from partitioner.cost.incremental import DeviceMemory
from partitioner.errors import InfeasibleError
from partitioner.units import format_bytes

__all__ = ["partition"]

_EXACT_STEPS = 100_000  # placements the exhaustive packing tries before it gives up


def partition(problem: Problem) -> Assignment:
    graph = problem.graph
    cost = problem.cost
    ops = graph.op_indices
    if not any(graph.nodes[v].is_embedding for v in ops):
        raise InfeasibleError(
            f"sparse_nn needs embedding nodes (nn.Embedding / nn.EmbeddingBag) but {graph.name} "
            "has none; use mode 'size_based' or 'cost_aware'"
        )
    # Contiguous stretches of the topological order, alternating dense and embedding.
    stretches: list[tuple[bool, list[int]]] = []
    for v in ops:
        emb = graph.nodes[v].is_embedding
        if stretches and stretches[-1][0] == emb:
            stretches[-1][1].append(v)
        else:
            stretches.append((emb, [v]))
    dense = [nodes for emb, nodes in stretches if not emb]
    dense_bytes = sum(cost.memory_of(nodes) for nodes in dense)
    hosts = [d for d in problem.devices_by_memory() if d.memory_bytes >= dense_bytes]
    if not hosts:
        biggest = problem.devices_by_memory()[0]
        raise InfeasibleError(
            f"sparse_nn replicates the dense part ({format_bytes(dense_bytes)}) on each device, "
            f"but the largest device has {format_bytes(biggest.memory_bytes)}; use mode "
            "'size_based' or 'cost_aware', or add memory"
        )
    packer = _Packer(problem, stretches, dense_bytes, {d.logical_id for d in hosts})
    first: InfeasibleError | None = None
    fallback: Assignment | None = None
    for pack in (packer.spread, packer.most_room, packer.first_fit_decreasing, packer.in_order, packer.exhaustive):
        try:
            found = pack()
        except InfeasibleError as exc:
            first = first or exc
            continue
        if found is None:
            continue
        if problem.fits(found):
            if pack == packer.spread:  # by level too where that fits and runs faster
                return pick_best(problem, [found, packer.by_level(packer.spread_map)])
            return found
        fallback = fallback or found
    if first is not None:
        raise first
    assert fallback is not None  # every packing but the exhaustive one returns or raises
    return fallback  # the plan's own check names what does not fit


class _Packer:
    """The packings of NOTE: [Sparse NN packings]. The spread charges each table what it adds to
    its stretch's tables on a device and the dense part as the sum of its stretches, as it always
    has; the others tally each device as the plan's memory rule counts it under the physical
    model (:class:`DeviceMemory`: the dense part once, a tensor read twice stored once), which
    torch's rule never undercuts, and :meth:`Problem.fits` checks each plan."""

    def __init__(
        self, problem: Problem, stretches: Sequence[tuple[bool, list[int]]], dense_bytes: int, hosts: set[int]
    ) -> None:
        self.problem, self.stretches, self.dense_bytes, self.hosts = problem, stretches, dense_bytes, hosts
        self.memory_of = problem.cost.memory_of
        self.order = [d.logical_id for d in problem.devices_by_memory()]
        self.stretch_of = {v: i for i, (emb, nodes) in enumerate(stretches) if emb for v in nodes}
        self.tables = [v for emb, nodes in stretches if emb for v in nodes]
        self.size = {v: self.memory_of([v]) for v in self.tables}
        # The dense part as one device holds it, and the devices that hold it.
        dense = [v for emb, nodes in stretches if not emb for v in nodes]
        alone = DeviceMemory(problem.cost, [-1] * len(problem.graph), [], {-1: 0})
        for v in dense:
            alone.add(v, -1)
        self.dense_held = alone.bytes[-1]
        self.dense = dense
        self.tally_hosts = {d.logical_id for d in problem.devices if d.memory_bytes >= self.dense_held}
        self.spread_map: dict[int, int] = {}

    def _refuse(self, v: int, extra: int, room: int, dense_bytes: int) -> InfeasibleError:
        node = self.problem.graph.nodes[v]
        return InfeasibleError(
            f"sparse_nn cannot place embedding {node.name!r} ({format_bytes(extra)}): "
            f"the most room left on a device is {format_bytes(room)} after "
            f"{format_bytes(dense_bytes)} of replicated dense part; add a device or memory"
        )

    def spread(self) -> Assignment:
        """Each stretch's tables largest first onto the device with the most room (LPT)."""
        room = {
            d.logical_id: d.memory_bytes - (self.dense_bytes if d.logical_id in self.hosts else 0)
            for d in self.problem.devices
        }
        bins: dict[tuple[int, int], list[int]] = {}
        device_of: dict[int, int] = {}
        for v in sorted(self.tables, key=lambda v: (self.stretch_of[v], -self.size[v], v)):
            device = max(self.order, key=lambda d: room[d])
            held = bins.get((self.stretch_of[v], device), [])
            extra = self.memory_of(held + [v]) - (self.memory_of(held) if held else 0)
            if extra > room[device]:
                raise self._refuse(v, extra, room[device], self.dense_bytes)
            bins.setdefault((self.stretch_of[v], device), []).append(v)
            room[device] -= extra
            device_of[v] = device
        self.spread_map = device_of
        return self.assignment(device_of, self.hosts)

    def _tally(self) -> DeviceMemory:
        capacity = self.problem.capacity
        tally = DeviceMemory(self.problem.cost, [-1] * len(self.problem.graph), [], capacity)
        for d in self.tally_hosts:
            for v in self.dense:
                tally.add(v, d)
        return tally

    def _greedy(self, order: Sequence[int], pick: Callable[[list[tuple[int, int]]], int]) -> Assignment:
        """Tables in ``order``, each onto the device ``pick`` chooses among the (room left after
        it, device) pairs that hold it."""
        capacity = self.problem.capacity
        tally = self._tally()
        device_of: dict[int, int] = {}
        for v in order:
            left = [(capacity[d] - tally.bytes[d] - tally.added(v, d), d) for d in self.order]
            fits = [(r, d) for r, d in left if r >= 0]
            if not fits:
                r, d = max(left)
                raise self._refuse(v, tally.added(v, d), capacity[d] - tally.bytes[d], self.dense_held)
            device = pick(fits)
            tally.add(v, device)
            device_of[v] = device
        return self.by_level(device_of)

    def _largest_first(self) -> list[int]:
        return sorted(self.tables, key=lambda v: (-self.size[v], v))

    def most_room(self) -> Assignment:
        """All tables together, largest first onto the device with the most room left."""
        rank = {d: i for i, d in enumerate(self.order)}
        return self._greedy(self._largest_first(), lambda fits: max(fits, key=lambda rd: (rd[0], -rank[rd[1]]))[1])

    def first_fit_decreasing(self) -> Assignment:
        """All tables together, largest first onto the first device (largest memory first) that holds it."""
        return self._greedy(self._largest_first(), lambda fits: fits[0][1])

    def in_order(self) -> Assignment:
        """The tables in node order, each onto the first device that holds it (torch's order)."""
        return self._greedy(self.tables, lambda fits: fits[0][1])

    def exhaustive(self) -> Assignment | None:
        """Every table -> device map, largest tables first, pruned by the tally (devices with
        the same room left and no table yet tried once), each complete map checked by the plan's
        own memory rule; None when none fits within ``_EXACT_STEPS`` placements."""
        order = self._largest_first()
        capacity = self.problem.capacity
        tally = self._tally()
        device_of: dict[int, int] = {}
        count = {d: 0 for d in self.order}
        steps = 0

        def search(i: int) -> Iterator[Assignment]:
            nonlocal steps
            if i == len(order):
                yield self.by_level(device_of)
                return
            v = order[i]
            empty_tried: set[tuple[int, bool]] = set()
            for d in self.order:
                if steps > _EXACT_STEPS:
                    return
                if not count[d]:
                    kind = (capacity[d] - tally.bytes[d], d in self.tally_hosts)
                    if kind in empty_tried:
                        continue
                    empty_tried.add(kind)
                if tally.bytes[d] + tally.added(v, d) > capacity[d]:
                    continue
                steps += 1
                tally.add(v, d)
                device_of[v] = d
                count[d] += 1
                yield from search(i + 1)
                count[d] -= 1
                del device_of[v]
                tally.remove(v, d)

        return next((a for a in search(0) if self.problem.fits(a)), None)

    def assignment(self, device_of: dict[int, int], hosts: set[int]) -> Assignment:
        """Dense stretches on every host; each embedding stretch one partition per device it uses,
        in the order of their first tables."""
        part = [-1] * len(self.problem.graph)
        devices_of: list[list[int]] = []
        host_ids = sorted(hosts)
        for emb, nodes in self.stretches:
            if not emb:
                for v in nodes:
                    part[v] = len(devices_of)
                devices_of.append(list(host_ids))
                continue
            groups: dict[int, list[int]] = {}
            for v in nodes:
                groups.setdefault(device_of[v], []).append(v)
            for device in sorted(groups, key=lambda d: min(groups[d])):
                pid = len(devices_of)
                for v in groups[device]:
                    part[v] = pid
                devices_of.append([device])
        return Assignment(part, devices_of)

    def by_level(self, device_of: dict[int, int]) -> Assignment:
        """The packings' plan: partitions by embedding level, as torch's ``sparse_nn`` combines
        its partitions. A table's level is one more than the highest level it reads, a dense
        node's the highest level it reads; the dense nodes of a level form one partition on
        every host, the tables of a level one partition per device. Every edge goes from a
        level's tables to its dense part or to a higher level, so the partitions are acyclic;
        a model whose lookups each sit in a stretch of their own then has one dense partition
        before the tables and one after, not one per stretch (each of which torch's memory rule
        charges its inputs again)."""
        graph, cost = self.problem.graph, self.problem.cost
        level = [0] * len(graph)
        keys: dict[tuple[int, int], int] = {}  # (level, device or -1 for the dense part) -> partition
        devices_of: list[list[int]] = []
        part = [-1] * len(graph)
        for v in graph.op_indices:
            top = max((level[u] for u in cost.op_preds[v]), default=0)
            table = v in device_of
            level[v] = top + 1 if table else top
            key = (level[v], device_of[v] if table else -1)
            if key not in keys:
                keys[key] = len(devices_of)
                devices_of.append([device_of[v]] if table else sorted(self.tally_hosts))
            part[v] = keys[key]
        return Assignment(part, devices_of)
