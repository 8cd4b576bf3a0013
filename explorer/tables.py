"""Pure pandas builders over a Plan: partitions, devices, edges, the schedule, a comparison.

Numbers stay numbers (bytes, seconds) so st.dataframe sorts them; a few text columns carry
the human form. Nothing here imports Streamlit.
"""

from __future__ import annotations

import heapq
import math
from typing import Iterable, Sequence

import pandas as pd

from partitioner import Plan, format_bytes
from partitioner.compare import ModeResult, format_seconds
from partitioner.render import over_capacity_devices, partition_capacity

__all__ = [
    "schedule",
    "incoming_transfer_s",
    "partition_table",
    "device_table",
    "edge_table",
    "comparison_table",
    "moves_table",
    "time_unit",
    "byte_unit",
]


def schedule(plan: Plan) -> dict[int, tuple[float, float]]:
    """Partition id -> (start s, finish s) on the partition DAG's longest-path schedule.

    start = max over parents of (parent finish + edge latency), finish = start + latency, the
    rule the cost model uses, so the largest finish equals ``plan.latency_s``. Empty when the
    partitions form a cycle (a hand-edited plan). O(P + E).
    """
    ids = [p.id for p in plan.partitions]
    latency = {p.id: p.latency_s for p in plan.partitions}
    incoming: dict[int, list[tuple[int, float]]] = {i: [] for i in ids}
    children: dict[int, list[int]] = {i: [] for i in ids}
    indegree = {i: 0 for i in ids}
    for e in plan.edges:
        if e.src in latency and e.dst in latency:
            incoming[e.dst].append((e.src, e.latency_s))
            children[e.src].append(e.dst)
            indegree[e.dst] += 1
    ready = [i for i in ids if indegree[i] == 0]
    heapq.heapify(ready)
    times: dict[int, tuple[float, float]] = {}
    while ready:
        p = heapq.heappop(ready)
        start = max((times[q][1] + lat for q, lat in incoming[p]), default=0.0)
        times[p] = (start, start + latency[p])
        for c in children[p]:
            indegree[c] -= 1
            if indegree[c] == 0:
                heapq.heappush(ready, c)
    return times if len(times) == len(ids) else {}


def incoming_transfer_s(plan: Plan) -> dict[int, float]:
    """Partition id -> its slowest incoming transfer (0 when it has no parent or all are free)."""
    slowest = {p.id: 0.0 for p in plan.partitions}
    for e in plan.edges:
        if e.dst in slowest:
            slowest[e.dst] = max(slowest[e.dst], e.latency_s)
    return slowest


def _devices_text(plan: Plan, ids: Iterable[int]) -> str:
    names = {d.logical_id: d.name for d in plan.devices}
    return ", ".join(names.get(i, f"unknown {i}") for i in ids)


def partition_table(plan: Plan) -> pd.DataFrame:
    """One row per partition: devices, size, memory against capacity, latencies, schedule."""
    times = schedule(plan)
    comm = incoming_transfer_s(plan)
    critical = set(plan.critical_path)
    over = over_capacity_devices(plan)
    rows = []
    for p in sorted(plan.partitions, key=lambda p: p.id):
        capacity = partition_capacity(plan, p)
        start, finish = times.get(p.id, (math.nan, math.nan))
        rows.append({
            "partition": p.id,
            "devices": _devices_text(plan, p.device_ids),
            "nodes": len(p.node_names),
            "memory": format_bytes(p.memory_bytes),
            "memory_bytes": p.memory_bytes,
            "capacity_bytes": capacity,
            "utilisation": (p.memory_bytes / capacity) if capacity else math.nan,
            "over_capacity": any(d in over for d in p.device_ids),
            "latency": format_seconds(p.latency_s),
            "latency_s": p.latency_s,
            "compute_s": p.compute_latency_s,
            "memory_s": p.memory_latency_s,
            "transfer_in_s": comm[p.id],
            "start_s": start,
            "finish_s": finish,
            "critical": p.id in critical,
            "bfs_level": p.bfs_level,
            "parents": ", ".join(map(str, p.parents)),
            "children": ", ".join(map(str, p.children)),
        })
    return pd.DataFrame(rows)


def device_table(plan: Plan) -> pd.DataFrame:
    """One row per device: kind, memory used (shared inputs counted once) of capacity."""
    used = plan.device_memory_bytes()
    holders: dict[int, list[int]] = {}
    for p in plan.partitions:
        for d in p.device_ids:
            holders.setdefault(d, []).append(p.id)
    rows = []
    for d in sorted(plan.devices, key=lambda d: d.logical_id):
        u = used.get(d.logical_id, 0)
        rows.append({
            "device": d.name,
            "id": d.logical_id,
            "kind": d.kind,
            "used": format_bytes(u),
            "capacity": format_bytes(d.memory_bytes),
            "used_bytes": u,
            "capacity_bytes": d.memory_bytes,
            "utilisation": u / d.memory_bytes if d.memory_bytes else (math.inf if u else 0.0),
            "over_capacity": u > d.memory_bytes,
            "partitions": ", ".join(map(str, sorted(holders.get(d.logical_id, [])))),
        })
    return pd.DataFrame(rows)


def edge_table(plan: Plan) -> pd.DataFrame:
    critical = set(zip(plan.critical_path, plan.critical_path[1:]))
    rows = [
        {
            "from": e.src,
            "to": e.dst,
            "bytes": format_bytes(e.bytes),
            "bytes_crossing": e.bytes,
            "transfer": format_seconds(e.latency_s),
            "transfer_s": e.latency_s,
            "critical": (e.src, e.dst) in critical,
        }
        for e in sorted(plan.edges, key=lambda e: (e.src, e.dst))
    ]
    return pd.DataFrame(rows, columns=["from", "to", "bytes", "bytes_crossing", "transfer", "transfer_s", "critical"])


def comparison_table(results: Sequence[ModeResult]) -> pd.DataFrame:
    """One row per mode; a failed mode keeps its row, with its error text and empty numbers."""
    ok = [r for r in results if r.ok and r.latency_s is not None]
    best = min(ok, key=lambda r: (r.latency_s, r.partitions)).mode if ok else None
    rows = []
    for r in results:
        rows.append({
            "mode": r.mode,
            "best": r.mode == best,
            "latency": format_seconds(r.latency_s),
            "latency_s": r.latency_s,
            "partitions": r.partitions,
            "peak_memory_utilisation": r.peak_memory_utilisation,
            "seconds_to_partition": r.seconds,
            "error": r.error or "",
        })
    return pd.DataFrame(rows)


def moves_table(plan_a: Plan, plan_b: Plan) -> pd.DataFrame:
    """Nodes placed in different partitions by ``plan_a`` and ``plan_b``."""
    from partitioner.diff import diff_plans

    diff = diff_plans(plan_a, plan_b)
    rows = [
        {
            "node": m.node,
            "from": f"P{m.from_partition} ({_devices_text(plan_a, m.from_devices)})",
            "to": f"P{m.to_partition} ({_devices_text(plan_b, m.to_devices)})",
        }
        for m in diff.moves
    ]
    return pd.DataFrame(rows, columns=["node", "from", "to"])


def time_unit(largest_s: float) -> tuple[str, float]:
    """(unit, seconds per unit) that shows ``largest_s`` as a number between 1 and 1000."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if largest_s >= scale:
            return unit, scale
    return "ns", 1e-9


def byte_unit(largest: float) -> tuple[str, float]:
    for unit, scale in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if largest >= scale:
            return unit, scale
    return "B", 1.0
