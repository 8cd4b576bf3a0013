"""Graphviz DOT source for plans: the partition DAG and the node DAG inside one partition.

Shared by the app (``st.graphviz_chart`` takes the source) and the CLI (``render_dot`` turns it
into SVG or PNG with the ``dot`` binary). Pure string building: no UI import, and nothing here
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

import html

from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from .units import format_seconds
from .devices import Device, format_bytes
from .errors import PartitionError
from .plan import Partition, Plan

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Graph

__all__ = [
    "PALETTE",
    "CRITICAL_COLOUR",
    "WARNING_COLOUR",
    "UNKNOWN_DEVICE_COLOUR",
    "device_colours",
    "over_capacity_devices",
    "partition_capacity",
    "plan_to_dot",
    "partition_to_dot",
    "render_dot",
    "FORMATS",
]

# Light fills that keep black text readable; colour-blind-safe order for the first eight
# (Okabe-Ito hues lightened), then more. Device i (in logical-id order) gets PALETTE[i % 16].
PALETTE: tuple[str, ...] = (
    "#a6cee3", "#fdbf6f", "#b2df8a", "#cab2d6", "#ffff99", "#8dd3c7", "#fccde5", "#d9d9d9",
    "#80b1d3", "#bebada", "#ccebc5", "#ffed6f", "#e5c494", "#b3de69", "#fb9a99", "#bc80bd",
)
CRITICAL_COLOUR = "#d62728"  # critical-path edges and outlines
WARNING_COLOUR = "#ff7f0e"  # partitions on a device over its memory
UNKNOWN_DEVICE_COLOUR = "#ffffff"  # a device id the plan does not list (hand-edited plans)
FORMATS = ("svg", "png", "dot")

_LARGE = 150  # above this many partitions, labels and edge labels are shortened


def device_colours(devices: Iterable[Device]) -> dict[int, str]:
    """Logical id -> fill colour, stable for a device list (by sorted logical id)."""
    ids = sorted({d.logical_id for d in devices})
    return {lid: PALETTE[i % len(PALETTE)] for i, lid in enumerate(ids)}


def over_capacity_devices(plan: Plan) -> set[int]:
    """Logical ids of devices holding more than their memory (from ``plan.device_usage``)."""
    used = plan.device_memory_bytes()
    return {d.logical_id for d in plan.devices if used.get(d.logical_id, 0) > d.memory_bytes}


def partition_capacity(plan: Plan, partition: Partition) -> int | None:
    """Memory of the smallest device the partition is placed on (None if none is known)."""
    sizes = [d.memory_bytes for d in plan.devices if d.logical_id in partition.device_ids]
    return min(sizes) if sizes else None


def _q(text: str) -> str:
    """A DOT double-quoted string; ``\\n`` in ``text`` stays a DOT line break."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _percent(used: int, capacity: int | None) -> str:
    if capacity is None:
        return "?"
    if capacity == 0:
        return "inf%" if used else "0%"
    return f"{used / capacity:.0%}"


def _device_names(plan: Plan, ids: Iterable[int]) -> str:
    known = {d.logical_id: d.name for d in plan.devices}
    return ", ".join(known.get(i, f"unknown device {i}") for i in ids) or "no device"


def _partition_label(plan: Plan, p: Partition, short: bool) -> str:
    capacity = partition_capacity(plan, p)
    cap = "?" if capacity is None else format_bytes(capacity)
    memory = f"{format_bytes(p.memory_bytes)} / {cap} ({_percent(p.memory_bytes, capacity)})"
    nodes = f"{len(p.node_names)} node{'s' if len(p.node_names) != 1 else ''}"
    if short:
        return f"P{p.id} {_device_names(plan, p.device_ids)}\n{memory}\n{format_seconds(p.latency_s)}"
    return (
        f"P{p.id} on {_device_names(plan, p.device_ids)}\n"
        f"{memory}\n"
        f"{format_seconds(p.latency_s)} | {nodes}"
    )


def _fill(colours: Mapping[int, str], device_ids: Iterable[int]) -> tuple[str, str]:
    """(style, fillcolor) for a partition: striped with one stripe per device when replicated."""
    fills = [colours.get(d, UNKNOWN_DEVICE_COLOUR) for d in device_ids] or [UNKNOWN_DEVICE_COLOUR]
    if len(fills) == 1:
        return "filled", fills[0]
    return "striped", ":".join(fills)


def _replica_label(text: str, colours: Sequence[str]) -> str:
    """An HTML-like DOT label: a bar with one cell per device colour above the text."""
    body = "<BR/>".join(html.escape(line) for line in text.split("\n"))
    bar = "".join(f'<TD BGCOLOR="{c}" HEIGHT="10" WIDTH="24"></TD>' for c in colours)
    return (f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="3"><TR>{bar}</TR>'
            f'<TR><TD COLSPAN="{len(colours)}">{body}</TD></TR></TABLE>>')


