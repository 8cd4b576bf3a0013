"""Compare two plans: which nodes moved, and how each partition's memory, latency and traffic changed.

Partitions are matched by the nodes they share (:func:`match_partitions`: renumbering alone moves
nothing; a partition that matches none in the other plan is reported as added or removed); nodes
are matched by name. Used by ``partition-explorer diff`` and the app. O(N + E)
for plans of N nodes and E partition edges.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from partitioner.plan.records import Plan

__all__ = ["NodeMove", "PartitionDelta", "PlanDiff", "diff_plans", "match_partitions"]


@dataclass(frozen=True)
class NodeMove:
    """A node in different partitions in plans ``a`` and ``b``."""

    node: str
    from_partition: int
    from_devices: tuple[int, ...]
    to_partition: int
    to_devices: tuple[int, ...]


@dataclass(frozen=True)
class PartitionDelta:
    """One partition id in both plans; the ``*_a`` fields are None when it is only in ``b``
    (``status == "added"``) and the ``*_b`` fields when it is only in ``a`` (``"removed"``)."""

    id: int
    status: str  # "added" | "removed" | "changed" | "unchanged"
    devices_a: tuple[int, ...] | None
    devices_b: tuple[int, ...] | None
    nodes_a: int | None  # node count
    nodes_b: int | None
    memory_bytes_a: int | None
    memory_bytes_b: int | None
    latency_s_a: float | None
    latency_s_b: float | None
    bytes_in_a: int | None  # bytes crossing into the partition from other partitions
    bytes_in_b: int | None
    bytes_out_a: int | None  # bytes crossing out of it to other partitions
    bytes_out_b: int | None

    @property
    def bytes_crossing_a(self) -> int | None:
        return None if self.bytes_in_a is None or self.bytes_out_a is None else self.bytes_in_a + self.bytes_out_a

    @property
    def bytes_crossing_b(self) -> int | None:
        return None if self.bytes_in_b is None or self.bytes_out_b is None else self.bytes_in_b + self.bytes_out_b

    @property
    def memory_change_bytes(self) -> int:
        return (self.memory_bytes_b or 0) - (self.memory_bytes_a or 0)

    @property
    def latency_change_s(self) -> float:
        return (self.latency_s_b or 0.0) - (self.latency_s_a or 0.0)

    @property
    def bytes_crossing_change(self) -> int:
        return (self.bytes_crossing_b or 0) - (self.bytes_crossing_a or 0)


@dataclass(frozen=True)
class PlanDiff:
    """What changed from plan ``a`` to plan ``b``; build one with :func:`diff_plans`."""

    model_a: str
    model_b: str
    mode_a: str
    mode_b: str
    same_graph: bool  # both plans record the same graph fingerprint
    devices_changed: bool  # the device lists differ (names, memory, ids or speeds)
    transfer_rate_a: float | None  # bytes/s the plan was scored with (None: transfers free)
    transfer_rate_b: float | None
    latency_s_a: float
    latency_s_b: float
    peak_memory_utilisation_a: float
    peak_memory_utilisation_b: float
    moves: tuple[NodeMove, ...]  # in plan a's node order
    partitions: tuple[PartitionDelta, ...]  # every id of either plan, ascending
    nodes_only_in_a: tuple[str, ...]  # nodes plan b does not place (in a's order)
    nodes_only_in_b: tuple[str, ...]

    @property
    def latency_change_s(self) -> float:
        """``b`` minus ``a``; NaN when both are infinite (cyclic)."""
        if math.isinf(self.latency_s_a) and math.isinf(self.latency_s_b):
            return math.nan
        return self.latency_s_b - self.latency_s_a

    @property
    def added(self) -> tuple[int, ...]:
        return tuple(p.id for p in self.partitions if p.status == "added")

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple(p.id for p in self.partitions if p.status == "removed")

    @property
    def is_empty(self) -> bool:
        """True when the plans place every node alike and score the same."""
        return (
            not self.moves
            and not self.nodes_only_in_a
            and not self.nodes_only_in_b
            and all(p.status == "unchanged" for p in self.partitions)
            and (self.latency_s_a == self.latency_s_b)
            and not self.devices_changed
            and self.transfer_rate_a == self.transfer_rate_b
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (non-finite numbers become None)."""

        def clean(value: Any) -> Any:
            if isinstance(value, float) and not math.isfinite(value):
                return None
            if isinstance(value, tuple):
                return [clean(v) for v in value]
            return value

        def record(obj: Any, extra: dict[str, Any]) -> dict[str, Any]:
            data = {k: clean(v) for k, v in vars(obj).items()}
            data.update({k: clean(v) for k, v in extra.items()})
            return data

        return {
            **{k: clean(v) for k, v in vars(self).items() if k not in ("moves", "partitions")},
            "latency_change_s": clean(self.latency_change_s),
            "added_partitions": list(self.added),
            "removed_partitions": list(self.removed),
            "moves": [record(m, {}) for m in self.moves],
            "partitions": [
                record(
                    p,
                    {
                        "memory_change_bytes": p.memory_change_bytes,
                        "latency_change_s": clean(p.latency_change_s),
                        "bytes_crossing_a": p.bytes_crossing_a,
                        "bytes_crossing_b": p.bytes_crossing_b,
                        "bytes_crossing_change": p.bytes_crossing_change,
                    },
                )
                for p in self.partitions
            ],
        }


def _traffic(plan: Plan) -> tuple[dict[int, int], dict[int, int]]:
    into: dict[int, int] = {p.id: 0 for p in plan.partitions}
    out: dict[int, int] = {p.id: 0 for p in plan.partitions}
    for e in plan.edges:
        into[e.dst] = into.get(e.dst, 0) + e.bytes
        out[e.src] = out.get(e.src, 0) + e.bytes
    return into, out


