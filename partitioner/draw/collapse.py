"""The model graph collapsed by module: one box per repeated block, expandable, with its sums.

A node's box is the module it runs in, cut at the first numbered component of its path
(``transformer.h.3.attn.c_attn`` is in ``transformer.h.3``; ``wte`` stays ``wte``): repeated
blocks (``h.0`` ... ``h.11``, ``layers.N``) become one box each, as in the graph viewers people
know (Model Explorer, TensorBoard). Expanding a box shows the next level of its path, down to
single nodes. A box sums its members' output and parameter bytes, FLOPs and latencies, and
counts them per device and partition (its colour bar). Nodes outside any module stay single,
unless the boxes would be more than ``max_boxes``: then each run of them in topological order is
one box. Pure Python over the index graph; :func:`collapse` is O(N + E).

Repeated blocks fold (NOTE: [Folded blocks]): a run of sibling boxes ``layers.0`` ...
``layers.79`` of the same module class and the same op structure is one box
``layers.0-79 (x80)`` with the sums of all of them; expanding it opens its first block, and
opening any block by name (``layers.37``) splits the run around it, at every depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection, Mapping, Sequence

from partitioner.devices import format_bytes
from partitioner.draw.boxes import FOLD, block_ancestors, box_key, fold_runs, numbered
from partitioner.draw.dot import (
    HIGHLIGHT_COLOUR,
    UNKNOWN_DEVICE_COLOUR,
    device_colours,
    device_names,
    html_text,
    quote,
)
from partitioner.draw.overlay import colour_for, formatter, legend_node
from partitioner.units import format_flops, format_seconds

if TYPE_CHECKING:  # pragma: no cover
    from partitioner.graph import Graph
    from partitioner.plan.records import Plan

__all__ = [
    "Group",
    "CollapsedGraph",
    "collapse",
    "collapsed_to_dot",
    "box_values",
    "search",
    "SearchHit",
    "MAX_BOXES",
    "expand_key",
    "FOLD",
    "lineage",
    "UPSTREAM_COLOUR",
    "DOWNSTREAM_COLOUR",
]

MAX_BOXES = 300  # above this many boxes, runs of nodes outside any module are merged
UPSTREAM_COLOUR, DOWNSTREAM_COLOUR = "#2ca02c", "#9467bd"  # outlines of what feeds a box, what it feeds


@dataclass(frozen=True)
class Group:
    """One box: the op nodes of a module (or a single node, or a run of top-level nodes).
    ``param_bytes``: the weights its nodes hold or read (attributes once per box)."""

    key: str  # module path prefix; "node:<name>" for a single node; "run:<first>" for a run
    label: str
    members: tuple[int, ...]  # node indices, topological order
    output_bytes: int
    param_bytes: int
    flops: int
    latency_s: float  # the sum of its nodes' latencies (not a critical path)
    devices: tuple[tuple[int, int], ...]  # (logical device id, members placed there), by id
    partitions: tuple[int, ...]
    expandable: bool
    blocks: tuple[str, ...] = ()  # a folded box: the module paths of its identical blocks, in order

    @property
    def memory_bytes(self) -> int:
        return self.output_bytes + self.param_bytes

    @property
    def repeat(self) -> int:
        """How many identical blocks the box stands for (1 unless folded)."""
        return max(1, len(self.blocks))


@dataclass(frozen=True)
class CollapsedGraph:
    groups: tuple[Group, ...]
    edges: tuple[tuple[int, int, int], ...]  # (src box, dst box, bytes: each output once per box)
    box_of: tuple[int, ...]  # node index -> box index (-1 for placeholders, attributes, output)


def expand_key(key: str) -> str:
    """The module path that expanding box ``key`` adds to ``expanded``: a folded box opens its
    first block (the others stay folded), any other box itself."""
    if key.startswith(FOLD):
        parent, _, span = key[len(FOLD) :].rpartition(".")
        return f"{parent}.{span.partition('-')[0]}" if parent else span.partition("-")[0]
    return key


def _weight_bytes(graph: "Graph", members: Sequence[int]) -> int:
    """The weights a box's members hold or read: called modules' parameters (symbolic_trace) plus
    each attribute they read, once per box (torch.export lifts every weight to an attribute)."""
    read = {u for v in members for u in graph.preds[v] if graph.nodes[u].op == "get_attr"}
    return sum(graph.nodes[v].param_bytes for v in members) + sum(graph.output_bytes[u] for u in read)


def collapse(
    graph: "Graph",
    plan: "Plan | None" = None,
    node_s: Sequence[float] | None = None,
    expanded: Collection[str] = (),
    max_boxes: int = MAX_BOXES,
    fold: bool = True,
    only: Collection[int] | None = None,
) -> CollapsedGraph:
    """The op nodes of ``graph`` grouped into boxes (see the module doc); ``plan`` gives each box
    its devices and partitions, ``node_s`` its latency (the cost model's per-node seconds);
    ``fold``: runs of identical blocks as one box (NOTE: [Folded blocks]); ``only``: box these
    node indices alone (one partition's nodes), the rest of the graph left out."""
    chosen = None if only is None else set(only)
    ops = graph.op_indices if chosen is None else tuple(v for v in graph.op_indices if v in chosen)
    keys = _box_keys(graph, ops, expanded, max_boxes)
    boxes = _boxes(graph, ops, keys, fold)
    box_of = [-1] * len(graph)
    for b, (_, vs, _) in enumerate(boxes):
        for v in vs:
            box_of[v] = b
    where = plan.node_to_partition() if plan is not None else {}
    on = {p.id: p.device_ids for p in plan.partitions} if plan is not None else {}
    groups = [
        _group(graph, key, vs, blocks, bool(blocks) or keys[vs[0]][1], where, on, node_s) for key, vs, blocks in boxes
    ]
    return CollapsedGraph(tuple(groups), _box_edges(graph, ops, box_of), tuple(box_of))


def _box_keys(
    graph: "Graph", ops: Sequence[int], expanded: Collection[str], max_boxes: int
) -> dict[int, tuple[str, bool]]:
    """Each op's box key and whether the box can be opened; over ``max_boxes`` boxes, each run
    of single nodes outside any module is merged into one box."""
    ancestors = block_ancestors(graph)
    keys = {v: box_key(graph, v, expanded, ancestors) for v in ops}
    if len({k for k, _ in keys.values()}) > max_boxes:
        run = ""
        for v in ops:
            if keys[v][0].startswith("node:") and not graph.nodes[v].module_path:
                run = run or f"run:{graph.nodes[v].name}"
                keys[v] = (run, False)
            else:
                run = ""
    return keys


def _boxes(
    graph: "Graph", ops: Sequence[int], keys: dict[int, tuple[str, bool]], fold: bool
) -> list[tuple[str, list[int], tuple[str, ...]]]:
    """The boxes in first-seen order, (key, members, folded blocks): with ``fold``, each run of
    identical numbered blocks one box keyed ``FOLD parent.start-end`` (NOTE: [Folded blocks])."""
    order: dict[str, int] = {}
    members: list[list[int]] = []
    for v in ops:
        b = order.setdefault(keys[v][0], len(order))
        if b == len(members):
            members.append([])
        members[b].append(v)
    names = list(order)
    runs = fold_runs(graph, names, members) if fold else [[b] for b in range(len(names))]
    boxes: list[tuple[str, list[int], tuple[str, ...]]] = []
    for span in runs:
        if len(span) == 1:
            boxes.append((names[span[0]], members[span[0]], ()))
            continue
        parent, start = numbered(names[span[0]]) or ("", 0)  # a run holds numbered boxes only
        end = start + len(span) - 1
        joined = sorted(v for b in span for v in members[b])
        boxes.append((f"{FOLD}{parent}.{start}-{end}", joined, tuple(names[b] for b in span)))
    return boxes


def _group(
    graph: "Graph",
    key: str,
    vs: list[int],
    blocks: tuple[str, ...],
    expandable: bool,
    where: Mapping[str, int],
    on: Mapping[int, Sequence[int]],
    node_s: Sequence[float] | None,
) -> Group:
    """One box's record: its label, sizes, latency, and the devices and partitions of its nodes."""
    devices: dict[int, int] = {}
    parts: set[int] = set()
    for v in vs:
        p = where.get(graph.nodes[v].name)
        if p is not None:
            parts.add(p)
            for d in on.get(p, ()):
                devices[d] = devices.get(d, 0) + 1
    if key.startswith("node:"):
        label = graph.nodes[vs[0]].name
    elif key.startswith("run:"):
        label = f"{graph.nodes[vs[0]].name} ... {graph.nodes[vs[-1]].name}"
    else:
        label = f"{key[len(FOLD) :]} (x{len(blocks)})" if blocks else key
    return Group(
        key,
        label,
        tuple(vs),
        sum(graph.output_bytes[v] for v in vs),
        _weight_bytes(graph, vs),
        sum(graph.nodes[v].flops for v in vs),
        sum(node_s[v] for v in vs) if node_s is not None else 0.0,
        tuple(sorted(devices.items())),
        tuple(sorted(parts)),
        expandable,
        blocks,
    )


def _box_edges(graph: "Graph", ops: Sequence[int], box_of: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    """(src box, dst box, bytes) between boxes, each output counted once per box it reaches."""
    edges: dict[tuple[int, int], int] = {}
    for v in ops:
        seen: set[int] = set()
        for w in graph.users[v]:
            b = box_of[w]
            if b >= 0 and b != box_of[v] and b not in seen:
                seen.add(b)
                edges[(box_of[v], b)] = edges.get((box_of[v], b), 0) + graph.output_bytes[v]
    return tuple((a, b, n) for (a, b), n in sorted(edges.items()))


@dataclass(frozen=True)
class SearchHit:
    query: str
    nodes: tuple[int, ...]  # node indices whose name or module path contains the query
    partitions: tuple[int, ...]  # partitions holding them


def search(graph: "Graph", query: str, plan: "Plan | None" = None) -> SearchHit:
    """Op nodes whose name or module path contains ``query`` (case-insensitive), and their
    partitions in ``plan``."""
    q = query.strip().lower()
    if not q:
        return SearchHit(query, (), ())
    hits = tuple(
        v for v in graph.op_indices if q in graph.nodes[v].name.lower() or q in graph.nodes[v].module_path.lower()
    )
    where = plan.node_to_partition() if plan is not None else {}
    parts = sorted({where[graph.nodes[v].name] for v in hits if graph.nodes[v].name in where})
    return SearchHit(query, hits, tuple(parts))


def lineage(cg: CollapsedGraph, box: int) -> tuple[frozenset[int], frozenset[int]]:
    """(upstream, downstream): the boxes whose outputs reach ``box``, and those it reaches, over
    the box edges. O(boxes + edges)."""
    up: dict[int, list[int]] = {}
    down: dict[int, list[int]] = {}
    for a, b, _ in cg.edges:
        down.setdefault(a, []).append(b)
        up.setdefault(b, []).append(a)

    def reach(links: dict[int, list[int]]) -> frozenset[int]:
        seen: set[int] = set()
        stack = [box]
        while stack:
            for w in links.get(stack.pop(), ()):
                if w not in seen and w != box:
                    seen.add(w)
                    stack.append(w)
        return frozenset(seen)

    return reach(up), reach(down)


def _tip(g: Group, plan: "Plan | None", overlay: str, value: float | None) -> str:
    lines = [
        g.label,
        f"{len(g.members)} node{'s' if len(g.members) != 1 else ''}"
        + (f" ({len(g.members) // g.repeat} in each of {g.repeat} identical blocks)" if g.blocks else ""),
        f"output {format_bytes(g.output_bytes)}, parameters {format_bytes(g.param_bytes)}",
        f"{format_flops(g.flops)}, latency {format_seconds(g.latency_s)} (sum of its nodes)",
    ]
    if plan is not None and g.devices:
        lines.append("devices: " + ", ".join(f"{device_names(plan, [d])} ({n})" for d, n in g.devices))
        lines.append("partitions: " + ", ".join(f"P{p}" for p in g.partitions))
    if value is not None and overlay != "device":
        lines.append(f"{overlay}: {formatter(overlay)(value)}")
    if g.blocks:
        lines.append(f"click to open {g.blocks[0]} (the others stay folded)")
    elif g.expandable:
        lines.append("click to expand")
    return "\n".join(lines)


def _spans(plan: "Plan | None", g: Group) -> str:
    """The devices a folded box spans, in a few words for its label."""
    if plan is None or not g.devices:
        return ""
    ids = [d for d, _ in g.devices]
    if len(ids) <= 3:
        return "on " + device_names(plan, ids)
    return f"on {device_names(plan, ids[:1])} ... {device_names(plan, ids[-1:])} ({len(ids)} devices)"


def box_values(cg: CollapsedGraph, overlay: str) -> list[float]:
    """Each box's value of ``overlay`` (memory, latency, FLOPs, or the bytes leaving it)."""
    if overlay == "memory":
        return [float(g.memory_bytes) for g in cg.groups]
    if overlay == "latency":
        return [g.latency_s for g in cg.groups]
    if overlay == "flops":
        return [float(g.flops) for g in cg.groups]
    out = [0.0] * len(cg.groups)
    for a, _, n in cg.edges:
        out[a] += n
    return out


def collapsed_to_dot(
    cg: CollapsedGraph,
    plan: "Plan | None" = None,
    *,
    overlay: str = "device",
    highlight: Collection[int] = (),
    title: str = "",
    upstream: Collection[int] = (),
    downstream: Collection[int] = (),
) -> str:
    """DOT of a collapsed graph: a box per group with its sums and a bar of its devices' colours
    (widths by member count), fill by ``overlay`` (the device's colour when a box sits on one
    device), edges with the bytes crossing, dashed where they change device. Boxes have DOT ids
    ``m:<key>`` and tooltips; ``highlight``: box indices outlined thick (search hits);
    ``upstream``/``downstream``: boxes outlined in green/purple (:func:`lineage`)."""
    colours: Mapping[int, str] = device_colours(plan.devices) if plan is not None else {}
    values = box_values(cg, overlay) if overlay != "device" else []
    low, high = (min(values), max(values)) if values else (0.0, 0.0)
    lines = [
        "digraph model {",
        f"  graph [rankdir=TB, labelloc=t, fontname=Helvetica, fontsize=14, label={quote(title)}, nodesep=0.25, ranksep=0.35];",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10, margin="0.08,0.04"];',
        '  edge [fontname=Helvetica, fontsize=8, color="#666666"];',
    ]
    single: list[int | None] = []
    for b, g in enumerate(cg.groups):
        total = sum(n for _, n in g.devices) or 1
        bar = "".join(
            f'<TD BGCOLOR="{colours.get(d, UNKNOWN_DEVICE_COLOUR)}" HEIGHT="8" WIDTH="{max(4, round(60 * n / total))}"></TD>'
            for d, n in g.devices
        )
        single.append(g.devices[0][0] if len(g.devices) == 1 else None)
        fill = colour_for(values[b], low, high) if values else colours.get(single[b], "#f7f7f7")  # type: ignore[arg-type]
        text = (
            f"{g.label}\n{len(g.members)} nodes | {format_bytes(g.memory_bytes)}\n{format_seconds(g.latency_s)}"
            if len(g.members) > 1
            else f"{g.label}\n{format_bytes(g.memory_bytes)} | {format_seconds(g.latency_s)}"
        )
        if g.blocks and _spans(plan, g):
            text += "\n" + _spans(plan, g)
        body = "<BR/>".join(html_text(t) for t in text.split("\n"))
        span = max(1, len(g.devices))
        label = (
            '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="2">'
            + (f"<TR>{bar}</TR>" if bar else "")
            + f'<TR><TD COLSPAN="{span}">{body}</TD></TR></TABLE>>'
        )
        attrs = [
            f"label={label}",
            f'fillcolor="{fill}"',
            f"id={quote('m:' + g.key)}",
            f"tooltip={quote(_tip(g, plan, overlay, values[b] if values else None))}",
        ]
        if g.blocks:
            attrs += ["peripheries=3", 'style="rounded,filled,bold"']
        elif g.expandable:
            attrs.append("peripheries=2")
        if b in highlight:
            attrs += [f'color="{HIGHLIGHT_COLOUR}"', "penwidth=4"]
        elif b in upstream or b in downstream:
            attrs += [f'color="{UPSTREAM_COLOUR if b in upstream else DOWNSTREAM_COLOUR}"', "penwidth=3"]
        lines.append(f"  b{b} [{', '.join(attrs)}];")
    for a, b, n in cg.edges:
        dashed = single[a] is None or single[b] is None or single[a] != single[b]
        lines.append(
            f"  b{a} -> b{b} [label={quote(format_bytes(n))}{', style=dashed' if dashed and plan is not None else ''}];"
        )
    if values:
        lines.append(legend_node(overlay, low, high))
    lines.append("}")
    return "\n".join(lines) + "\n"