def _default_title(plan: Plan) -> str:
    name = plan.model or "model"
    return (
        f"{name} | {plan.mode} | {len(plan.partitions)} partition"
        f"{'s' if len(plan.partitions) != 1 else ''} | latency {format_seconds(plan.latency_s)}"
    )


def _legend(plan: Plan, colours: Mapping[int, str], over: set[int]) -> str:
    """One HTML-like table node: a row per device with its colour, usage and capacity."""
    used = plan.device_memory_bytes()
    rows = ['<TR><TD COLSPAN="2"><B>devices</B></TD></TR>']
    for d in sorted(plan.devices, key=lambda d: d.logical_id):
        u = used.get(d.logical_id, 0)
        text = f"{format_bytes(u)} / {format_bytes(d.memory_bytes)} ({_percent(u, d.memory_bytes)})"
        if d.logical_id in over:
            text += " OVER"
        name = _html(d.name)
        rows.append(
            f'<TR><TD BGCOLOR="{colours[d.logical_id]}">{name}</TD><TD>{_html(text)}</TD></TR>'
        )
    table = '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">' + "".join(rows) + "</TABLE>"
    return f"  legend [shape=plaintext, margin=0, label=<{table}>];"


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def plan_to_dot(
    plan: Plan,
    graph: "Graph | None" = None,
    *,
    highlight_critical: bool = True,
    title: str | None = None,
    legend: bool = True,
) -> str:
    """DOT source of the partition DAG of ``plan``.

    One box per partition (id, device names, memory used of the device's capacity, latency,
    node count), ``rank=same`` per BFS level (top to bottom), a fill colour per device
    (:func:`device_colours`; a replicated partition has a bar of its devices' colours), partitions on a device over
    its memory outlined in :data:`WARNING_COLOUR`, edges labelled with the bytes crossing and
    their transfer latency, the critical path in bold :data:`CRITICAL_COLOUR`. ``graph`` is
    accepted for symmetry with :func:`partition_to_dot` and is not needed. O(P + E); above 150
    partitions the labels are shortened so layout stays quick.
    """
    del graph  # the plan holds everything drawn here
    short = len(plan.partitions) > _LARGE
    colours = device_colours(plan.devices)
    over = over_capacity_devices(plan)
    critical_nodes = set(plan.critical_path) if highlight_critical else set()
    critical_edges = (
        set(zip(plan.critical_path, plan.critical_path[1:])) if highlight_critical else set()
    )
    lines = [
        "digraph plan {",
        f"  graph [rankdir=TB, labelloc=t, fontname=Helvetica, fontsize=16, "
        f"label={_q(title if title is not None else _default_title(plan))}, nodesep=0.3, ranksep=0.45];",
        '  node [shape=box, fontname=Helvetica, fontsize=11, margin="0.12,0.06"];',
        "  edge [fontname=Helvetica, fontsize=9, color=\"#555555\"];",
    ]
    for p in sorted(plan.partitions, key=lambda p: p.id):
        style, fill = _fill(colours, p.device_ids)
        label = _partition_label(plan, p, short)
        if style == "striped":
            # NOTE: [Replicas] One stripe per device as an HTML table, not Graphviz's "striped"
            # style, which the browser's renderer draws with an empty path and a line through
            # the label: a bar of the devices' colours over a light body holding the text.
            attrs = [f"label={_replica_label(label, fill.split(':'))}", 'fillcolor="#f7f7f7"',
                     'margin="0"']
            style = "filled"
        else:
            attrs = [f"label={_q(label)}", f"fillcolor={_q(fill)}"]
        styles = [style, "rounded"] if style == "filled" else [style]
        if any(d in over for d in p.device_ids):
            styles.append("dashed")
            attrs += [f'color="{WARNING_COLOUR}"', "penwidth=3"]
            attrs.append(f"tooltip={_q(f'P{p.id}: its device holds more than its memory')}")
        elif p.id in critical_nodes:
            attrs += [f'color="{CRITICAL_COLOUR}"', "penwidth=2"]
        attrs.append(f"style={_q(','.join(styles))}")
        lines.append(f"  p{p.id} [{', '.join(attrs)}];")
    levels: dict[int, list[int]] = {}
    for p in plan.partitions:
        if p.bfs_level >= 0:
            levels.setdefault(p.bfs_level, []).append(p.id)
    for level in sorted(levels):
        members = " ".join(f"p{i};" for i in sorted(levels[level]))
        lines.append(f"  {{ rank=same; {members} }}")
    for e in sorted(plan.edges, key=lambda e: (e.src, e.dst)):
        label = format_bytes(e.bytes)
        if e.latency_s > 0 and not short:
            label += f"\n{format_seconds(e.latency_s)}"
        attrs = [f"label={_q(label)}"]
        if (e.src, e.dst) in critical_edges:
            attrs += [f'color="{CRITICAL_COLOUR}"', f'fontcolor="{CRITICAL_COLOUR}"', "penwidth=2.5",
                      "style=bold"]
        lines.append(f"  p{e.src} -> p{e.dst} [{', '.join(attrs)}];")
    if legend and plan.devices:
        lines.append(_legend(plan, colours, over))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _shape(shape: tuple[int, ...] | None, dtype: str | None) -> str:
    if shape is None:
        return dtype or ""
    text = "(" + ", ".join(str(s) for s in shape) + ")"
    return f"{text} {dtype}" if dtype else text


