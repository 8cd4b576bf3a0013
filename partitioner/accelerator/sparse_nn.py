"""``sparse_nn``: embedding tables spread over devices, the dense part replicated on each.

Reference: ``Partitioner.sparse_nn_partition`` (torch.fx.experimental.accelerator_partitioner),
which requires devices of equal memory and packs embedding partitions in node order.
# NOTE: [Sparse NN on unequal devices]
Here devices may differ: the dense part (every non-embedding node, one partition per contiguous
stretch in topological order) is replicated on every device large enough to hold it, and the
embedding nodes of each contiguous embedding stretch are packed largest first onto the device
with the most room left (LPT), so tables are spread for balance and the big ones land on big
devices. O(N log N + E).
"""

from __future__ import annotations

from partitioner.units import format_bytes
from partitioner.errors import InfeasibleError
from partitioner.accelerator._base import Assignment, Problem

__all__ = ["partition"]


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
    host_ids = sorted(d.logical_id for d in hosts)
    room = {d.logical_id: d.memory_bytes - (dense_bytes if d in hosts else 0) for d in problem.devices}
    order = [d.logical_id for d in problem.devices_by_memory()]
    part = [-1] * len(graph)
    devices_of: list[list[int]] = []
    for emb, nodes in stretches:
        if not emb:
            for v in nodes:
                part[v] = len(devices_of)
            devices_of.append(list(host_ids))
            continue
        # Largest table first onto the device with the most room (longest-processing-time rule).
        bins: dict[int, list[int]] = {}
        for v in sorted(nodes, key=lambda v: (-cost.memory_of([v]), v)):
            device = max(order, key=lambda d: room[d])
            trial = bins.get(device, []) + [v]
            extra = cost.memory_of(trial) - (cost.memory_of(bins[device]) if device in bins else 0)
            if extra > room[device]:
                node = graph.nodes[v]
                raise InfeasibleError(
                    f"sparse_nn cannot place embedding {node.name!r} ({format_bytes(extra)}): "
                    f"the most room left on a device is {format_bytes(room[device])} after "
                    f"{format_bytes(dense_bytes)} of replicated dense part; add a device or memory"
                )
            bins[device] = trial
            room[device] -= extra
        for device in sorted(bins, key=lambda d: min(bins[d])):
            pid = len(devices_of)
            for v in bins[device]:
                part[v] = pid
            devices_of.append([device])
    return Assignment(part, devices_of)
