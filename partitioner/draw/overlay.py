"""Colour overlays: what a partition or node is coloured by, and the one scale every view uses.

The partition DAG, the node graphs, the collapsed graph and the app's charts colour by the same
metric through the same scale, so a colour means the same number everywhere on a page. ``device``
is categorical (:func:`partitioner.draw.dot.device_colours`); the others are sequential, light to
dark (the light half of ColorBrewer's YlOrRd, so black labels stay readable), linear from the
smallest to the largest value shown. Pure Python: no UI import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from partitioner.devices import format_bytes
from partitioner.draw.dot import html_text
from partitioner.units import format_flops, format_seconds

if TYPE_CHECKING:  # pragma: no cover
    from partitioner.graph import Graph
    from partitioner.plan.records import Plan

__all__ = [
    "OVERLAYS",
    "SCALE",
    "plotly_scale",
    "colour_for",
    "partition_values",
    "node_values",
    "formatter",
    "legend_stops",
    "overlay_legend",
    "legend_node",
]

OVERLAYS = ("device", "memory", "latency", "flops", "bytes crossing")
SCALE: tuple[str, ...] = ("#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc6b4a")


def plotly_scale() -> list[list[float | str]]:
    """:data:`SCALE` as a Plotly colorscale (the charts' ``marker.colorscale``)."""
    last = len(SCALE) - 1
    return [[i / last, c] for i, c in enumerate(SCALE)]


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def colour_for(value: float, low: float, high: float) -> str:
    """The scale's colour for ``value`` between ``low`` and ``high`` (linear; the lightest when
    they are equal)."""
    t = 0.0 if high <= low else min(1.0, max(0.0, (value - low) / (high - low)))
    x = t * (len(SCALE) - 1)
    i = min(int(x), len(SCALE) - 2)
    a, b = _rgb(SCALE[i]), _rgb(SCALE[i + 1])
    f = x - i
    return "#" + "".join(f"{round(p + (q - p) * f):02x}" for p, q in zip(a, b))


def formatter(overlay: str) -> Callable[[float], str]:
    """How a value of ``overlay`` is written in legends and tooltips."""
    if overlay == "latency":
        return format_seconds
    if overlay == "flops":
        return lambda v: format_flops(int(v))
    return lambda v: format_bytes(int(v))


def legend_stops(low: float, high: float, overlay: str, count: int = 4) -> list[tuple[str, str]]:
    """``count`` (text, colour) pairs from ``low`` to ``high`` for a legend."""
    fmt = formatter(overlay)
    if high <= low:
        return [(fmt(low), colour_for(low, low, high))]
    return [
        (fmt(low + (high - low) * i / (count - 1)), colour_for(low + (high - low) * i / (count - 1), low, high))
        for i in range(count)
    ]


def partition_values(plan: "Plan", overlay: str, graph: "Graph | None" = None) -> dict[int, float]:
    """Partition id -> its value of ``overlay``: memory held, latency (its critical path), FLOPs
    (the sum over its nodes; needs ``graph``), or bytes crossing (into and out of it)."""
    if overlay == "memory":
        return {p.id: float(p.memory_bytes) for p in plan.partitions}
    if overlay == "latency":
        return {p.id: p.latency_s for p in plan.partitions}
    if overlay == "flops":
        index = graph.index if graph is not None else {}
        return {
            p.id: float(sum(graph.nodes[index[n]].flops for n in p.node_names if n in index))
            if graph is not None
            else 0.0
            for p in plan.partitions
        }
    if overlay == "bytes crossing":
        crossing = {p.id: 0.0 for p in plan.partitions}
        for e in plan.edges:
            crossing[e.src] = crossing.get(e.src, 0.0) + e.bytes
            crossing[e.dst] = crossing.get(e.dst, 0.0) + e.bytes
        return crossing
    raise ValueError(f"unknown overlay {overlay!r}; choose one of {', '.join(OVERLAYS)}")


def node_values(graph: "Graph", overlay: str, node_s: Sequence[float], where: Mapping[int, int]) -> list[float]:
    """Node index -> its value of ``overlay``: output plus parameter bytes, latency
    (``node_s``, the cost model's), FLOPs, or the bytes of its output that cross to another
    partition (``where``: node index -> partition; once per node, as the cost model counts)."""
    if overlay == "memory":
        return [float(b) for b in graph.total_bytes]
    if overlay == "latency":
        return [float(s) for s in node_s]
    if overlay == "flops":
        return [float(nd.flops) for nd in graph.nodes]
    if overlay == "bytes crossing":
        return [
            float(graph.output_bytes[v])
            if v in where and any(where.get(w, where[v]) != where[v] for w in graph.users[v])
            else 0.0
            for v in range(len(graph))
        ]
    raise ValueError(f"unknown overlay {overlay!r}; choose one of {', '.join(OVERLAYS)}")


def overlay_legend(overlay: str, low: float, high: float) -> str:
    """HTML-like table rows for an overlay's scale (four stops), to put in a legend table."""
    cells = "".join(f'<TD BGCOLOR="{c}">{html_text(t)}</TD>' for t, c in legend_stops(low, high, overlay))
    return (
        f'<TR><TD COLSPAN="2"><B>{html_text(overlay)}</B></TD></TR><TR><TD COLSPAN="2"><TABLE BORDER="0" '
        f'CELLSPACING="0" CELLPADDING="3"><TR>{cells}</TR></TABLE></TD></TR>'
    )


def legend_node(overlay: str, low: float, high: float) -> str:
    """A DOT node (one line) holding the overlay's scale, for the node graphs."""
    return (
        f'  scale [shape=plaintext, style="", margin=0, label=<<TABLE BORDER="0" CELLBORDER="1" '
        f'CELLSPACING="0" CELLPADDING="3">{overlay_legend(overlay, low, high)}</TABLE>>];'
    )
