"""The project's fills: where ``largest_first`` and the searches (:mod:`.cost_aware`,
:mod:`.kl_based`) start.

The contiguous fill walks the nodes in topological order and opens each new partition on the
largest unused device (torch's ``size_based``, in :mod:`.size_based`, takes the first in list
order); when devices run out the remaining nodes go to the device where they cost least room
instead of one partition per leftover node. When fragmentation leaves a node nowhere to go: a
best-fit packing, a packing by size that ignores order, (small graphs) an exhaustive search,
torch's fills and, last, a search that repairs a placement until it fits (:mod:`._repair`).
"""

from __future__ import annotations

from typing import Sequence

from partitioner.accelerator._base import Assignment, Problem, node_alone_bytes
from partitioner.accelerator._repair import repair_fit
from partitioner.accelerator._repair import runs as _runs
from partitioner.accelerator._segments import time_orders
from partitioner.accelerator._torch_merge import merge_sequence
from partitioner.accelerator.size_based import torch_fill, torch_singletons
from partitioner.cost.incremental import DeviceMemory
from partitioner.errors import InfeasibleError
from partitioner.units import format_bytes

__all__ = [
    "starts",
    "priority_starts",
    "initial_fill",
    "fill_in_order",
    "pack_by_size",
    "exhaustive_fit",
    "exhaustive_search",
]


def starts(problem: Problem) -> list[Assignment]:
    """Where the searches start: the largest-first fill and a best-fit packing, and under the
    "torch" cost model torch's fill (torch's memory rule can refuse the first two where torch's own
    fill fits), or when none fits, torch's fill (any cost model: no search refuses where
    ``size_based`` finds a plan) or one node per partition mapped as torch maps them."""
    found: list[Assignment] = []
    first: InfeasibleError | None = None
    fills = [initial_fill, lambda p: fill_in_order(p, p.graph.op_indices, pack=True)]
    if problem.cost.torch:
        fills.append(torch_fill)
    for fill in fills:
        try:
            candidate = fill(problem)
        except InfeasibleError as exc:
            first = first or exc
            continue
        if problem.fits(candidate) and candidate not in found:
            found.append(candidate)
    if not found and not problem.cost.torch:  # no search refuses where size_based finds a plan
        try:
            candidate = torch_fill(problem)
            if problem.fits(candidate):
                found.append(candidate)
        except InfeasibleError as exc:
            first = first or exc
    if not found and problem.cost.torch:  # many one-node partitions: a slow start, the last resort
        try:
            found.append(torch_singletons(problem))
        except InfeasibleError as exc:
            first = first or exc
    if not found:
        raise first or InfeasibleError("no fill fits the devices; add a device or memory")
    return found


def priority_starts(
    problem: Problem, count: int, taken: Sequence[Assignment] = (), orders: Sequence[Sequence[int]] | None = None
) -> list[Assignment]:
    """Up to ``count`` more starts: best-fit fills (``pack``) of the nodes ordered by their earliest
    start, by their latest start that keeps the node-level critical path, and by the middle of
    the two (:func:`segments.time_orders`, unless ``orders`` are given; fills that do not fit,
    and duplicates of ``taken``, left out). # NOTE: [Priority orders]
    A fill cuts its order into runs per device, and a device runs its partitions one after
    another, so a run that mixes a long side branch with the start of the main chain holds the
    chain up. Ordered by time instead of by index, each run holds the work of one stretch of the
    critical path, and the runs' own critical paths add up to little more than the whole one.
    O(count (N D + E)) for D devices."""
    if count <= 0:
        return []
    found: list[Assignment] = []
    for order in time_orders(problem) if orders is None else orders:
        if len(found) == count:
            break
        try:
            candidate = fill_in_order(problem, order, pack=True)
        except InfeasibleError:
            continue
        if problem.fits(candidate) and candidate not in found and candidate not in taken:
            found.append(candidate)
    return found


