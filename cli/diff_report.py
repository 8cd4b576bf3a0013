"""The text report of a plan diff (``partition-explorer diff``); the data is
:func:`partitioner.plan.diff.diff_plans`'s."""

from __future__ import annotations

import math

from cli.report import format_table
from partitioner.plan.diff import PlanDiff
from partitioner.units import format_bytes, format_seconds, format_signed

__all__ = ["format_diff"]


def _signed_bytes(n: int) -> str:
    return ("+" if n > 0 else "-" if n < 0 else "+") + format_bytes(abs(n))


def _signed_seconds(s: float) -> str:
    if math.isnan(s):
        return "n/a"
    return ("+" if s >= 0 else "-") + format_seconds(abs(s))


def _same_seconds(a: float, b: float) -> bool:
    """Equal but for float rounding (the same plan summed in another order): no change to show, never ``-0 s``."""
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def _rate(rate: float | None) -> str:
    return "not modelled" if not rate else f"{rate:.3g} B/s"


def _devices(ids: tuple[int, ...] | None) -> str:
    return "-" if ids is None else "[" + ",".join(str(i) for i in ids) + "]"


def _pair(a: str, b: str, change: str | None) -> str:
    if a == b and change is None:
        return a
    return f"{a} -> {b}" + (f" ({change})" if change else "")


def _cell_bytes(a: int | None, b: int | None) -> str:
    if a is None or b is None:
        return _pair("-" if a is None else format_bytes(a), "-" if b is None else format_bytes(b), None)
    if a == b:
        return format_bytes(a)
    return _pair(format_bytes(a), format_bytes(b), _signed_bytes(b - a))


def _cell_seconds(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return _pair(format_seconds(a), format_seconds(b), None)
    if _same_seconds(a, b):
        return format_seconds(a)
    return _pair(format_seconds(a), format_seconds(b), _signed_seconds(b - a))


def format_diff(d: PlanDiff, label_a: str = "a", label_b: str = "b") -> str:
    """A readable report of ``d``: header figures, moved nodes, and a per-partition table."""
    lines = [f"--- {label_a}", f"+++ {label_b}"]
    model = d.model_a if d.model_a == d.model_b else f"{d.model_a} -> {d.model_b}"
    graph_note = "same graph" if d.same_graph else "DIFFERENT graphs (fingerprints differ)"
    lines.append(f"model: {model} ({graph_note})")
    lines.append("mode: " + (d.mode_a if d.mode_a == d.mode_b else f"{d.mode_a} -> {d.mode_b}"))
    if d.devices_changed:
        lines.append("devices: changed")
    if d.transfer_rate_a != d.transfer_rate_b:
        lines.append(f"transfer rate: {_rate(d.transfer_rate_a)} -> {_rate(d.transfer_rate_b)}")
    change = d.latency_change_s
    if math.isfinite(d.latency_s_a) and d.latency_s_a > 0 and math.isfinite(change):
        pct = f", {format_signed(change / d.latency_s_a)}"
    else:
        pct = ""
    latency = (
        format_seconds(d.latency_s_a)
        if _same_seconds(d.latency_s_a, d.latency_s_b)
        else f"{format_seconds(d.latency_s_a)} -> {format_seconds(d.latency_s_b)} ({_signed_seconds(change)}{pct})"
    )
    lines.append(f"end-to-end latency: {latency}")
    ua, ub = d.peak_memory_utilisation_a, d.peak_memory_utilisation_b
    lines.append("peak memory utilisation: " + (f"{ua:.1%}" if ua == ub else f"{ua:.1%} -> {ub:.1%}"))
    if d.is_empty:
        lines.append("")
        lines.append("no differences: every node and partition is placed and scored alike")
        return "\n".join(lines)
    lines.append("")
    if d.moves:
        lines.append(f"{len(d.moves)} node(s) moved between partitions:")
        rows = [
            [
                m.node,
                f"{m.from_partition} on {_devices(m.from_devices)}",
                f"{m.to_partition} on {_devices(m.to_devices)}",
            ]
            for m in d.moves
        ]
        lines.append(format_table(["node", "from partition", "to partition"], rows))
    else:
        lines.append("no node moved between partitions")
    for label, names in ((f"only in {label_a}", d.nodes_only_in_a), (f"only in {label_b}", d.nodes_only_in_b)):
        if names:
            shown = ", ".join(names[:20]) + (f" ... ({len(names)} in all)" if len(names) > 20 else "")
            lines.append(f"nodes {label}: {shown}")
    if d.added:
        lines.append(f"partitions added: {', '.join(map(str, d.added))}")
    if d.removed:
        lines.append(f"partitions removed: {', '.join(map(str, d.removed))}")
    lines.append("")
    rows = []
    for p in d.partitions:
        rows.append(
            [
                str(p.id),
                p.status,
                _pair(_devices(p.devices_a), _devices(p.devices_b), None),
                _pair("-" if p.nodes_a is None else str(p.nodes_a), "-" if p.nodes_b is None else str(p.nodes_b), None),
                _cell_bytes(p.memory_bytes_a, p.memory_bytes_b),
                _cell_seconds(p.latency_s_a, p.latency_s_b),
                _cell_bytes(p.bytes_crossing_a, p.bytes_crossing_b),
            ]
        )
    lines.append(
        format_table(["partition", "status", "devices", "nodes", "memory", "latency", "bytes crossing (in+out)"], rows)
    )
    return "\n".join(lines)
