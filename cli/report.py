"""What the command line prints: plan summaries, comparison and diff tables (plain text).

The numbers come from the Plan and the library's results; this module only lays them out.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from partitioner import Device, Graph, Plan
from partitioner.accelerator.compare import ModeResult, best_mode, gaps
from partitioner.cost.model import NEAR_TIE
from partitioner.units import format_bytes, format_rate, format_seconds, format_share, format_signed

__all__ = [
    "describe_devices",
    "format_plan_summary",
    "format_table",
    "format_comparison",
    "format_cost_models",
    "format_gap",
]


def describe_devices(devices: Sequence[Device]) -> str:
    """``4 devices (4 x 16 GiB)``; groups consecutive devices of one kind and size; a calibrated
    profile says when and at what load it was measured."""
    groups: list[list[Any]] = []
    for d in devices:
        key = (d.kind, d.memory_bytes)
        if groups and groups[-1][0] == key:
            groups[-1][1] += 1
        else:
            groups.append([key, 1])
    parts = []
    for (kind, memory), count in groups:
        size = format_bytes(memory)
        parts.append(f"{count} x " + (f"{kind} ({size})" if kind != "custom" else size))
    n = len(devices)
    from partitioner.calibration.naming import calibrated_words

    measured = {d.profile.name: calibrated_words(d.profile) for d in devices if d.profile and d.profile.measured_at}
    when = "".join(f"; profile {name!r} {words}" for name, words in sorted(measured.items()))
    return f"{n} device{'s' if n != 1 else ''} ({' + '.join(parts)}){when}"


def _rate_text(plan: Plan) -> str:
    rate = plan.transfer_rate_bytes_per_s
    return "not modelled (transfers are free)" if not rate else format_rate(rate)


def format_plan_summary(plan: Plan, graph: Graph | None = None) -> str:
    """The summary ``plan`` prints: a partition table, a device table, the end-to-end figures."""
    capacity = {d.logical_id: d.memory_bytes for d in plan.devices}
    head = f"model {plan.model or '?'}"
    if graph is not None:
        head += f": {len(graph.op_indices)} op nodes, {format_bytes(graph.total_size_bytes)}"
    lines = [
        head,
        f"mode {plan.mode}; {describe_devices(plan.devices)}; transfer rate {_rate_text(plan)}",
        "",
    ]
    rows = []
    for p in plan.partitions:
        room = min((capacity.get(i, 0) for i in p.device_ids), default=0)
        share = f"{format_share(p.memory_bytes, room)} of {format_bytes(room)}" if room else "-"
        rows.append(
            [
                p.id,
                ",".join(map(str, p.device_ids)),
                len(p.node_names),
                format_bytes(p.memory_bytes),
                share,
                format_seconds(p.latency_s),
                p.bfs_level,
            ]
        )
    lines.append(
        format_table(
            ["partition", "devices", "nodes", "memory", "of capacity", "latency", "level"],
            rows,
            right=(0, 2, 3, 4, 5, 6),
        )
    )
    lines.append("")
    used = plan.device_memory_bytes()
    holders: dict[int, list[int]] = {}
    for p in plan.partitions:
        for i in p.device_ids:
            holders.setdefault(i, []).append(p.id)
    rows = []
    for d in plan.devices:
        u = used.get(d.logical_id, 0)
        rows.append(
            [
                d.logical_id,
                d.name,
                format_bytes(u),
                format_bytes(d.memory_bytes),
                format_share(u, d.memory_bytes),
                ",".join(map(str, holders.get(d.logical_id, []))) or "idle",
            ]
        )
    lines.append(
        format_table(["device", "name", "used", "capacity", "utilisation", "partitions"], rows, right=(0, 2, 3, 4))
    )
    lines.append("")
    path = " -> ".join(map(str, plan.critical_path))
    lines.append(f"end-to-end latency: {format_seconds(plan.latency_s)} (critical path: partitions {path})")
    lines.append(f"peak memory utilisation: {format_share(plan.memory_utilisation(), 1.0)}")
    lines.append(f"best possible: {format_gap(plan)}")
    if plan.provenance.single_partition:
        lines.append(
            "one partition: the whole model fits the largest device, so no mode runs "
            "(splitting would only add transfers); --force-partition shows the mode at work"
        )
    if plan.provenance.forced_cap_bytes is not None:
        lines.append(
            f"forced: the model fits one device; the mode ran with each device limited to "
            f"{format_bytes(plan.provenance.forced_cap_bytes)} so it spread the model"
        )
    return "\n".join(lines)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """Plain-text table with a dashed rule under the headers; columns in ``right`` align right."""
    body = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in body)
    return "\n".join(out)


def format_comparison(results: Sequence[ModeResult]) -> str:
    """The comparison as a table, the best mode (:func:`partitioner.accelerator.compare.best_mode`) marked
    with ``*``; failed modes
    show their error (joined onto one line) in place of the numbers."""
    best = best_mode(results)
    gap = gaps(results)
    rows = []
    for r in results:
        mark = "*" if r.mode == best else ""
        if r.ok:
            util = r.peak_memory_utilisation
            to_bound, to_best = gap.get(r.mode, (None, None))
            rows.append(
                [
                    r.mode + mark,
                    format_seconds(r.latency_s),
                    r.partitions,
                    "-" if util is None else format_share(util, 1.0),
                    "-" if to_bound is None else format_share(to_bound, 1.0),
                    "-" if to_best is None else format_signed(to_best),
                    format_seconds(r.seconds),
                    "",
                ]
            )
        else:
            message = " ".join(part.strip() for part in (r.error or "").splitlines())
            rows.append([r.mode, "-", "-", "-", "-", "-", format_seconds(r.seconds), f"failed: {message}"])
    table = format_table(
        ["mode", "latency", "partitions", "peak memory", "gap to bound", "vs optimal", "time taken", "error"],
        rows,
        right=(1, 2, 3, 4, 5, 6),
    )
    note = (
        f"\n* best: {best} (lowest latency; within {NEAR_TIE:.0%} of it, fewer partitions win)"
        if best
        else "\nno mode found a plan"
    )
    note += (
        "\ngap to bound: how far above the strongest proven lower bound (no plan is faster "
        "than it); vs optimal: against the optimal mode's plan"
    )
    return table + note


def format_cost_models(results: dict[str, Any]) -> str:
    """Each cost model's figures for the same partitions, side by side, and why they differ."""
    plans = {m: r.evaluated for m, r in results.items()}
    rows = []
    for m, p in plans.items():
        if p is None:
            rows.append([m, "-", "-", "-"])
            continue
        transfer = sum(e.bytes for e in p.edges if e.latency_s > 0)
        rows.append([m, format_seconds(p.latency_s), format_share(p.memory_utilisation(), 1.0), format_bytes(transfer)])
    table = format_table(["cost model", "latency", "peak memory", "bytes sent"], rows, right=(1, 2, 3))
    return (
        table + "\nphysical: a device runs one partition at a time; a tensor read twice is stored "
        "once; only op outputs crossing devices are sent.\ntorch: partitioner_utils' numbers: "
        "an outside input is counted for every node reading it; inputs both partitions hold "
        "count as sent."
    )


def format_gap(plan: Plan) -> str:
    """``optimal (...)`` or ``within 12.5% of the best possible (...)``: :meth:`Plan.bound_summary`."""
    return plan.bound_summary()