def initial_fill(problem: Problem) -> Assignment:
    """Mode ``largest_first``: contiguous fill, the largest device first; when fragmentation
    leaves a node nowhere to go, a tighter packing, then a packing by size that ignores order,
    then (small graphs) an exhaustive search, then torch's fill, one node per partition mapped as
    torch maps them (which torch's memory rule can accept where the physical tallies of the
    others refuse), under torch's cost model torch's own cost_aware plan, and last a repair of a
    placement until it fits (NOTE: [Repairing a placement]; not where the exhaustive search
    proved that no placement fits). The searches start from whichever succeeds, so none of them
    depends on the contiguous fill succeeding."""
    try:
        found = fill_in_order(problem, problem.graph.op_indices)
        if problem.fits(found):  # the fills count memory as the physical model does
            return found
        first = InfeasibleError(
            f"the largest-first fill does not fit under the {problem.cost.cost_model} "
            "cost model's memory rule; add a device or memory"
        )
    except InfeasibleError as exc:
        first = exc
    proven = False  # the exhaustive search found no placement: none fits as runs

    def exhaustive() -> Assignment | None:
        nonlocal proven
        found, complete = exhaustive_search(problem)
        proven = found is None and complete
        return found

    for fallback in (
        lambda: fill_in_order(problem, problem.graph.op_indices, pack=True),
        lambda: pack_by_size(problem),
        exhaustive,
        lambda: torch_fill(problem),
        lambda: torch_singletons(problem),
        lambda: merge_sequence(problem) if problem.cost.torch else None,
        lambda: None if proven else repair_fit(problem),
    ):
        # then: no fill refuses where torch's fill, a search from one node per partition (the
        # searches' last resort) or, under torch's memory rule, torch's own cost_aware plan
        # (NOTE: [Never slower than torch]) finds one, nor where any placement fits
        try:
            candidate = fallback()
        except InfeasibleError:
            continue
        if candidate is not None and problem.fits(candidate):
            return candidate
    raise first


def pack_by_size(problem: Problem) -> Assignment:
    """First fit decreasing: the largest nodes first, each on the device with the most room
    left that holds it (no regard for order; partitions are then runs). O(N D + E)."""
    graph = problem.graph
    order = sorted(graph.op_indices, key=lambda v: -node_alone_bytes(graph, v))
    # Each node is charged as if all its inputs lived elsewhere: an over-estimate of the union a
    # device really holds, so a packing found here always fits.
    chosen = [-1] * len(graph)
    room = {d.logical_id: d.memory_bytes for d in problem.devices}
    for v in order:
        need = node_alone_bytes(graph, v)
        fits = [d for d in room if room[d] >= need]
        if not fits:
            raise InfeasibleError(f"no device has room for node {graph.nodes[v].name!r}")
        d = max(fits, key=lambda i: (room[i], -i))
        chosen[v] = d
        room[d] -= need
    return _runs(problem, chosen)


EXHAUSTIVE_MAX_OPS = 12  # op nodes the exhaustive search takes by default


def exhaustive_fit(problem: Problem, max_ops: int = EXHAUSTIVE_MAX_OPS) -> Assignment | None:
    """Depth-first search over node -> device placements with exact memory pruning, for graphs
    of at most ``max_ops`` op nodes (exponential: D ** N at worst; devices of equal memory that
    are still empty are tried once). Returns None when no placement fits or the graph is large.
    See :func:`exhaustive_search`."""
    return exhaustive_search(problem, max_ops)[0]


_TORCH_LEAVES = 20_000  # placements checked against torch's memory rule before giving up


def exhaustive_search(problem: Problem, max_ops: int = EXHAUSTIVE_MAX_OPS) -> tuple[Assignment | None, bool]:
    """(:func:`exhaustive_fit`'s placement, whether the search was complete). The pruning
    counts memory by the union rule, which torch's memory rule never undercuts (it counts an
    outside input again for each reader, an input again for each partition). Under torch's cost
    model each placement that passes is checked as runs against torch's rule, and the search
    goes on past those that fail, for up to ``_TORCH_LEAVES`` of them. A complete search
    without a placement proves that no placement fits as runs, the only plans
    :func:`repair_fit` makes."""
    graph = problem.graph
    ops = list(graph.op_indices)
    if len(ops) > max_ops:
        return None, False
    capacity = problem.capacity
    tally = DeviceMemory(problem.cost, [-1] * len(graph), [], capacity)  # the one union rule
    where = [-1] * len(graph)
    devices = [d.logical_id for d in problem.devices]
    used = {d: 0 for d in devices}
    leaves = 0

    def search(i: int) -> bool:
        nonlocal leaves
        if i == len(ops):
            if not problem.cost.torch:
                return True
            leaves += 1
            return leaves > _TORCH_LEAVES or problem.fits(_runs(problem, where))
        v = ops[i]
        empty_tried: set[int] = set()
        for d in devices:
            if used[d] == 0:
                if capacity[d] in empty_tried:
                    continue
                empty_tried.add(capacity[d])
            if tally.bytes[d] + tally.added(v, d) > capacity[d]:
                continue
            tally.add(v, d)
            where[v] = d
            used[d] += 1
            if search(i + 1):
                return True
            used[d] -= 1
            where[v] = -1
            tally.remove(v, d)
        return False

    if not search(0):
        return None, True
    if leaves > _TORCH_LEAVES:
        return None, False
    return _runs(problem, where), True