def _flops(n: int) -> str:
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} FLOP"


def partition_to_dot(plan: Plan, graph: "Graph", partition_id: int, *, max_nodes: int = 600) -> str:
    """DOT source of the node DAG inside partition ``partition_id``.

    Nodes are labelled with name, op and target, output shape and dtype, and bytes (output plus
    parameters); an input read from another partition or from the model's inputs is a dashed
    stub naming where it comes from; outputs read by other partitions point to a dashed stub
    per consuming partition. Names the graph does not know (a plan made for another model) are
    listed in a note. At most ``max_nodes`` nodes are drawn (the rest are counted in the
    title). O(nodes + their edges).
    """
    by_id = {p.id: p for p in plan.partitions}
    if partition_id not in by_id:
        raise PartitionError(
            f"plan has no partition {partition_id}; choose one of {sorted(by_id) or 'none'}"
        )
    p = by_id[partition_id]
    where = plan.node_to_partition()
    known = [n for n in p.node_names if n in graph.index]
    unknown = [n for n in p.node_names if n not in graph.index]
    shown = known[:max_nodes]
    inside = {graph.index[n] for n in shown}
    colours = device_colours(plan.devices)
    _, fill = _fill(colours, p.device_ids)
    fill = fill.split(":")[0]
    title = f"P{p.id} on {_device_names(plan, p.device_ids)}: {len(p.node_names)} nodes"
    if len(known) > len(shown):
        title += f" (first {len(shown)} drawn)"
    lines = [
        "digraph partition {",
        f"  graph [rankdir=TB, labelloc=t, fontname=Helvetica, fontsize=14, label={_q(title)}];",
        f'  node [shape=box, style="rounded,filled", fillcolor="{fill}", fontname=Helvetica, fontsize=10];',
        "  edge [fontname=Helvetica, fontsize=8];",
    ]
    stubs_in: dict[int, str] = {}
    stubs_out: dict[int, None] = {}
    edges: list[str] = []
    for v in sorted(inside):
        nd = graph.nodes[v]
        parts = [nd.name, f"{nd.op}: {nd.target}"]
        shape = _shape(nd.shape, nd.dtype)
        if shape:
            parts.append(shape)
        size = format_bytes(nd.output_bytes)
        if nd.param_bytes:
            size += f" + params {format_bytes(nd.param_bytes)}"
        if nd.flops:
            size += f" | {_flops(nd.flops)}"
        parts.append(size)
        lines.append(f"  n{v} [label={_q(chr(10).join(parts))}];")
        for u in graph.preds[v]:
            if u in inside:
                edges.append(f"  n{u} -> n{v};")
                continue
            src = graph.nodes[u]
            if src.name in where:
                origin = f"from P{where[src.name]}"
            elif src.op == "placeholder":
                origin = "model input"
            elif src.op == "get_attr":
                origin = "attribute"
            elif src.name in p.node_names:
                origin = "this partition (not drawn)"
            else:
                origin = "no partition"
            stubs_in[u] = f"{src.name}\n{origin}\n{format_bytes(src.output_bytes)}"
            edges.append(f"  in{u} -> n{v} [style=dashed];")
        for w in graph.users[v]:
            if w in inside:
                continue
            dst = graph.nodes[w]
            if dst.name in where and where[dst.name] != p.id:
                q = where[dst.name]
                stubs_out[q] = None
                edges.append(f"  n{v} -> out{q} [style=dashed];")
            elif dst.op == "output":
                stubs_out[-1] = None
                edges.append(f"  n{v} -> out_model [style=dashed];")
    for u in sorted(stubs_in):
        lines.append(
            f'  in{u} [label={_q(stubs_in[u])}, style="dashed", fillcolor=white, fontcolor="#555555"];'
        )
    for q in sorted(stubs_out):
        if q < 0:
            lines.append('  out_model [label="model output", style="dashed", fontcolor="#555555"];')
        else:
            target = by_id.get(q)
            devices = _device_names(plan, target.device_ids) if target else "?"
            label = _q(f"to P{q}" + "\n" + devices)
            lines.append(f'  out{q} [label={label}, style="dashed", fontcolor="#555555"];')
    lines.extend(sorted(set(edges)))
    if unknown:
        shown_unknown = ", ".join(unknown[:8]) + (" ..." if len(unknown) > 8 else "")
        note = f"{len(unknown)} node(s) not in this model: {shown_unknown}"
        lines.append(f'  unknown [shape=note, label={_q(note)}, fillcolor="{WARNING_COLOUR}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


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

