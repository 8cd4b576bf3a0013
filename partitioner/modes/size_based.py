"""``size_based``: greedy fill of devices in topological order.

Reference: ``Partitioner.size_based_partition`` in ``torch.fx.experimental.accelerator_partitioner``.
Differences: the next partition opens on the largest unused device (the reference takes the
first in list order), and when devices run out the remaining nodes go to the device with the
most free memory instead of one partition per leftover node. The fills here also give the
searches (:mod:`.cost_aware`, :mod:`.kl_based`) their starting points. O(N + E).
"""

from __future__ import annotations

from typing import Sequence

from ..errors import InfeasibleError
from ..units import format_bytes
from .base import Assignment, Problem, node_alone_bytes

__all__ = ["partition", "initial_fill", "fill_in_order", "starts"]


def partition(problem: Problem) -> Assignment:
    return initial_fill(problem)


def starts(problem: Problem) -> list[Assignment]:
    """Where the searches start: the contiguous fill and, where it exists, the best-fit packing."""
    found = [initial_fill(problem)]
    try:
        found.append(fill_in_order(problem, problem.graph.op_indices, pack=True))
    except InfeasibleError:
        pass
    return found


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
                        "device or memory"
                    )
            devices_of.append([device])
            current = len(devices_of) - 1
        free[device] -= extra(v, device)
        held[device].add(v)
        held[device].update(preds[v])
        part[v] = current
    return Assignment(part, devices_of)
