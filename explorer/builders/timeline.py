"""A plan's timeline per device (a Gantt chart): each partition from its start to its finish on
each of its devices, the critical path outlined and transfers hatched. Pure Plotly, no Streamlit."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.builders.figures import partition_label, titled
from explorer.builders.tables import schedule, time_unit
from explorer.builders.text import plain
from partitioner import Plan, format_bytes
from partitioner.draw.dag import CRITICAL_COLOUR, UNKNOWN_DEVICE_COLOUR, device_colours
from partitioner.units import format_seconds

__all__ = ["timeline_figure"]


def timeline_figure(plan: Plan) -> go.Figure:
    """A Gantt-like chart: each partition from its start to its finish on each of its devices
    (replicas appear on every device), on the longest-path schedule of the partition DAG."""
    times = schedule(plan)
    colours = device_colours(plan.devices)
    names = {d.logical_id: plain(d.name) for d in plan.devices}
    critical = set(plan.critical_path)
    fig = go.Figure()
    if not times:
        fig.add_annotation(
            text="The partitions form a cycle: no schedule exists.",
            showarrow=False,
            x=0.5,
            y=0.5,
            xref="paper",
            yref="paper",
        )
        return titled(fig, "Timeline per device", height=200)
    finish = max(f for _, f in times.values())
    unit, scale = time_unit(finish)
    rows: dict[int, list] = {}
    for p in sorted(plan.partitions, key=lambda p: p.id):
        for d in p.device_ids:
            rows.setdefault(d, []).append(p)
    device_order = sorted(rows)
    for d in device_order:
        members = rows[d]
        fig.add_bar(
            name=names.get(d, f"unknown {d}"),
            orientation="h",
            y=[names.get(d, f"unknown {d}")] * len(members),
            base=[times[p.id][0] / scale for p in members],
            x=[max(p.latency_s, 0.0) / scale for p in members],
            text=[partition_label(p.id) for p in members],
            textposition="inside",
            insidetextanchor="middle",
            textangle=0,
            marker={
                "color": colours.get(d, UNKNOWN_DEVICE_COLOUR),
                "line": {
                    "color": [CRITICAL_COLOUR if p.id in critical else "#333333" for p in members],
                    "width": [2.5 if p.id in critical else 0.5 for p in members],
                },
            },
            hovertext=[
                f"P{p.id} on {names.get(d, d)}: {format_seconds(times[p.id][0])} to "
                f"{format_seconds(times[p.id][1])}" + (" (critical path)" if p.id in critical else "")
                for p in members
            ],
            hoverinfo="text",
            showlegend=False,
        )
    # Transfers as their own bars, on an "incoming" row under each receiving device: from the
    # moment the producer finishes until the data has arrived (bytes / transfer rate).
    categories = []
    for d in device_order:
        categories.append(names.get(d, f"unknown {d}"))
        moving = [e for e in plan.edges if e.latency_s > 0 and d in _devices_of(plan, e.dst)]
        if not moving:
            continue
        row = f"{names.get(d, d)} incoming"
        categories.append(row)
        fig.add_bar(
            orientation="h",
            y=[row] * len(moving),
            base=[times[e.src][1] / scale for e in moving],
            x=[e.latency_s / scale for e in moving],
            text=[f"P{e.src} to P{e.dst}" for e in moving],
            textposition="inside",  # an arrow glyph reads as "+"
            insidetextanchor="middle",
            textangle=0,
            marker={"color": "#d9d9d9", "pattern": {"shape": "/"}, "line": {"color": "#666666", "width": 0.5}},
            hovertext=[
                f"transfer P{e.src} to P{e.dst}: {format_bytes(e.bytes)} in "
                f"{format_seconds(e.latency_s)}, {format_seconds(times[e.src][1])} to "
                f"{format_seconds(times[e.src][1] + e.latency_s)}"
                for e in moving
            ],
            hoverinfo="text",
            showlegend=False,
        )
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(
        title="device", type="category", autorange="reversed", categoryorder="array", categoryarray=categories
    )
    fig.update_xaxes(title=f"time ({unit})", range=[0, finish / scale * 1.02 if finish > 0 else 1])
    height = max(220, 60 + 40 * len(categories))
    return titled(  # the key on a line of its own: the title fits half of 1,280 px
        fig, "Timeline per device<br><sup>red outline: critical path; hatched: transfers</sup>", height=height
    )


def _devices_of(plan: Plan, pid: int) -> tuple[int, ...]:
    return next((p.device_ids for p in plan.partitions if p.id == pid), ())
