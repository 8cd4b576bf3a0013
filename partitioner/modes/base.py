"""What every mode receives (:class:`Problem`) and returns (:class:`Assignment`).

Modes propose; :func:`partitioner.partition` applies (torch.fx's capability partitioner keeps
``propose_partitions`` apart from ``fuse_partitions`` the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..devices import Device, format_bytes
from ..errors import InfeasibleError
from ..graph import Graph
from ..plan import CostModel

__all__ = ["Problem", "Assignment", "node_alone_bytes", "largest_node_check"]


@dataclass
class Assignment:
    """``part[v]`` is node v's partition (-1 for non-op nodes); ``devices_of[p]`` its devices."""

    part: list[int]
    devices_of: list[list[int]]


@dataclass
class Problem:
    graph: Graph
    devices: list[Device]
    cost: CostModel
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def capacity(self) -> dict[int, int]:
        return {d.logical_id: d.memory_bytes for d in self.devices}

    def devices_by_memory(self) -> list[Device]:
        """Largest memory first; list order breaks ties."""
        return sorted(self.devices, key=lambda d: -d.memory_bytes)

    def fits(self, assignment: Assignment) -> bool:
        """True when every device holds at most its memory."""
        members: dict[int, list[int]] = {}
        for v, p in enumerate(assignment.part):
            if p >= 0:
                members.setdefault(p, []).append(v)
        pids = sorted(members)
        used = self.cost.device_memory(
            [members[p] for p in pids], [assignment.devices_of[p] for p in pids]
        )
        return all(used.get(d.logical_id, 0) <= d.memory_bytes for d in self.devices)

    def latency(self, assignment: Assignment) -> float:
        return self.cost.evaluate(assignment.part, assignment.devices_of).latency_s


def pick_best(problem: Problem, candidates: Sequence[Assignment]) -> Assignment:
    """The feasible candidate with the lowest latency; among latencies equal up to rounding,
    the one with the fewest partitions (a plan of 50 partitions that is no faster than one of 3
    only makes review harder)."""
    scored = []
    for a in candidates:
        count = len({p for p in a.part if p >= 0})
        scored.append((not problem.fits(a), problem.latency(a), count, a))
    feasible = [s for s in scored if not s[0]] or scored
    best = min(s[1] for s in feasible)
    close = [s for s in feasible if s[1] <= best + 1e-9 * max(1.0, abs(best))]
    return min(close, key=lambda s: (s[2], s[1]))[3]


def node_alone_bytes(graph: Graph, v: int) -> int:
    """Memory node v needs in a partition of its own: its total size plus its inputs' outputs."""
    return graph.total_bytes[v] + sum(graph.output_bytes[u] for u in graph.preds[v])


def largest_node_check(graph: Graph, devices: Sequence[Device]) -> None:
    """Raise naming the largest node when it fits no device on its own."""
    biggest = max(graph.op_indices, key=lambda v: node_alone_bytes(graph, v))
    need = node_alone_bytes(graph, biggest)
    room = max(d.memory_bytes for d in devices)
    if need > room:
        node = graph.nodes[biggest]
        raise InfeasibleError(
            f"node {node.name!r} ({node.target}) needs {format_bytes(need)} ({need} B) with its "
            f"inputs but the largest device has {format_bytes(room)} ({room} B); add memory to a "
            "device or shrink that layer"
        )


def initial_fill(problem: Problem) -> Assignment:
    """Contiguous fill; when fragmentation leaves a node nowhere to go, a tighter packing."""
    try:
        return fill_in_order(problem, problem.graph.op_indices)
    except InfeasibleError as first:
        try:
            return fill_in_order(problem, problem.graph.op_indices, pack=True)
        except InfeasibleError:
            raise first from None


def fill_in_order(problem: Problem, order: Sequence[int], pack: bool = False) -> Assignment:
    """Greedy fill in topological order (the reference's ``size_based`` idea).

    Keep adding nodes to the open partition while its device has room; otherwise open a new
    partition on an unused device (largest first), or, when none is left, on the used device
    where the node costs least room (an input already held there is not stored twice). With
    ``pack``, every node goes to the device with the least room that still holds it (best fit,
    as the reference's device mapping does): fewer gaps, more partitions. O(N + E), or
    O(N D + E) for D devices with ``pack``.
    """
    graph = problem.graph
    part = [-1] * len(graph)
    devices_of: list[list[int]] = []
    free = {d.logical_id: d.memory_bytes for d in problem.devices}
    held: dict[int, set[int]] = {d.logical_id: set() for d in problem.devices}
    unused = [d.logical_id for d in problem.devices_by_memory()]
    out, total, preds = graph.output_bytes, graph.total_bytes, graph.preds

    def extra(v: int, d: int) -> int:
        return total[v] + sum(out[u] for u in preds[v] if u not in held[d])

    current = -1
    for v in order:
        device = devices_of[current][0] if current >= 0 else -1
        if pack:
            fits = [d for d in free if extra(v, d) <= free[d]]
            if fits:
                best = min(fits, key=lambda d: (free[d] - extra(v, d), d))
                if best != device:
                    device = best
                    if device in unused:
                        unused.remove(device)
                    devices_of.append([device])
                    current = len(devices_of) - 1
        if device < 0 or extra(v, device) > free[device]:
            alone = node_alone_bytes(graph, v)
            fresh = [d for d in unused if free[d] >= alone]
            if fresh:
                device = fresh[0]
                unused.remove(device)
            else:
                used = [d for d in free if d not in unused]
                device = max(used, key=lambda d: (free[d] - extra(v, d), -d))
                if extra(v, device) > free[device]:
                    node = graph.nodes[v]
                    raise InfeasibleError(
                        f"size-based fill ran out of memory at node {node.name!r}: it needs "
                        f"{format_bytes(extra(v, device))} more on device {device} but only "
                        f"{format_bytes(free[device])} is free there (and less elsewhere); add a "
                        "device or memory, or try mode 'cost_aware'"
                    )
            devices_of.append([device])
            current = len(devices_of) - 1
        free[device] -= extra(v, device)
        held[device].add(v)
        held[device].update(preds[v])
        part[v] = current
    return Assignment(part, devices_of)
