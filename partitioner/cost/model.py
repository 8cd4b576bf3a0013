"""The cost model: node latencies (a roofline estimate, or given per node) and :class:`CostModel`,
the only code that computes a plan's memory and latency.

A node costs a pair (memory seconds, compute seconds), like the reference's ``NodeLatency``
(``torch.fx.experimental.partitioner_utils``); its latency is the larger of the two. A partition
costs the critical path through its nodes; the plan costs the critical path over the partition
DAG, where an edge between partitions on different devices adds bytes crossing / transfer rate.
# NOTE: [One pass, not every path]
The reference walks every path with a DFS, which revisits shared sub-paths and grows
exponentially with branching; here both critical paths are one pass over a topological order,
O(N + E) for the whole plan.

Memory of a partition is every node's output and parameters plus the outputs of outside nodes it
reads, each counted once; a device holds the union of the partitions placed on it (a tensor two
of them read is stored there once, as in the reference's device mapping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from partitioner.cost.latency import NodeLatency, node_latencies, node_seconds, roofline_latencies
from partitioner.cost.measured import device_profile, profile_latencies, transfer_latency_s
from partitioner.errors import PartitionError
from partitioner.graph import Graph, toposort

__all__ = [
    "NodeLatency",
    "roofline_latencies",
    "profile_latencies",
    "device_profile",
    "transfer_latency_s",
    "node_latencies",
    "node_seconds",
    "CostModel",
    "Evaluation",
    "NEAR_TIE",
    "best_index",
]


# --------------------------------------------------------------------------------------------
# The cost model of a plan


@dataclass
class Evaluation:
    """Everything the cost model derives from one assignment (mutable scratch, not a result)."""

    members: list[list[int]]  # node indices per partition, topological order
    memory_bytes: list[int]
    latency: list[tuple[float, float, float]]  # (overall, mem, compute) per partition
    edges: dict[tuple[int, int], int]  # (src, dst) -> bytes
    order: list[int] | None  # topological order of partitions; None if cyclic
    finish_s: list[float]
    latency_s: float
    critical_path: list[int]
    bfs_level: list[int]
    start_s: list[float]


class CostModel:
    """The reference cost model over a :class:`Graph`, evaluated in O(N + E) per assignment."""

    def __init__(
        self,
        graph: Graph,
        latencies: Sequence[tuple[float, float]],
        transfer_rate_bytes_per_s: float | None,
        cost_model: str = "physical",
        transfer_latency_s: float = 0.0,
        serial: bool = False,
    ) -> None:
        if cost_model not in ("physical", "torch"):
            raise PartitionError(f"unknown cost model {cost_model!r}; choose 'physical' or 'torch'")
        self.cost_model = cost_model
        self.torch = cost_model == "torch"
        # NOTE: [A partition's ops run one at a time] On a device with a measured profile (a GPU's
        # one stream, eager PyTorch's one thread) a partition's ops run in program order, one at a
        # time: its latency is their sum, not the critical path through them (torch's model, kept
        # for the datasheet roofline). The critical path stays a lower bound on the sum, so the
        # bounds and the exact solver's proofs hold under both.
        self.serial = bool(serial) and not self.torch
        self._bound: float | None = None
        self.graph = graph
        self.n = len(graph)
        self.mem_s = [float(m) for m, _ in latencies]
        self.compute_s = [float(c) for _, c in latencies]
        self.node_s = [max(m, c) for m, c in zip(self.mem_s, self.compute_s)]
        self.rate = transfer_rate_bytes_per_s
        self.transfer_latency_s = float(transfer_latency_s)  # per transfer (alpha of alpha-beta)
        self.out = graph.output_bytes
        self.total = graph.total_bytes
        self.preds = graph.preds
        is_op = [nd.is_op for nd in graph.nodes]
        self.is_op = is_op
        self.op_preds = tuple(tuple(j for j in ps if is_op[j]) for ps in graph.preds)
        self.op_users = tuple(tuple(j for j in us if is_op[j]) for us in graph.users)
        self.op_order = graph.op_indices

    def lower_bound_s(self) -> float:
        """A lower bound on the latency of every plan of this graph: the node-level critical
        path without transfers. # NOTE: [Lower bound] Any path of nodes runs through a chain
        of partitions in order (the partition DAG is acyclic), each holding its part of the path
        within its own latency; transfers and waiting for a device only add time. So no plan
        is faster than the heaviest path of nodes, and so than the largest single node. O(N + E)."""
        if self._bound is None:
            best = [0.0] * self.n
            for v in range(self.n):
                best[v] = self.node_s[v] + max((best[u] for u in self.preds[v]), default=0.0)
            self._bound = max(best, default=0.0)
        return float(self._bound)

    def comm_s(self, nbytes: int, src_devices: Sequence[int], dst_devices: Sequence[int]) -> float:
        """Transfer time of an edge: free when every device of the destination already holds a
        copy of the source (torch frees only identical device lists, which charges a replicated
        partition for feeding a partition on one of its own devices: the "torch" model does)."""
        if self.torch:
            if src_devices and list(src_devices) == list(dst_devices):
                return 0.0
        elif src_devices and set(dst_devices) <= set(src_devices):
            return 0.0
        if not self.rate or math.isinf(self.rate):
            return 0.0
        return self.transfer_latency_s + nbytes / self.rate

    def memory_of(self, members: Sequence[int]) -> int:
        """A partition's bytes. Physical: its nodes' outputs and parameters, plus each outside
        output it reads, once. Torch (``Partition.recalculate_mem_size``): the same over its
        nodes and the inputs and attributes they read, with an outside output counted again for
        every node that reads it."""
        if self.torch:
            return self._torch_memory_of(members)
        inside = set(members)
        outside: set[int] = set()
        total = 0
        for v in members:
            total += self.total[v]
            for u in self.preds[v]:
                if u not in inside:
                    outside.add(u)
        return total + sum(self.out[u] for u in outside)

    def torch_held(self, members: Sequence[int]) -> set[int]:
        """Torch's ``Partition.nodes``: the ops and the inputs and attributes they read."""
        held = set(members)
        held.update(u for v in members for u in self.preds[v] if not self.is_op[u])
        return held

    def torch_extra(self, v: int, held: set[int]) -> int:  # torch's get_extra_size_of
        return self.total[v] + sum(self.out[u] for u in self.preds[v] if u not in held)

    def _torch_memory_of(self, members: Sequence[int]) -> int:
        held = self.torch_held(members)
        return sum(self.torch_extra(v, held) for v in held)

    def device_memory(self, members: Sequence[Sequence[int]], devices_of: Sequence[Sequence[int]]) -> dict[int, int]:
        """Memory each device holds. Physical: the union of its partitions' nodes, so a tensor
        read by two partitions on one device is stored once there. Torch (the rule of
        ``get_device_to_partitions_mapping``): the device's first partition costs its memory;
        each later one (in partition order) costs its nodes' sizes plus the inputs they read
        that no partition on the device holds yet, counted per reader."""
        if self.torch:
            used: dict[int, int] = {}
            held_on: dict[int, set[int]] = {}
            for nodes, devs in zip(members, devices_of):
                held = self.torch_held(nodes)
                for d in devs:
                    if d not in held_on:
                        used[d] = self._torch_memory_of(nodes)
                        held_on[d] = set(held)
                    else:
                        union = held_on[d] | held
                        used[d] += sum(self.torch_extra(v, union) for v in held)
                        held_on[d] = union
            return dict(sorted(used.items()))
        on_device: dict[int, list[int]] = {}
        for nodes, devs in zip(members, devices_of):
            for d in devs:
                on_device.setdefault(d, []).extend(nodes)
        return {d: self.memory_of(nodes) for d, nodes in sorted(on_device.items())}

    def evaluate(self, part: Sequence[int], devices_of: Sequence[Sequence[int]]) -> Evaluation:
        """Evaluate ``part`` (node index -> partition id, -1 for non-op nodes)."""
        num = len(devices_of)
        members: list[list[int]] = [[] for _ in range(num)]
        for v in range(self.n):
            p = part[v]
            if p >= 0:
                members[p].append(v)
        memory = [self.memory_of(m) for m in members]
        # Critical path inside each partition: the longest path ending at v, and where it came
        # from; the memory and compute seconds along each partition's longest path are summed
        # afterwards, in path order (the same sums, without a tuple per node).
        best = [0.0] * self.n
        came = [-1] * self.n
        end = [-1] * num
        edges: dict[tuple[int, int], int] = {}
        counted: set[tuple[int, int]] = set()
        node_s, out, op_preds = self.node_s, self.out, self.op_preds
        for v in self.op_order:
            p = part[v]
            if p < 0:
                continue
            top, arg = 0.0, -1
            for u in op_preds[v]:
                q = part[u]
                if q == p:
                    if best[u] > top:
                        top, arg = best[u], u
                elif q >= 0 and (u, p) not in counted:  # q < 0: an op in no partition (invalid plan)
                    counted.add((u, p))
                    edges[(q, p)] = edges.get((q, p), 0) + out[u]
            cur = top + node_s[v]
            best[v], came[v] = cur, arg
            e = end[p]
            if e < 0 and cur > 0.0 or e >= 0 and cur > best[e]:
                end[p] = v
        if self.serial:
            latency = [self._sum_latency(m) for m in members]
        else:
            latency = [self._path_latency(end[p], came) for p in range(num)]
        if self.torch:
            edges = self._torch_edge_bytes(part, members, edges)
        order, finish, begin, levels, path, total = self.schedule([t for t, _, _ in latency], edges, devices_of)
        return Evaluation(members, memory, latency, edges, order, finish, total, path, levels, begin)

    def schedule(
        self, latency: Sequence[float], edges: Mapping[tuple[int, int], int], devices_of: Sequence[Sequence[int]]
    ) -> tuple[list[int] | None, list[float], list[float], list[int], list[int], float]:
        """The plan's schedule from each partition's latency and the partition edges: (topological
        order or None when cyclic, finish, start, BFS level, critical path, end-to-end latency).
        O(P + E log E) for P partitions and E edges (parents are visited in id order, so ties on
        the critical path break alike however the edges were collected)."""
        num = len(devices_of)
        order = toposort(num, edges)
        finish = [math.inf] * num
        begin = [math.inf] * num
        levels = [-1] * num
        path: list[int] = []
        total = math.inf
        if order is None:
            return order, finish, begin, levels, path, total
        parents: list[list[int]] = [[] for _ in range(num)]
        for a, b in sorted(edges):
            parents[b].append(a)
        came_from = [-1] * num
        free_at: dict[int, tuple[float, int]] = {}  # device -> (when free, last partition)
        for p in order:
            start, level = 0.0, 0
            for q in parents[p]:
                t = finish[q] + self.comm_s(edges[(q, p)], devices_of[q], devices_of[p])
                if t > start or came_from[p] < 0 and t >= start:
                    start, came_from[p] = t, q
                level = max(level, levels[q] + 1)
            if not self.torch:
                # NOTE: [A device runs one partition at a time] Partitions sharing a device
                # run in this topological order; one starts when its inputs have arrived and
                # each of its devices has finished the partition before it.
                for d in devices_of[p]:
                    t, last = free_at.get(d, (0.0, -1))
                    if t > start:
                        start, came_from[p] = t, last
            begin[p] = start
            finish[p] = start + latency[p]
            levels[p] = level
            if not self.torch:
                for d in devices_of[p]:
                    free_at[d] = (finish[p], p)
        total = max(finish) if finish else 0.0
        if num:
            p = max(range(num), key=finish.__getitem__)  # the first of equals: the lowest id
            while p >= 0:
                path.append(p)
                p = came_from[p]
            path.reverse()
        return order, finish, begin, levels, path, total

    def _path_latency(self, v: int, came: Sequence[int]) -> tuple[float, float, float]:
        """(overall, mem, compute) seconds of the path ending at v (``came``: its links), summed
        from its first node, as the critical path was."""
        path = []
        while v >= 0:
            path.append(v)
            v = came[v]
        total = mem = compute = 0.0
        for u in reversed(path):
            total += self.node_s[u]
            mem += self.mem_s[u]
            compute += self.compute_s[u]
        return (total, mem, compute)

    def _sum_latency(self, members: Sequence[int]) -> tuple[float, float, float]:
        """(overall, mem, compute) seconds of a partition whose ops run one at a time."""
        return (
            sum(self.node_s[v] for v in members),
            sum(self.mem_s[v] for v in members),
            sum(self.compute_s[v] for v in members),
        )

    def _torch_edge_bytes(
        self, part: Sequence[int], members: Sequence[Sequence[int]], edges: Mapping[tuple[int, int], int]
    ) -> dict[tuple[int, int], int]:
        """Bytes of each partition edge as ``get_comm_latency_between`` counts them: every node
        of the parent (its ops, and the inputs and attributes it holds) that the child reads,
        once, so an input both partitions read counts as sent from the parent."""
        held: dict[int, set[int]] = {}  # non-op node -> partitions that hold it
        for p, nodes in enumerate(members):
            for v in nodes:
                for u in self.preds[v]:
                    if not self.is_op[u]:
                        held.setdefault(u, set()).add(p)
        out: dict[tuple[int, int], int] = {}
        for q, p in edges:
            seen: set[int] = set()
            total = 0
            for v in members[p]:
                for u in self.preds[v]:
                    if u in seen:
                        continue
                    if (self.is_op[u] and part[u] == q) or (not self.is_op[u] and q in held.get(u, ())):
                        seen.add(u)
                        total += self.out[u]
            out[(q, p)] = total
        return out


NEAR_TIE = 0.01


def best_index(scores: Sequence[tuple[float, int]]) -> int | None:
    """Index of the best of ``(latency_s, partition count)`` pairs: the fewest partitions among
    those within :data:`NEAR_TIE` of the lowest finite latency, then the lower latency, then the
    earlier entry. None when no latency is finite."""
    finite = [i for i, (lat, _) in enumerate(scores) if math.isfinite(lat)]
    if not finite:
        return None
    low = min(scores[i][0] for i in finite)
    close = [i for i in finite if scores[i][0] <= low + NEAR_TIE * abs(low)]
    return min(close, key=lambda i: (scores[i][1], scores[i][0], i))
