"""Pure pandas builders over a Plan: partitions, devices, edges, the schedule, a comparison.

Numbers stay numbers (bytes, seconds) so st.dataframe sorts them; a few text columns carry
the human form. Nothing here imports Streamlit.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import pandas as pd

from partitioner import Plan, format_bytes
from partitioner.accelerator.compare import ModeResult, best_mode, gaps
from partitioner.draw.dag import partition_capacity
from partitioner.plan.diff import PlanDiff, match_partitions
from partitioner.units import format_seconds, format_share, format_signed


def percent(fraction: float | None) -> str:
    """A share of memory as every page writes it (issue 56: Compare said 99.5 % where Explore said
    100 % for the same plan): one decimal, "99.5%"; "-" for none or an infinite one."""
    return "-" if fraction is None or not math.isfinite(fraction) else f"{fraction:.1%}"


__all__ = [
    "schedule",
    "incoming_transfer_s",
    "partition_table",
    "device_table",
    "edge_table",
    "readable_partition_table",
    "readable_device_table",
    "readable_edge_table",
    "comparison_table",
    "moves_table",
    "partition_delta_table",
    "match_partitions",
    "time_unit",
    "byte_unit",
]


def schedule(plan: Plan) -> dict[int, tuple[float, float]]:
    """Partition id -> (start s, finish s); see :meth:`partitioner.Plan.schedule`."""
    return plan.schedule()


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
    over = set(plan.over_capacity())
    rows = []
    for p in sorted(plan.partitions, key=lambda p: p.id):
        capacity = partition_capacity(plan, p)
        start, finish = times.get(p.id, (math.nan, math.nan))
        rows.append(
            {
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
            }
        )
    return pd.DataFrame(rows)


def readable_partition_table(plan: Plan) -> pd.DataFrame:
    """:func:`partition_table` for people: headers in words, times in one unit chosen for the
    plan (enough digits to tell start from finish), memory in binary units, share in percent."""
    data = partition_table(plan)
    unit, scale = time_unit(
        max([plan.latency_s] + [p.latency_s for p in plan.partitions] if math.isfinite(plan.latency_s) else [0.0])
    )

    def t(v: float) -> str:
        return "-" if v is None or not math.isfinite(v) else f"{v / scale:.4g} {unit}"

    nodes = data["nodes"]
    return pd.DataFrame(
        {
            "Partition": [f"P{i}" for i in data["partition"]],
            "Devices": data["devices"],
            "Nodes": [f"{n} node{'s' if n != 1 else ''}" for n in nodes],
            "Memory": data["memory"],
            "Of capacity": [percent(u) for u in data["utilisation"]],
            "Latency": [t(v) for v in data["latency_s"]],
            "Compute": [t(v) for v in data["compute_s"]],
            "Memory time": [t(v) for v in data["memory_s"]],
            "Transfer in": [t(v) for v in data["transfer_in_s"]],
            "Start": [t(v) for v in data["start_s"]],
            "Finish": [t(v) for v in data["finish_s"]],
            "Critical path": ["yes" if c else "" for c in data["critical"]],
            "BFS level": data["bfs_level"],
        }
    )


def device_table(plan: Plan) -> pd.DataFrame:
    """One row per device: kind, memory used (shared inputs counted once) of capacity."""
    used = plan.device_memory_bytes()
    holders: dict[int, list[int]] = {}
    for p in plan.partitions:
        for d in p.device_ids:
            holders.setdefault(d, []).append(p.id)
    rows = []
    for dev in sorted(plan.devices, key=lambda d: d.logical_id):
        u = used.get(dev.logical_id, 0)
        rows.append(
            {
                "device": dev.name,
                "id": dev.logical_id,
                "kind": dev.kind,
                "used": format_bytes(u),
                "capacity": format_bytes(dev.memory_bytes),
                "used_bytes": u,
                "capacity_bytes": dev.memory_bytes,
                "utilisation": u / dev.memory_bytes if dev.memory_bytes else (math.inf if u else 0.0),
                "over_capacity": u > dev.memory_bytes,
                "partitions": ", ".join(map(str, sorted(holders.get(dev.logical_id, [])))),
            }
        )
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


def readable_device_table(plan: Plan) -> pd.DataFrame:
    """:func:`device_table` for people: one column per fact, memory in binary units, the share in
    percent (a number, so it sorts), partitions named as the DAG names them (``P0``)."""
    data = device_table(plan)
    return pd.DataFrame(
        {
            "Device": data["device"],
            "Kind": data["kind"],
            "Memory used": data["used"],
            "Capacity": data["capacity"],
            "Of capacity": [format_share(u, d) for u, d in zip(data["used_bytes"], data["capacity_bytes"])],
            "Over capacity": ["yes" if o else "" for o in data["over_capacity"]],
            "Partitions": [
                ", ".join(f"P{i}" for i in text.split(", ")) if text else "-" for text in data["partitions"]
            ],
        },
        columns=["Device", "Kind", "Memory used", "Capacity", "Of capacity", "Over capacity", "Partitions"],
    )


def readable_edge_table(plan: Plan) -> pd.DataFrame:
    """:func:`edge_table` for people: ``P0 -> P1``, the bytes in binary units, the transfer time in
    one unit chosen for the plan's edges."""
    data = edge_table(plan)
    finite = [v for v in data["transfer_s"] if math.isfinite(v) and v > 0]
    unit, scale = time_unit(max(finite, default=0.0))

    def t(v: float) -> str:
        if not math.isfinite(v):
            return "-"
        return "free (same device)" if v == 0 else f"{v / scale:.3g} {unit}"

    return pd.DataFrame(
        {
            "From": [f"P{i}" for i in data["from"]],
            "To": [f"P{i}" for i in data["to"]],
            "Bytes crossing": data["bytes"],
            "Transfer time": [t(v) for v in data["transfer_s"]],
            "Critical path": ["yes" if c else "" for c in data["critical"]],
        },
        columns=["From", "To", "Bytes crossing", "Transfer time", "Critical path"],
    )


