"""DOT of node graphs: the nodes inside one partition, each with its details on hover.

Built from the same vocabulary as the partition DAG (:mod:`partitioner.draw.dot`); pure strings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

from partitioner.devices import Device, format_bytes
from partitioner.draw.dot import (
    CRITICAL_COLOUR,
    HIGHLIGHT_COLOUR,
    WARNING_COLOUR,
    device_colours,
)
from partitioner.draw.dot import (
    device_names as _device_names,
)
from partitioner.draw.dot import (
    fill as _fill,
)
from partitioner.draw.dot import quote as _q
from partitioner.draw.overlay import colour_for, legend_node, node_values
from partitioner.errors import PartitionError
from partitioner.plan.records import Partition, Plan
from partitioner.units import format_flops, format_seconds

if TYPE_CHECKING:  # pragma: no cover
    from partitioner.accelerator.steps import DecisionTrace
    from partitioner.graph import Graph, Node

__all__ = ["partition_to_dot", "node_tip", "step_to_dot", "step_boxes_to_dot", "touched_nodes", "block_of"]


def _shape(shape: tuple[int, ...] | None, dtype: str | None) -> str:
    if shape is None:
        return dtype or ""
    text = "(" + ", ".join(str(s) for s in shape) + ")"
    return f"{text} {dtype}" if dtype else text


def node_tip(graph: "Graph", v: int, node_s: Sequence[float] | None = None, placement: str = "") -> str:
    """The hover text of node ``v``: module path, op, shape and dtype, bytes, FLOPs, latency
    (``node_s``: the cost model's per-node seconds) and ``placement`` (its partition and device)."""
    nd = graph.nodes[v]
    lines = [nd.name, f"module: {nd.module_path or '(top level)'}", f"{nd.op}: {nd.target}"]
    shape = _shape(nd.shape, nd.dtype)
    if shape:
        lines.append(f"output: {shape}")
    lines.append(f"output {format_bytes(nd.output_bytes)}, parameters {format_bytes(nd.param_bytes)}")
    if nd.flops:
        lines.append(format_flops(nd.flops))
    if node_s is not None:
        lines.append(f"latency {format_seconds(node_s[v])}")
    if placement:
        lines.append(placement)
    return "\n".join(lines)


def partition_to_dot(
    plan: Plan,
    graph: "Graph",
    partition_id: int,
    *,
    max_nodes: int = 600,
    overlay: str = "device",
    node_s: Sequence[float] | None = None,
    highlight: Iterable[str] = (),
) -> str:
    """DOT source of the node DAG inside partition ``partition_id``.

    Nodes are labelled with name, op and target, output shape and dtype, and bytes (output plus
    parameters); an input read from another partition or from the model's inputs is a dashed
    stub naming where it comes from; outputs read by other partitions point to a dashed stub
    per consuming partition. Names the graph does not know (a plan made for another model) are
    listed in a note. At most ``max_nodes`` nodes are drawn (the rest are counted in the
    title). Each node has the DOT id ``n<index>`` and a tooltip (:func:`node_tip`; ``node_s`` adds
    its latency); ``overlay`` colours the nodes by that metric, ``highlight`` outlines the named
    nodes. O(nodes + their edges).
    """
    by_id = {p.id: p for p in plan.partitions}
    if partition_id not in by_id:
        raise PartitionError(f"plan has no partition {partition_id}; choose one of {sorted(by_id) or 'none'}")
    p = by_id[partition_id]
    where = plan.node_to_partition()
    known = [n for n in p.node_names if n in graph.index]
    unknown = [n for n in p.node_names if n not in graph.index]
    shown = known[:max_nodes]
    inside = {graph.index[n] for n in shown}
    placed = f"P{p.id} on {_device_names(plan, p.device_ids)}"
    lines = _partition_header(plan, p, len(known), len(shown))
    marked = set(highlight)
    values: list[float] = []
    low = high = 0.0
    if overlay != "device":
        part_of = {graph.index[n]: q for n, q in where.items() if n in graph.index}
        values = node_values(graph, overlay, node_s or [0.0] * len(graph), part_of)
        low, high = min((values[v] for v in inside), default=0.0), max((values[v] for v in inside), default=0.0)
    links = _Links(graph, inside, where, p)
    for v in sorted(inside):
        attrs = [
            f"label={_q(_node_label(graph.nodes[v]))}",
            f'id="n{v}"',
            f"tooltip={_q(node_tip(graph, v, node_s, placed))}",
        ]
        if values:
            attrs.append(f'fillcolor="{colour_for(values[v], low, high)}"')
        if graph.nodes[v].name in marked:
            attrs += [f'color="{HIGHLIGHT_COLOUR}"', "penwidth=4"]
        lines.append(f"  n{v} [{', '.join(attrs)}];")
        links.add(v)
    lines += links.stub_lines(plan, by_id)
    lines.extend(sorted(set(links.edges)))
    if unknown:
        shown_unknown = ", ".join(unknown[:8]) + (" ..." if len(unknown) > 8 else "")
        note = f"{len(unknown)} node(s) not in this model: {shown_unknown}"
        lines.append(f'  unknown [shape=note, label={_q(note)}, fillcolor="{WARNING_COLOUR}"];')
    if values:
        lines.append(legend_node(overlay, low, high))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _partition_header(plan: Plan, p: Partition, known: int, shown: int) -> list[str]:
    """The DOT lines opening one partition's drawing: its title and the nodes' default fill."""
    _, fill = _fill(device_colours(plan.devices), p.device_ids)
    fill = fill.split(":")[0]
    count = len(p.node_names)
    title = f"P{p.id} on {_device_names(plan, p.device_ids)}: {count} node{'' if count == 1 else 's'}"
    if known > shown:
        title += f" (first {shown} drawn)"
    return [
        "digraph partition {",
        f"  graph [rankdir=TB, labelloc=t, fontname=Helvetica, fontsize=14, label={_q(title)}];",
        f'  node [shape=box, style="rounded,filled", fillcolor="{fill}", fontname=Helvetica, fontsize=10];',
        "  edge [fontname=Helvetica, fontsize=8];",
    ]


def _node_label(nd: "Node") -> str:
    """Name, op and target, shape and dtype, bytes (output, parameters) and FLOPs, one a line."""
    parts = [nd.name, f"{nd.op}: {nd.target}"]
    shape = _shape(nd.shape, nd.dtype)
    if shape:
        parts.append(shape)
    size = format_bytes(nd.output_bytes)
    if nd.param_bytes:
        size += f" + params {format_bytes(nd.param_bytes)}"
    if nd.flops:
        size += f" | {format_flops(nd.flops)}"
    parts.append(size)
    return "\n".join(parts)


class _Links:
    """The edges of a partition's drawing: between drawn nodes, and dashed to stubs for what
    comes from outside (another partition, the model's inputs) and what leaves it."""

    def __init__(self, graph: "Graph", inside: set[int], where: dict[str, int], p: Partition) -> None:
        self.graph, self.inside, self.where, self.p = graph, inside, where, p
        self.stubs_in: dict[int, str] = {}
        self.stubs_out: dict[int, None] = {}  # consuming partition ids; -1: the model's output
        self.edges: list[str] = []

    def _origin(self, u: int) -> str:
        src = self.graph.nodes[u]
        if src.name in self.where:
            return f"from P{self.where[src.name]}"
        if src.op == "placeholder":
            return "model input"
        if src.op == "get_attr":
            return "attribute"
        if src.name in self.p.node_names:
            return "this partition (not drawn)"
        return "no partition"

    def add(self, v: int) -> None:
        """The edges into and out of drawn node ``v``."""
        graph, inside, where = self.graph, self.inside, self.where
        for u in graph.preds[v]:
            if u in inside:
                self.edges.append(f"  n{u} -> n{v};")
                continue
            src = graph.nodes[u]
            self.stubs_in[u] = f"{src.name}\n{self._origin(u)}\n{format_bytes(src.output_bytes)}"
            self.edges.append(f"  in{u} -> n{v} [style=dashed];")
        for w in graph.users[v]:
            if w in inside:
                continue
            dst = graph.nodes[w]
            if dst.name in where and where[dst.name] != self.p.id:
                q = where[dst.name]
                self.stubs_out[q] = None
                self.edges.append(f"  n{v} -> out{q} [style=dashed];")
            elif dst.op == "output":
                self.stubs_out[-1] = None
                self.edges.append(f"  n{v} -> out_model [style=dashed];")

    def stub_lines(self, plan: Plan, by_id: dict[int, Partition]) -> list[str]:
        """The dashed stub nodes, sources first, in id order."""
        lines = [
            f'  in{u} [label={_q(self.stubs_in[u])}, style="dashed", fillcolor=white, fontcolor="#555555"];'
            for u in sorted(self.stubs_in)
        ]
        for q in sorted(self.stubs_out):
            if q < 0:
                lines.append('  out_model [label="model output", style="dashed", fontcolor="#555555"];')
            else:
                target = by_id.get(q)
                devices = _device_names(plan, target.device_ids) if target else "?"
                label = _q(f"to P{q}" + "\n" + devices)
                lines.append(f'  out{q} [label={label}, style="dashed", fontcolor="#555555"];')
        return lines


def step_to_dot(trace: "DecisionTrace", index: int, devices: Sequence[Device]) -> str:
    """DOT of the model's nodes after decision ``index``: each node in its partition's device
    colour (white while not placed) and labelled with the partition; the decision's nodes
    outlined (blue when taken, dashed red when only tried)."""
    graph = trace.graph
    frame = trace.frames[index]
    decision = trace.decisions[index]
    colours = device_colours(devices)
    touched = touched_nodes(trace, index)
    lines = [
        "digraph steps {",
        "  graph [rankdir=TB, nodesep=0.2, ranksep=0.3];",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10, margin="0.06,0.03"];',
        '  edge [color="#888888", arrowsize=0.6];',
    ]
    for v in graph.op_indices:
        p = frame.part[v]
        on = frame.devices_of.get(p, ()) if p >= 0 else ()
        fill = colours.get(on[0], "#ffffff") if on else "#ffffff"
        where = f"P{p}" if p >= 0 else "not placed"
        attrs = [
            f"label={_q(graph.nodes[v].name + chr(10) + where)}",
            f'fillcolor="{fill}"',
            f'id="n{v}"',
            f"tooltip={_q(node_tip(graph, v, placement=where))}",
        ]
        if v in touched:
            attrs += (
                [f'color="{HIGHLIGHT_COLOUR}"', "penwidth=4"]
                if decision.accepted
                else [f'color="{CRITICAL_COLOUR}"', "penwidth=3", 'style="rounded,filled,dashed"']
            )
        lines.append(f"  n{v} [{', '.join(attrs)}];")
    ops = set(graph.op_indices)
    for v in graph.op_indices:
        for u in graph.preds[v]:
            if u in ops:
                lines.append(f"  n{u} -> n{v};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def touched_nodes(trace: "DecisionTrace", index: int) -> list[int]:
    """The nodes decision ``index`` moves, or whose partition it places on a device, in order."""
    decision, frame = trace.decisions[index], trace.frames[index]
    touched = dict.fromkeys(v for v, _ in decision.moves)
    for p, _ in decision.devices:
        touched.update(dict.fromkeys(v for v, q in enumerate(frame.part) if q == p))
    return list(touched)


def block_of(graph: "Graph", v: int) -> str:
    """The numbered block node ``v`` runs in (``model.layers.5`` of ``model.layers.5.mlp``), or ""."""
    parts = graph.nodes[v].module_path.split(".") if graph.nodes[v].module_path else []
    cut = next((i + 1 for i, c in enumerate(parts) if c.isdigit()), 0)
    return ".".join(parts[:cut])


def step_boxes_to_dot(
    trace: "DecisionTrace", index: int, devices: Sequence[Device], expanded: Iterable[str] = ()
) -> tuple[str, str | None]:
    """:func:`step_to_dot` on the model folded by module (for graphs too large to draw node by
    node): each box with a bar of the devices its nodes are on after decision ``index`` (white:
    not placed) and the partitions they are in; the boxes holding the decision's nodes outlined.
    Returns the DOT and the DOT id of the first outlined box (where the view should go). O(N + E)."""
    from partitioner.draw.collapse import collapse
    from partitioner.draw.dot import html_text

    graph = trace.graph
    frame, decision = trace.frames[index], trace.decisions[index]
    colours = device_colours(devices)
    touched = touched_nodes(trace, index)
    cg = collapse(graph, expanded=set(expanded))
    marked = {cg.box_of[v] for v in touched if cg.box_of[v] >= 0}
    lines = [
        "digraph steps {",
        "  graph [rankdir=TB, nodesep=0.25, ranksep=0.3];",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10, margin="0.08,0.04"];',
        '  edge [color="#888888", arrowsize=0.6];',
    ]
    for b, g in enumerate(cg.groups):
        on: dict[str, int] = {}
        parts: dict[int, None] = {}
        for v in g.members:
            p = frame.part[v]
            ds = frame.devices_of.get(p, ()) if p >= 0 else ()
            colour = colours.get(ds[0], "#ffffff") if ds else "#ffffff"
            on[colour] = on.get(colour, 0) + 1
            if p >= 0:
                parts[p] = None
        bar = "".join(
            f'<TD BGCOLOR="{c}" HEIGHT="8" WIDTH="{max(4, round(60 * n / len(g.members)))}"></TD>'
            for c, n in on.items()
        )
        where = ", ".join(f"P{p}" for p in sorted(parts)[:4]) + (" ..." if len(parts) > 4 else "") or "not placed"
        body = "<BR/>".join(
            html_text(t) for t in (g.label, f"{len(g.members)} node{'s' if len(g.members) != 1 else ''} in {where}")
        )
        label = (
            '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="2">'
            f'<TR>{bar}</TR><TR><TD COLSPAN="{len(on)}">{body}</TD></TR></TABLE>>'
        )
        fill = next(iter(on)) if len(on) == 1 else "#f7f7f7"
        attrs = [
            f"label={label}",
            f'fillcolor="{fill}"',
            f"id={_q('m:' + g.key)}",
            f"tooltip={_q(g.label + chr(10) + where)}",
        ]
        if b in marked:
            attrs += (
                [f'color="{HIGHLIGHT_COLOUR}"', "penwidth=4"]
                if decision.accepted
                else [f'color="{CRITICAL_COLOUR}"', "penwidth=3", 'style="rounded,filled,dashed"']
            )
        lines.append(f"  b{b} [{', '.join(attrs)}];")
    lines += [f"  b{a} -> b{b};" for a, b, _ in cg.edges]
    lines.append("}")
    first = next((cg.box_of[v] for v in touched if cg.box_of[v] >= 0), None)  # the first node moved
    return "\n".join(lines) + "\n", None if first is None else f"m:{cg.groups[first].key}"