def match_partitions(before: Plan, after: Plan) -> dict[int, int]:
    """Partition ids of ``after`` -> the id in ``before`` they continue, by most shared nodes.

    Plans number partitions by their first node, so one moved node can shift every later id;
    matching by overlap (largest first, each partition of ``before`` used once) tells a moved
    node from a renumbered partition. Partitions of ``after`` with no match are new.
    O(N + P log P).
    """
    where = before.node_to_partition()
    overlap: dict[tuple[int, int], int] = {}
    for p in after.partitions:
        for name in p.node_names:
            if name in where:
                key = (p.id, where[name])
                overlap[key] = overlap.get(key, 0) + 1
    matched: dict[int, int] = {}
    taken: set[int] = set()
    for (x, y), _ in sorted(overlap.items(), key=lambda kv: (-kv[1], kv[0])):
        if x not in matched and y not in taken:
            matched[x] = y
            taken.add(y)
    return matched


def _aligned(a: Plan, b: Plan) -> tuple[Plan, dict[int, int]]:
    """``b`` with its partitions renumbered to the ids of the partitions of ``a`` they continue
    (:func:`match_partitions`); new ones are numbered after ``a``'s. Also returns the map from
    aligned id back to ``b``'s own id."""
    matched = match_partitions(a, b)
    next_id = max((p.id for p in a.partitions), default=-1) + 1
    new_id: dict[int, int] = {}
    for p in sorted(b.partitions, key=lambda p: p.id):
        if p.id in matched:
            new_id[p.id] = matched[p.id]
        else:
            new_id[p.id] = next_id
            next_id += 1
    partitions = tuple(
        dataclasses.replace(
            p,
            id=new_id[p.id],
            parents=tuple(sorted(new_id[x] for x in p.parents if x in new_id)),
            children=tuple(sorted(new_id[x] for x in p.children if x in new_id)),
        )
        for p in b.partitions
    )
    edges = tuple(
        dataclasses.replace(e, src=new_id[e.src], dst=new_id[e.dst])
        for e in b.edges
        if e.src in new_id and e.dst in new_id
    )
    aligned = dataclasses.replace(b, partitions=partitions, edges=edges)
    return aligned, {v: k for k, v in new_id.items()}


def diff_plans(a: Plan, b: Plan) -> PlanDiff:
    """Everything that differs from ``a`` to ``b``: node moves, per-partition deltas, nodes
    placed by one plan only, and the end-to-end latency. Partitions are matched by shared nodes
    (:func:`match_partitions`), so renumbering alone moves nothing; deltas carry ``a``'s ids, and
    partitions new in ``b`` are numbered after ``a``'s. O(N + E + P log P)."""
    b, own_id = _aligned(a, b)
    where_a = {n: p for p in a.partitions for n in p.node_names}
    where_b = {n: p for p in b.partitions for n in p.node_names}
    moves = tuple(
        NodeMove(n, pa.id, pa.device_ids, own_id[where_b[n].id], where_b[n].device_ids)
        for n, pa in where_a.items()
        if n in where_b and where_b[n].id != pa.id
    )
    in_a, out_a = _traffic(a)
    in_b, out_b = _traffic(b)
    parts_a = {p.id: p for p in a.partitions}
    parts_b = {p.id: p for p in b.partitions}
    deltas = []
    for pid in sorted(set(parts_a) | set(parts_b)):
        pa, pb = parts_a.get(pid), parts_b.get(pid)
        delta = PartitionDelta(
            id=pid,
            status="",
            devices_a=None if pa is None else pa.device_ids,
            devices_b=None if pb is None else pb.device_ids,
            nodes_a=None if pa is None else len(pa.node_names),
            nodes_b=None if pb is None else len(pb.node_names),
            memory_bytes_a=None if pa is None else pa.memory_bytes,
            memory_bytes_b=None if pb is None else pb.memory_bytes,
            latency_s_a=None if pa is None else pa.latency_s,
            latency_s_b=None if pb is None else pb.latency_s,
            bytes_in_a=None if pa is None else in_a.get(pid, 0),
            bytes_in_b=None if pb is None else in_b.get(pid, 0),
            bytes_out_a=None if pa is None else out_a.get(pid, 0),
            bytes_out_b=None if pb is None else out_b.get(pid, 0),
        )
        if pa is None:
            status = "added"
        elif pb is None:
            status = "removed"
        elif (
            pa.node_names == pb.node_names
            and pa.device_ids == pb.device_ids
            and delta.memory_change_bytes == 0
            and pa.latency_s == pb.latency_s
            and delta.bytes_in_a == delta.bytes_in_b
            and delta.bytes_out_a == delta.bytes_out_b
        ):
            status = "unchanged"
        else:
            status = "changed"
        deltas.append(dataclasses.replace(delta, status=status))
    return PlanDiff(
        model_a=a.model,
        model_b=b.model,
        mode_a=a.mode,
        mode_b=b.mode,
        same_graph=bool(a.graph_fingerprint) and a.graph_fingerprint == b.graph_fingerprint,
        devices_changed=a.devices != b.devices,
        transfer_rate_a=a.transfer_rate_bytes_per_s,
        transfer_rate_b=b.transfer_rate_bytes_per_s,
        latency_s_a=a.latency_s,
        latency_s_b=b.latency_s,
        peak_memory_utilisation_a=a.memory_utilisation(),
        peak_memory_utilisation_b=b.memory_utilisation(),
        moves=moves,
        partitions=tuple(deltas),
        nodes_only_in_a=tuple(n for n in where_a if n not in where_b),
        nodes_only_in_b=tuple(n for n in where_b if n not in where_a),
    )


# --------------------------------------------------------------------------------------------
# Text