def optimal_notes(results: Sequence[ModeResult], op_count: int | None = None) -> dict[str, str]:
    """Mode -> what its row must say beside the numbers: that ``optimal`` searched a coarsened
    graph (over :data:`~partitioner.accelerator.optimal.MAX_UNITS` ops: its plans are the best of
    the grouped problem only), and by how much a plan beats the mode called optimal."""
    from partitioner.accelerator.optimal import MAX_UNITS

    found = {r.mode: r for r in results if r.ok and r.latency_s is not None}
    notes: dict[str, str] = {}
    optimal = found.get("optimal")
    if optimal is None:
        return notes
    if op_count is not None and op_count > MAX_UNITS:
        notes["optimal"] = (
            f"optimal for a coarsened graph only: its {op_count:,} ops grouped into at most "
            f"{MAX_UNITS} units first, so a plan that splits a group can be faster"
        )
    best = float(optimal.latency_s or 0.0)
    for mode, r in found.items():
        lat = float(r.latency_s or 0.0)
        if mode != "optimal" and best > 0 and lat < best * (1 - 0.0005):
            notes[mode] = (
                f"beats optimal by {format_seconds(best - lat)} ({(best - lat) / best:.1%} of its "
                f"{format_seconds(best)})"
            )
    return notes


def comparison_table(results: Sequence[ModeResult], op_count: int | None = None) -> pd.DataFrame:
    """One row per mode, in units people read; a failed mode keeps its row, with its error text.
    The best mode (the one best-plan rule, :func:`partitioner.accelerator.compare.best_mode`) is starred;
    ``Note`` says when optimal is optimal for a coarsened graph only (``op_count``: the graph's ops)
    and by how much a plan beats it (:func:`optimal_notes`)."""
    best = best_mode(results)
    gap = gaps(results)
    notes = optimal_notes(results, op_count)
    rows = []
    for r in results:
        util = r.peak_memory_utilisation
        to_bound, to_best = gap.get(r.mode, (None, None))
        rows.append(
            {
                "Mode": r.mode,
                "Best": "\u2605 best" if r.mode == best else "",
                "Latency": format_seconds(r.latency_s) if r.ok else "-",
                "Partitions": "-" if r.partitions is None else str(r.partitions),
                "Peak memory": "-" if util is None else percent(util),
                "Gap to bound": "-" if to_bound is None else format_share(to_bound, 1.0),
                "Gap to optimal": "-" if to_best is None else format_signed(to_best),
                "Time to plan": format_seconds(r.seconds),
                "Note": notes.get(r.mode, ""),
                "Error": r.error or "",
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "Mode",
            "Best",
            "Latency",
            "Partitions",
            "Peak memory",
            "Gap to bound",
            "Gap to optimal",
            "Time to plan",
            "Note",
            "Error",
        ],
    )


