"""Pure Plotly builders over a Plan: memory against capacity, latency parts, a device timeline,
and a comparison of modes.

Colours come from :func:`partitioner.draw.dag.device_colours`, so a device has the same colour in
the DAG and in every chart. Each builder is O(P + E) and imports no Streamlit.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.builders.tables import byte_unit, incoming_transfer_s, time_unit
from explorer.builders.text import plain
from partitioner import Graph, Plan, format_bytes
from partitioner.accelerator.compare import ModeResult
from partitioner.draw.dag import (
    CRITICAL_COLOUR,
    UNKNOWN_DEVICE_COLOUR,
    WARNING_COLOUR,
    device_colours,
    partition_capacity,
)
from partitioner.draw.overlay import formatter, partition_values, plotly_scale
from partitioner.plan.records import Partition
from partitioner.units import format_seconds

__all__ = [
    "memory_figure",
    "device_memory_figure",
    "latency_figure",
    "comparison_figure",
    "COMPUTE_COLOUR",
    "MEMORY_COLOUR",
    "TRANSFER_COLOUR",
    "round_ticks",
    "dollars",
    "titled",
    "partition_label",
]

COMPUTE_COLOUR = "#4c78a8"
MEMORY_COLOUR = "#72b7b2"
TRANSFER_COLOUR = "#b279a2"
_CAPACITY_COLOUR = "#333333"


def titled(fig: go.Figure, title: str, height: int = 360) -> go.Figure:
    """``fig`` with the house layout: ``title`` left-aligned, ``height`` pixels, narrow margins."""
    fig.update_layout(
        title={"text": title, "x": 0, "xanchor": "left"},
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "yanchor": "top", "y": -0.18, "xanchor": "left", "x": 0},
        bargap=0.25,
    )
    return fig


def partition_label(pid: int) -> str:
    """A partition's name on an axis or a bar ("P3")."""
    return f"P{pid}"


def memory_figure(plan: Plan, overlay: str = "device", graph: Graph | None = None) -> go.Figure:
    """Per-partition memory (a bar per partition, in its device's colour) with the capacity of
    its device as a step line; partitions on a device over its memory are orange. With another
    ``overlay`` the bars take that metric's colour on the graph views' scale (same colours)."""
    parts = sorted(plan.partitions, key=lambda p: p.id)
    names = {d.logical_id: plain(d.name) for d in plan.devices}
    capacities = [partition_capacity(plan, p) for p in parts]
    unit, scale = byte_unit(max([p.memory_bytes for p in parts] + [c or 0 for c in capacities] + [1]))
    fig = go.Figure()
    if overlay != "device":
        _overlay_bars(fig, plan, parts, overlay, graph, scale)
    else:
        _device_bars(fig, plan, parts, names, capacities, scale)
    fig.add_scatter(
        name="device capacity",
        x=[partition_label(p.id) for p in parts],
        y=[(c or 0) / scale for c in capacities],
        mode="lines+markers",
        line={"color": _CAPACITY_COLOUR, "dash": "dash", "shape": "hvh"},
        marker={"symbol": "line-ew-open", "size": 14, "color": _CAPACITY_COLOUR},
        hovertext=[f"capacity {format_bytes(c or 0)}" for c in capacities],
        hoverinfo="text",
    )
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=[partition_label(p.id) for p in parts])
    fig.update_yaxes(title=f"memory ({unit})", rangemode="tozero")
    title = (
        "Memory per partition against its device's capacity"
        if overlay == "device"
        else f"Memory per partition, coloured by {overlay}"
    )
    return titled(fig, title)


def _device_bars(
    fig: go.Figure,
    plan: Plan,
    parts: Sequence[Partition],
    names: dict[int, str],
    capacities: Sequence[int | None],
    scale: float,
) -> None:
    """A bar trace per device (its colour; over capacity in orange), so the legend names devices."""
    colours = device_colours(plan.devices)
    over = set(plan.over_capacity())
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(parts):
        if any(d in over for d in p.device_ids):
            key = "over capacity"
        elif p.device_ids:
            key = names.get(p.device_ids[0], f"unknown device {p.device_ids[0]}")
            if len(p.device_ids) > 1:
                key += f" +{len(p.device_ids) - 1} replicas"
        else:
            key = "no device"
        groups.setdefault(key, []).append(i)
    for key in sorted(groups, key=lambda k: (k == "over capacity", groups[k][0])):
        members = groups[key]
        first = parts[members[0]]
        colour = (
            WARNING_COLOUR
            if key == "over capacity"
            else colours.get(first.device_ids[0], UNKNOWN_DEVICE_COLOUR)
            if first.device_ids
            else UNKNOWN_DEVICE_COLOUR
        )
        fig.add_bar(
            name=key,
            x=[partition_label(parts[i].id) for i in members],
            y=[parts[i].memory_bytes / scale for i in members],
            marker={"color": colour, "line": {"color": "#333333", "width": 0.5}},
            hovertext=[
                f"P{parts[i].id} on {', '.join(names.get(d, str(d)) for d in parts[i].device_ids)}: "
                f"{format_bytes(parts[i].memory_bytes)} of {format_bytes(capacities[i] or 0)}"
                for i in members
            ],
            hoverinfo="text",
        )


