"""Graphviz DOT source for the partition DAG of a plan, and rendering DOT with the ``dot`` binary.

Shared by the app (its graph viewer lays the source out with :func:`render_dot`) and the CLI
(``render`` writes SVG or PNG). The node graphs (one partition's nodes, the graph collapsed by
module) are in :mod:`partitioner.draw.nodeview` and :mod:`partitioner.draw.collapse`. Pure string building: no UI import, and nothing here
imports ``graphviz`` until :func:`render_dot` runs. Output is deterministic (partitions, edges
and devices are emitted sorted), so a plan's DOT can be diffed in review.

The partition DAG follows the reference partitioner's picture of a plan
(``torch.fx.experimental.accelerator_partitioner``: partitions with BFS levels, parents,
children and logical devices): one box per partition, ranked by BFS level, filled with the
colour of its device (a bar of device colours when replicated), edges labelled with the bytes crossing and
their transfer latency, the critical path drawn bold red and partitions on a device over its
memory outlined in orange.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from partitioner.devices import format_bytes
from partitioner.draw.dot import (
    CRITICAL_COLOUR,
    HIGHLIGHT_COLOUR,
    PALETTE,
    UNKNOWN_DEVICE_COLOUR,
    WARNING_COLOUR,
    device_colours,
    partition_capacity,
)
from partitioner.draw.dot import (
    bar_label as _replica_label,
)
from partitioner.draw.dot import (
    device_names as _device_names,
)
from partitioner.draw.dot import (
    fill as _fill,
)
from partitioner.draw.dot import (
    html_text as _html,
)
from partitioner.draw.dot import (
    percent as _percent,
)
from partitioner.draw.dot import (
    quote as _q,
)
from partitioner.draw.dot import (
    shown_name as _shown_name,
)
from partitioner.draw.nodeview import partition_to_dot
from partitioner.draw.overlay import colour_for, formatter, overlay_legend, partition_values
from partitioner.errors import PartitionError
from partitioner.plan.records import Edge, Partition, Plan
from partitioner.units import format_seconds

if TYPE_CHECKING:  # pragma: no cover
    from partitioner.graph import Graph

__all__ = [
    "PALETTE",
    "CRITICAL_COLOUR",
    "WARNING_COLOUR",
    "HIGHLIGHT_COLOUR",
    "UNKNOWN_DEVICE_COLOUR",
    "device_colours",
    "partition_capacity",
    "plan_to_dot",
    "partition_to_dot",
    "render_dot",
    "FORMATS",
]

FORMATS = ("svg", "png", "dot")

_LARGE = 150  # above this many partitions, labels and edge labels are shortened


def _partition_label(plan: Plan, p: Partition, short: bool) -> str:
    capacity = partition_capacity(plan, p)
    cap = "?" if capacity is None else format_bytes(capacity)
    memory = f"{format_bytes(p.memory_bytes)} / {cap} ({_percent(p.memory_bytes, capacity)})"
    nodes = f"{len(p.node_names)} node{'s' if len(p.node_names) != 1 else ''}"
    if short:
        return f"P{p.id} {_device_names(plan, p.device_ids)}\n{memory}\n{format_seconds(p.latency_s)}"
    return f"P{p.id} on {_device_names(plan, p.device_ids)}\n{memory}\n{format_seconds(p.latency_s)} | {nodes}"


def _default_title(plan: Plan) -> str:
    name = _shown_name(plan.model or "model")
    return (
        f"{name} | {plan.mode} | {len(plan.partitions)} partition"
        f"{'s' if len(plan.partitions) != 1 else ''} | latency {format_seconds(plan.latency_s)}"
    )


def _partition_tip(plan: Plan, p: Partition, graph: "Graph | None", overlay: str, values: Mapping[int, float]) -> str:
    """The hover text of a partition: where it runs, its memory, latency, schedule and nodes."""
    capacity = partition_capacity(plan, p)
    lines = [
        f"P{p.id} on {_device_names(plan, p.device_ids)} (BFS level {p.bfs_level})",
        f"memory {format_bytes(p.memory_bytes)} of {format_bytes(capacity) if capacity else '?'}",
        f"latency {format_seconds(p.latency_s)} (memory {format_seconds(p.memory_latency_s)}, "
        f"compute {format_seconds(p.compute_latency_s)})",
        f"runs {format_seconds(p.start_s)} to {format_seconds(p.finish_s)}",
        f"{len(p.node_names)} nodes: {', '.join(p.node_names[:6])}{' ...' if len(p.node_names) > 6 else ''}",
    ]
    if graph is not None:
        paths = sorted({graph.nodes[graph.index[n]].module_path for n in p.node_names if n in graph.index} - {""})
        if paths:
            lines.append(f"modules: {', '.join(paths[:5])}{' ...' if len(paths) > 5 else ''}")
    if values:
        lines.append(f"{overlay}: {formatter(overlay)(values[p.id])}")
    return "\n".join(lines)


def _legend(plan: Plan, colours: Mapping[int, str], over: set[int], extra: str = "") -> str:
    """One HTML-like table node: a row per device with its colour, usage and capacity (and an
    overlay's scale under them)."""
    used = plan.device_memory_bytes()
    rows = ['<TR><TD COLSPAN="2"><B>devices</B></TD></TR>']
    for d in sorted(plan.devices, key=lambda d: d.logical_id):
        u = used.get(d.logical_id, 0)
        text = f"{format_bytes(u)} / {format_bytes(d.memory_bytes)} ({_percent(u, d.memory_bytes)})"
        if d.logical_id in over:
            text += " OVER"
        name = _html(_shown_name(d.name))
        rows.append(f'<TR><TD BGCOLOR="{colours[d.logical_id]}">{name}</TD><TD>{_html(text)}</TD></TR>')
    table = '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">' + "".join(rows) + extra + "</TABLE>"
    return f"  legend [shape=plaintext, margin=0, label=<{table}>];"


def plan_to_dot(
    plan: Plan,
    graph: "Graph | None" = None,
    *,
    highlight_critical: bool = True,
    title: str | None = None,
    legend: bool = True,
    overlay: str = "device",
    highlight: Iterable[int] = (),
    scale: tuple[float, float] | None = None,
) -> str:
    """DOT source of the partition DAG of ``plan``.

    One box per partition (id, device names, memory used of the device's capacity, latency,
    node count), ``rank=same`` per BFS level (top to bottom), a fill colour per device
    (:func:`device_colours`; a replicated partition has a bar of its devices' colours), partitions on a device over
    its memory outlined in :data:`WARNING_COLOUR`, edges labelled with the bytes crossing and
    their transfer latency, the critical path in bold :data:`CRITICAL_COLOUR`. Each box has the
    DOT id ``p<id>`` and a tooltip with its details. ``overlay`` (:data:`partitioner.draw.overlay.OVERLAYS`)
    fills the boxes by that metric instead, the devices kept as a colour bar; ``highlight``:
    partition ids outlined thick (search hits); ``scale``: the overlay's (low, high), to colour
    two plans side by side alike (default: this plan's range). ``graph`` is needed only for the FLOPs overlay and
    the module paths in tooltips. O(P + E); above 150 partitions the labels are shortened so
    layout stays quick.
    """
    short = len(plan.partitions) > _LARGE
    values = partition_values(plan, overlay, graph) if overlay != "device" else {}
    low, high = scale or ((min(values.values()), max(values.values())) if values else (0.0, 0.0))
    colours = device_colours(plan.devices)
    over = set(plan.over_capacity())
    look = _Look(
        colours=colours,
        values=values,
        low=low,
        high=high,
        short=short,
        over=over,
        critical=set(plan.critical_path) if highlight_critical else set(),
        marked=set(highlight),
    )
    lines = [
        "digraph plan {",
        f"  graph [rankdir=TB, labelloc=t, fontname=Helvetica, fontsize=16, "
        f"label={_q(title if title is not None else _default_title(plan))}, nodesep=0.3, ranksep=0.45];",
        '  node [shape=box, fontname=Helvetica, fontsize=11, margin="0.12,0.06"];',
        '  edge [fontname=Helvetica, fontsize=9, color="#555555"];',
    ]
    lines += [_partition_line(plan, p, graph, overlay, look) for p in sorted(plan.partitions, key=lambda p: p.id)]
    lines += _level_lines(plan)
    critical_edges = set(zip(plan.critical_path, plan.critical_path[1:])) if highlight_critical else set()
    lines += [
        _edge_line(e, short, (e.src, e.dst) in critical_edges) for e in sorted(plan.edges, key=lambda e: (e.src, e.dst))
    ]
    if legend and plan.devices:
        lines.append(_legend(plan, colours, over, overlay_legend(overlay, low, high) if values else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class _Look:
    """How :func:`plan_to_dot` draws the boxes: the devices' colours, the overlay's values and
    range, short labels, the devices over their memory, the critical path and the search hits."""

    colours: dict[int, str]
    values: dict[int, float]
    low: float
    high: float
    short: bool
    over: set[int]
    critical: set[int]
    marked: set[int]


def _partition_line(plan: Plan, p: Partition, graph: "Graph | None", overlay: str, look: _Look) -> str:
    """One partition's box: its fill (devices, or the overlay with the devices as a bar), its
    outline (over capacity, critical, a search hit), its DOT id and tooltip."""
    style, fill = _fill(look.colours, p.device_ids)
    label = _partition_label(plan, p, look.short)
    if look.values:  # the overlay's colour for the body, the devices as a bar over it
        attrs = [
            f"label={_replica_label(label, fill.split(':'))}",
            f'fillcolor="{colour_for(look.values[p.id], look.low, look.high)}"',
            'margin="0"',
        ]
        style = "filled"
    elif style == "striped":
        # NOTE: [Replicas] One stripe per device as an HTML table, not Graphviz's "striped"
        # style, which the browser's renderer draws with an empty path and a line through
        # the label: a bar of the devices' colours over a light body holding the text.
        attrs = [f"label={_replica_label(label, fill.split(':'))}", 'fillcolor="#f7f7f7"', 'margin="0"']
        style = "filled"
    else:
        attrs = [f"label={_q(label)}", f"fillcolor={_q(fill)}"]
    styles = [style, "rounded"] if style == "filled" else [style]
    overfull = any(d in look.over for d in p.device_ids)
    if overfull:
        styles.append("dashed")
        attrs += [f'color="{WARNING_COLOUR}"', "penwidth=3"]
    elif p.id in look.critical:
        attrs += [f'color="{CRITICAL_COLOUR}"', "penwidth=2"]
    if p.id in look.marked:
        attrs += [f'color="{HIGHLIGHT_COLOUR}"', "penwidth=5"]
    tip = _partition_tip(plan, p, graph, overlay, look.values)
    if overfull:
        tip = f"P{p.id}: its device holds more than its memory\n" + tip
    attrs += [f'id="p{p.id}"', f"tooltip={_q(tip)}"]
    attrs.append(f"style={_q(','.join(styles))}")
    return f"  p{p.id} [{', '.join(attrs)}];"


def _level_lines(plan: Plan) -> list[str]:
    """``rank=same`` for each BFS level, top to bottom."""
    levels: dict[int, list[int]] = {}
    for p in plan.partitions:
        if p.bfs_level >= 0:
            levels.setdefault(p.bfs_level, []).append(p.id)
    return [f"  {{ rank=same; {' '.join(f'p{i};' for i in sorted(levels[level]))} }}" for level in sorted(levels)]


def _edge_line(e: Edge, short: bool, critical: bool) -> str:
    """One edge: the bytes crossing and their transfer time, bold when on the critical path."""
    label = format_bytes(e.bytes)
    if e.latency_s > 0 and not short:
        label += f"\n{format_seconds(e.latency_s)}"
    tip = f"P{e.src} to P{e.dst}: {format_bytes(e.bytes)}, {format_seconds(e.latency_s)} to transfer"
    attrs = [f"label={_q(label)}", f"tooltip={_q(tip)}"]
    if critical:
        attrs += [f'color="{CRITICAL_COLOUR}"', f'fontcolor="{CRITICAL_COLOUR}"', "penwidth=2.5", "style=bold"]
    return f"  p{e.src} -> p{e.dst} [{', '.join(attrs)}];"


def render_dot(dot_source: str, fmt: str = "svg") -> bytes:
    """``dot_source`` rendered as ``fmt`` (svg, png, or dot for the source itself).

    Needs Graphviz's ``dot`` binary for svg and png; raises :class:`PartitionError` naming the
    fix when it is missing or fails.
    """
    if fmt not in FORMATS:
        raise PartitionError(f"render format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    if fmt == "dot":
        return dot_source.encode()
    import graphviz

    try:
        return graphviz.Source(dot_source).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise PartitionError(
            f"rendering {fmt} needs Graphviz's `dot` program, which is not on PATH; "
            "install Graphviz: apt-get install graphviz (or brew install graphviz), "
            "or export the DOT source instead"
        ) from None
    except graphviz.CalledProcessError as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)
        raise PartitionError(
            f"Graphviz could not render the DOT source as {fmt}: {stderr.strip() or exc}; "
            "export the DOT source and check it with `dot -Tsvg`"
        ) from None