def moves_table(plan_a: Plan, plan_b: Plan) -> pd.DataFrame:
    """Nodes that ``plan_b`` runs elsewhere than ``plan_a``: with other partners (partitions matched
    by :func:`match_partitions`, so renumbering alone moves nothing), or in the same partition
    placed on other devices. ``change`` says which."""
    matched = match_partitions(plan_a, plan_b)
    where_a = plan_a.node_to_partition()
    parts_a = {p.id: p for p in plan_a.partitions}
    rows = []
    for p in sorted(plan_b.partitions, key=lambda p: p.id):
        for name in p.node_names:
            if name not in where_a:
                continue
            old = parts_a[where_a[name]]
            other_partition = matched.get(p.id) != where_a[name]
            if not other_partition and sorted(old.device_ids) == sorted(p.device_ids):
                continue
            rows.append(
                {
                    "node": name,
                    "from": f"P{old.id} ({_devices_text(plan_a, old.device_ids)})",
                    "to": f"P{p.id} ({_devices_text(plan_b, p.device_ids)})" + ("" if p.id in matched else ", new"),
                    "change": "other partition" if other_partition else "other devices",
                }
            )
    return pd.DataFrame(rows, columns=["node", "from", "to", "change"])


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


def cost_model_table(plan: Plan, other: Plan) -> pd.DataFrame:
    """One row per partition (and one for the plan): memory and timing under the plan's cost
    model and the other one, for the same partitions."""
    by = {plan.cost_model: plan, other.cost_model: other}
    phys, torch_ = by.get("physical", plan), by.get("torch", other)
    rows = [
        {
            "": "whole plan",
            "latency, physical": format_seconds(phys.latency_s),
            "latency, torch": format_seconds(torch_.latency_s),
            "peak memory, physical": percent(phys.memory_utilisation()),
            "peak memory, torch": percent(torch_.memory_utilisation()),
        }
    ]
    for a, b in zip(sorted(phys.partitions, key=lambda p: p.id), sorted(torch_.partitions, key=lambda p: p.id)):
        rows.append(
            {
                "": f"P{a.id}",
                "latency, physical": f"finishes {format_seconds(a.finish_s)}",
                "latency, torch": f"finishes {format_seconds(b.finish_s)}",
                "peak memory, physical": format_bytes(a.memory_bytes),
                "peak memory, torch": format_bytes(b.memory_bytes),
            }
        )
    return pd.DataFrame(rows)


def partition_delta_table(diff: PlanDiff) -> pd.DataFrame:
    """The library's per-partition deltas (:func:`partitioner.plan.diff.diff_plans`), a row per id
    of either plan that is not unchanged: devices, nodes, memory, latency and bytes crossing, A
    then B."""

    def cell(value: object, fmt) -> str:
        return "-" if value is None else fmt(value)

    rows = []
    for d in diff.partitions:
        if d.status == "unchanged":
            continue
        rows.append(
            {
                "partition": f"P{d.id}",
                "status": d.status,
                "devices": f"{cell(d.devices_a, list)} -> {cell(d.devices_b, list)}",
                "nodes": f"{cell(d.nodes_a, str)} -> {cell(d.nodes_b, str)}",
                "memory": f"{cell(d.memory_bytes_a, format_bytes)} -> {cell(d.memory_bytes_b, format_bytes)}",
                "latency": f"{cell(d.latency_s_a, format_seconds)} -> {cell(d.latency_s_b, format_seconds)}",
                "bytes crossing": f"{cell(d.bytes_crossing_a, format_bytes)} -> {cell(d.bytes_crossing_b, format_bytes)}",
            }
        )
    return pd.DataFrame(
        rows, columns=["partition", "status", "devices", "nodes", "memory", "latency", "bytes crossing"]
    )