def colour_range(values: Sequence[float]) -> tuple[float, float]:
    """The (low, high) an overlay's colours span: from 0 to the largest value for the overlays that
    count something (memory, latency, FLOPs, bytes), so two partitions 0.007 % apart get nearly the
    same colour instead of the scale's two ends; (0, 1) for no values."""
    if not values:
        return 0.0, 1.0
    low, high = min(0.0, min(values)), max(values)
    return low, high if high > low else low + 1.0


def colourbar(overlay: str, low: float, high: float, ticks: int = 5) -> dict[str, Any]:
    """A Plotly colourbar for ``overlay`` whose tick labels are in the overlay's units (GiB, ms,
    GFLOP), never Plotly's SI suffixes (71.68B read as billions)."""
    fmt = formatter(overlay)
    values = [low + (high - low) * i / (ticks - 1) for i in range(ticks)]
    return {
        "title": {"text": overlay},
        "thickness": 12,
        "tickmode": "array",
        "tickvals": values,
        "ticktext": [fmt(v) for v in values],
    }


def _overlay_bars(
    fig: go.Figure, plan: Plan, parts: Sequence[Partition], overlay: str, graph: Graph | None, scale: float
) -> None:
    """One bar trace coloured by ``overlay`` on :func:`partitioner.draw.overlay.plotly_scale`."""
    values = partition_values(plan, overlay, graph)
    low, high = colour_range(list(values.values()))
    fmt = formatter(overlay)
    fig.add_bar(
        name=f"coloured by {overlay}",
        x=[partition_label(p.id) for p in parts],
        y=[p.memory_bytes / scale for p in parts],
        marker={
            "color": [values[p.id] for p in parts],
            "colorscale": plotly_scale(),
            "cmin": low,
            "cmax": high,
            "line": {"color": "#333333", "width": 0.5},
            "colorbar": colourbar(overlay, low, high),
        },
        hovertext=[f"P{p.id}: {format_bytes(p.memory_bytes)}, {overlay} {fmt(values[p.id])}" for p in parts],
        hoverinfo="text",
    )


def device_memory_figure(plan: Plan) -> go.Figure:
    """Memory each device holds (shared inputs counted once) against its capacity."""
    devices = sorted(plan.devices, key=lambda d: d.logical_id)
    used = plan.device_memory_bytes()
    colours = device_colours(plan.devices)
    over = set(plan.over_capacity())
    unit, scale = byte_unit(max([d.memory_bytes for d in devices] + list(used.values()) + [1]))
    x = [plain(d.name) for d in devices]
    fig = go.Figure()
    fig.add_bar(
        name="used",
        x=x,
        y=[used.get(d.logical_id, 0) / scale for d in devices],
        marker={
            "color": [WARNING_COLOUR if d.logical_id in over else colours[d.logical_id] for d in devices],
            "line": {"color": "#333333", "width": 0.5},
        },
        hovertext=[
            f"{plain(d.name)}: {format_bytes(used.get(d.logical_id, 0))} of {format_bytes(d.memory_bytes)}"
            + (" (over capacity)" if d.logical_id in over else "")
            for d in devices
        ],
        hoverinfo="text",
    )
    fig.add_scatter(
        name="capacity",
        x=x,
        y=[d.memory_bytes / scale for d in devices],
        mode="markers",
        marker={"symbol": "line-ew-open", "size": 30, "color": _CAPACITY_COLOUR, "line": {"width": 3}},
        hovertext=[f"capacity {format_bytes(d.memory_bytes)}" for d in devices],
        hoverinfo="text",
    )
    fig.update_xaxes(type="category")
    fig.update_yaxes(title=f"memory ({unit})", rangemode="tozero")
    return titled(fig, "Memory per device (shared inputs counted once)", height=300)