def fill_in_order(problem: Problem, order: Sequence[int], pack: bool = False) -> Assignment:
    """Greedy fill in topological order (the reference's ``size_based`` idea).

    Keep adding nodes to the open partition while its device has room; otherwise open a new
    partition on an unused device (largest first), or, when none is left, on the used device
    where the node costs least room (an input already held there is not stored twice). With
    ``pack``, every node goes to the device with the least room that still holds it (best fit,
    as the reference's device mapping does): fewer gaps, more partitions. O(N + E), or
    O(N D + E) for D devices with ``pack``.
    """
    fill = _OrderFill(problem)
    for v in order:
        device = fill.devices_of[fill.current][0] if fill.current >= 0 else -1
        need = -1  # v's bytes on ``device`` once priced (each device priced once a node)
        if pack:
            device, need = fill.best_fit(v, device)
        elif device >= 0:
            need = fill.extra(v, device)
        if device < 0 or need > fill.free[device]:
            device = fill.open_partition(v)
        fill.add(v, device)
    found = Assignment(fill.part, fill.devices_of)
    problem.keep_tally(found, fill.tally)  # the search from this plan starts from its tally
    return found


class _OrderFill:
    """The partitions of :func:`fill_in_order` while it fills them, with each device's free bytes
    and the devices no partition is on yet (largest first)."""

    def __init__(self, problem: Problem) -> None:
        self.graph = graph = problem.graph
        self.part = [-1] * len(graph)
        self.devices_of: list[list[int]] = []
        self.free = dict(problem.capacity)
        self.tally = DeviceMemory(problem.cost, [-1] * len(graph), [], self.free)  # the one union rule
        self.unused = [d.logical_id for d in problem.devices_by_memory()]
        self.extra = self.tally.added  # in topological order nothing on the device reads v yet
        self.current = -1

    def best_fit(self, v: int, device: int) -> tuple[int, int]:
        """The device with the least room that still holds ``v`` (a new partition there unless it
        is ``device``), or ``device`` when none does; with what ``v`` adds there (-1: unpriced)."""
        free = self.free
        mores = {d: self.extra(v, d) for d in free}
        slack = [(free[d] - more, d) for d, more in mores.items() if more <= free[d]]
        if slack:
            best = min(slack)[1]
            if best != device:
                device = best
                if device in self.unused:
                    self.unused.remove(device)
                self.devices_of.append([device])
                self.current = len(self.devices_of) - 1
        return device, mores.get(device, -1)

    def open_partition(self, v: int) -> int:
        """A new partition for ``v``: on the largest unused device that holds it alone, else on
        the used device where it costs least room; raises when even that one is short."""
        extra, free = self.extra, self.free
        alone = node_alone_bytes(self.graph, v)
        fresh = [d for d in self.unused if free[d] >= alone]
        if fresh:
            device = fresh[0]
            self.unused.remove(device)
        else:
            used = [d for d in free if d not in self.unused]
            device = max(used, key=lambda d: (free[d] - extra(v, d), -d))
            if extra(v, device) > free[device]:
                node = self.graph.nodes[v]
                raise InfeasibleError(
                    f"largest-first fill ran out of memory at node {node.name!r}: it needs "
                    f"{format_bytes(extra(v, device))} more on device {device} but only "
                    f"{format_bytes(free[device])} is free there (and less elsewhere); add a "
                    "device or memory"
                )
        self.devices_of.append([device])
        self.current = len(self.devices_of) - 1
        return device

    def add(self, v: int, device: int) -> None:
        held = self.tally.bytes
        before = held[device]
        self.tally.add(v, device)
        self.free[device] -= held[device] - before  # what add() added: extra(v, device)
        self.part[v] = self.current