def latency_figure(plan: Plan) -> go.Figure:
    """Per partition: compute and memory time along its critical path, its slowest incoming
    transfer, its latency (a marker: each node costs the larger of its memory and compute
    time) and a star on the partitions of the end-to-end critical path."""
    parts = sorted(plan.partitions, key=lambda p: p.id)
    comm = incoming_transfer_s(plan)
    critical = set(plan.critical_path)
    largest = max([max(p.compute_latency_s, p.memory_latency_s, p.latency_s, comm[p.id]) for p in parts] + [0.0])
    unit, scale = time_unit(largest)
    x = [partition_label(p.id) for p in parts]
    fig = go.Figure()
    for name, values, colour in (
        ("compute", [p.compute_latency_s for p in parts], COMPUTE_COLOUR),
        ("memory", [p.memory_latency_s for p in parts], MEMORY_COLOUR),
        ("communication in", [comm[p.id] for p in parts], TRANSFER_COLOUR),
    ):
        fig.add_bar(
            name=name,
            x=x,
            y=[v / scale for v in values],
            marker={"color": colour},
            hovertext=[f"P{p.id} {name}: {format_seconds(v)}" for p, v in zip(parts, values)],
            hoverinfo="text",
        )
    fig.add_scatter(
        name="partition latency",
        x=x,
        y=[p.latency_s / scale for p in parts],
        mode="markers",
        marker={"symbol": "diamond", "size": 10, "color": "#222222"},
        hovertext=[f"P{p.id} latency {format_seconds(p.latency_s)}" for p in parts],
        hoverinfo="text",
    )
    crit = [p for p in parts if p.id in critical]
    fig.add_scatter(
        name="critical path",
        x=[partition_label(p.id) for p in crit],
        y=[max(p.latency_s, p.compute_latency_s, p.memory_latency_s, comm[p.id]) / scale * 1.08 for p in crit],
        mode="markers",
        marker={"symbol": "star", "size": 13, "color": CRITICAL_COLOUR},
        hovertext=[f"P{p.id} is on the critical path" for p in crit],
        hoverinfo="text",
    )
    fig.update_layout(barmode="group")
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=x)
    fig.update_yaxes(title=f"time ({unit})", rangemode="tozero")
    return titled(fig, f"Latency per partition (end to end {format_seconds(plan.latency_s)})")


def comparison_figure(results: Sequence[ModeResult]) -> go.Figure:
    """Latency, partition count, peak memory utilisation and time taken, one panel each; a
    failed mode has no bar and says 'failed' in its place."""
    modes = [r.mode for r in results]
    ok = [r for r in results if r.ok]
    largest = max([r.latency_s or 0.0 for r in ok] + [0.0])
    unit, scale = time_unit(largest)
    took_unit, took_scale = time_unit(max([r.seconds for r in results] + [0.0]))
    fig = make_subplots(
        rows=1,
        cols=4,
        subplot_titles=(
            f"latency ({unit})",
            "partitions",
            "peak memory utilisation (%)",
            f"time to partition ({took_unit})",
        ),
    )
    panels: tuple[list[float | None], ...] = (
        [None if r.latency_s is None else r.latency_s / scale for r in results],
        [r.partitions for r in results],
        [None if r.peak_memory_utilisation is None else 100 * r.peak_memory_utilisation for r in results],
        [r.seconds / took_scale for r in results],
    )
    colours = ["#9e9e9e" if not r.ok else COMPUTE_COLOUR for r in results]
    for col, values in enumerate(panels, start=1):
        fig.add_bar(x=modes, y=values, marker={"color": colours}, showlegend=False, row=1, col=col)
        for r, v in zip(results, values):
            if v is None:
                fig.add_annotation(
                    x=r.mode,
                    y=0,
                    text="failed",
                    showarrow=False,
                    yanchor="bottom",
                    font={"color": WARNING_COLOUR},
                    row=1,
                    col=col,
                )
    fig.update_yaxes(rangemode="tozero")
    fig.update_annotations(font_size=13)
    titled(fig, "", height=320)
    fig.update_layout(margin={"t": 30})
    return fig


def round_ticks(high: float, most: int = 6) -> list[float]:
    """Ticks from 0 past ``high`` at a round step (1, 2 or 5 x 10^k), at most ``most`` of them:
    0, 0.05, 0.1, 0.15 or 0, 500, 1,000, ..."""
    if not math.isfinite(high) or high <= 0:
        return [0.0, 1.0]
    raw = high / (most - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    count = math.ceil(high / step - 1e-9)
    return [round(i * step, 12) for i in range(count + 1)]


def dollars(value: float) -> str:
    """ "$0.05", "$1.5", "$1,280": a tick's dollars as people write them."""
    return "$" + (f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.4g}")
