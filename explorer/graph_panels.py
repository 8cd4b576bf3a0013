"""The graph views of a page: the partition DAG, a partition's nodes, the model collapsed by
module, two plans side by side, and an algorithm's steps, all in the pan-and-zoom viewer.

Widgets hold the choices (overlay, search, expanded modules, the drill-down), keyed per page,
so each page keeps its own view; the DOT comes from the library's builders.
"""

from __future__ import annotations

import streamlit as st

from explorer.builders import tables
from explorer.builders.figures import colour_range
from explorer.builders.text import md
from explorer.viewer import show_graph, svg_of, svg_size
from partitioner import Graph, PartitionError, Plan
from partitioner.accelerator.steps import DecisionTrace
from partitioner.cost import model as costs
from partitioner.draw.collapse import (
    CollapsedGraph,
    SearchHit,
    collapse,
    collapsed_to_dot,
    expand_key,
    lineage,
    search,
)
from partitioner.draw.dag import plan_to_dot
from partitioner.draw.nodeview import block_of, partition_to_dot, step_boxes_to_dot, step_to_dot, touched_nodes
from partitioner.draw.overlay import OVERLAYS, partition_values
from partitioner.plan.diff import diff_plans
from partitioner.units import format_seconds

__all__ = [
    "NO_HIT",
    "view_controls",
    "render_dag",
    "render_drilldown",
    "render_model_graph",
    "render_side_by_side",
    "render_step",
    "node_seconds",
    "NODE_LIMIT",
]

NODE_LIMIT = 600  # nodes drawn in one partition's drill-down
FOLD_ABOVE = 150  # a partition of more nodes opens folded by module, as the model graph does
_PARTITION_ID = r"^p\d+$"
_MODULE_ID = r"^m:"


def node_seconds(plan: Plan, graph: Graph) -> list[float]:
    """Each node's latency under the plan's devices and options (the cost model's max(memory, compute))."""
    return costs.node_seconds(graph, list(plan.devices), plan.options.node_latency_dict)


NO_HIT = SearchHit("", (), ())


def view_controls(key: str, graph: Graph, plan: Plan | None = None) -> tuple[str, SearchHit]:
    """Colour-by and search widgets, held in the link by Streamlit's binding (``{key}_overlay`` and
    ``{key}_search`` are URL keys); returns (overlay, what the search found). A query matching
    nothing says so."""
    cols = st.columns([2, 3])
    overlay = cols[0].selectbox(
        "Colour by",
        OVERLAYS,
        key=f"{key}_overlay",
        help="The same scale colours the charts below.",
        bind="query-params",
        persist_state="session",
    )
    query = (
        cols[1]
        .text_input(
            "Search a node or module",
            key=f"{key}_search",
            placeholder="e.g. blocks.3.mlp or c_fc",
            bind="query-params",
            persist_state="session",
        )
        .strip()
    )
    hit = search(graph, query, plan) if query else NO_HIT
    if query:
        if not hit.nodes:
            st.warning(
                f"No node or module name contains {md(query)}; try part of a name, e.g. "
                f"{md(graph.nodes[graph.op_indices[len(graph.op_indices) // 2]].module_path or graph.op_names[0])}."
            )
        else:
            where = ", ".join(f"P{p}" for p in hit.partitions) or "no partition"
            st.caption(
                f"{md(query)} matches {len(hit.nodes)} node{'s' if len(hit.nodes) != 1 else ''} in {where} "
                "(outlined in blue)."
            )
    return overlay, hit


def render_dag(
    plan: Plan, graph: Graph, key: str, overlay: str = "device", hit: SearchHit = NO_HIT, drilldown: bool = False
) -> None:
    """The partition DAG: BFS levels as ranks, devices as colours, critical path in red; with
    ``drilldown`` (a :func:`render_drilldown` on the page), a click on a partition opens it there."""
    highlight = st.toggle("Highlight the critical path", value=True, key=f"{key}_critical")
    hits = hit.partitions

    def open_partition(node_id: str) -> None:
        st.session_state[f"{key}_drill"] = int(node_id[1:])

    scale = colour_range(list(partition_values(plan, overlay, graph).values())) if overlay != "device" else None
    show_graph(
        plan_to_dot(plan, graph, highlight_critical=highlight, overlay=overlay, highlight=hits, scale=scale),
        key=f"{key}_dag",
        clickable=_PARTITION_ID if drilldown else None,
        on_click=open_partition if drilldown else None,
        focus=f"p{hits[0]}" if hits else None,
    )
    st.caption(
        "Boxes are partitions (memory used of the device's capacity, latency); edges carry "
        "the bytes crossing and their transfer time. Orange dashed outline: device over capacity."
    )


def render_drilldown(
    plan: Plan,
    graph: Graph,
    key: str,
    overlay: str = "device",
    hit: SearchHit = NO_HIT,
    node_s: list[float] | None = None,
) -> None:
    """Pick a partition (or click one in the DAG) to see its nodes (``node_s``: their latencies,
    :func:`node_seconds`)."""
    ids = [p.id for p in sorted(plan.partitions, key=lambda p: p.id)]
    sizes = {p.id: len(p.node_names) for p in plan.partitions}
    chosen = st.session_state.get(f"{key}_drill")
    if chosen not in (None, *ids):
        st.session_state[f"{key}_drill"] = None  # a partition of an earlier plan
    elif chosen is not None and st.session_state.get(f"{key}_drill_sizes") != sizes:
        # Another plan with the same ids: the browser still shows the old label ("P1 (53 nodes)");
        # setting the value again sends the new one.
        st.session_state[f"{key}_drill"] = chosen
    st.session_state[f"{key}_drill_sizes"] = sizes
    pick = st.selectbox(
        "Show the nodes inside a partition",
        [None, *ids],
        key=f"{key}_drill",
        format_func=lambda i: "(none)" if i is None else f"P{i} ({sizes[i]} node{'s' if sizes[i] != 1 else ''})",
    )
    if pick is None:
        return
    names = {graph.nodes[v].name for v in hit.nodes}
    members = set(next(p for p in plan.partitions if p.id == pick).node_names)
    inside = [v for v in hit.nodes if graph.nodes[v].name in members]
    if sizes[pick] > FOLD_ABOVE:  # lay out only what is shown: its modules, repeated blocks folded
        only = [graph.index[n] for n in members if n in graph.index]
        st.caption(f"P{pick} has {sizes[pick]} nodes: drawn by module, repeated blocks folded; click a box to open it.")
        _folded_view(
            graph,
            plan,
            f"{key}_drill{pick}",
            node_s or node_seconds(plan, graph),
            overlay,
            hit,
            title=f"P{pick}: {sizes[pick]} node{'s' if sizes[pick] != 1 else ''}",
            only=only,
        )
        return
    show_graph(
        partition_to_dot(
            plan,
            graph,
            pick,
            max_nodes=NODE_LIMIT,
            overlay=overlay,
            node_s=node_s or node_seconds(plan, graph),
            highlight=names,
        ),
        key=f"{key}_nodes",
        focus=f"n{inside[0]}" if inside else None,
    )


def render_model_graph(
    plan: Plan,
    graph: Graph,
    key: str,
    overlay: str = "device",
    hit: SearchHit = NO_HIT,
    node_s: list[float] | None = None,
) -> None:
    """The whole model, collapsed by module (a box per block with its sums and a bar of its
    devices; identical repeated blocks folded into one); a click on a box expands it, the list
    below opens any module by name or collapses it again."""
    title = f"{plan.model or 'model'}: {len(graph.op_indices)} nodes"
    _folded_view(graph, plan, key, node_s or node_seconds(plan, graph), overlay, hit, title=title, view="model")


def focus_box(cg: CollapsedGraph, hit: SearchHit, opened: str | None) -> str | None:
    """The box id the view centres on: the first search hit, else the first box inside the module
    just opened (the view follows what was expanded)."""
    boxes = sorted({cg.box_of[v] for v in hit.nodes if cg.box_of[v] >= 0})
    if boxes:
        return f"m:{cg.groups[boxes[0]].key}"
    if opened:
        inside = [g.key for g in cg.groups if g.key == opened or g.key.startswith(opened + ".")]
        return f"m:{inside[0]}" if inside else None
    return None


def _folded_view(
    graph: Graph,
    plan: Plan,
    key: str,
    node_s: list[float],
    overlay: str,
    hit: SearchHit,
    title: str,
    only: list[int] | None = None,
    view: str = "nodes",
) -> None:
    state_key, opened_key = f"{key}_expanded", f"{key}_opened"
    expanded = list(st.session_state.get(state_key, []))

    def toggle(node_id: str) -> None:
        module = expand_key(node_id[2:])
        now = list(st.session_state.get(state_key, []))
        if module in now:
            now = [m for m in now if m != module and not m.startswith(module + ".")]
            st.session_state[opened_key] = None
        else:
            now.append(module)
            st.session_state[opened_key] = module
        st.session_state[state_key] = now

    cg = collapse(graph, plan, node_s, expanded=expanded, only=only)
    boxes = sorted({cg.box_of[v] for v in hit.nodes if cg.box_of[v] >= 0})
    folded = sum(1 for g in cg.groups if g.blocks)
    keys = [g.key for g in cg.groups]
    labels = {g.key: g.label for g in cg.groups}
    if st.session_state.get(f"{key}_flow") not in (None, *keys):
        st.session_state[f"{key}_flow"] = None  # a box of an earlier view
    flow = st.selectbox(
        "Highlight what feeds and what follows",
        [None, *keys],
        key=f"{key}_flow",
        format_func=lambda k: "(nothing)" if k is None else labels[k],
        help="Upstream boxes outlined in green, downstream in purple",
    )
    up, down = lineage(cg, keys.index(flow)) if flow is not None else (frozenset(), frozenset())
    show_graph(
        collapsed_to_dot(
            cg,
            plan,
            overlay=overlay,
            highlight=boxes + ([keys.index(flow)] if flow else []),
            upstream=up,
            downstream=down,
            title=f"{title} in {len(cg.groups)} boxes" + (f", {folded} folded" if folded else ""),
        ),
        key=f"{key}_{view}",
        clickable=_MODULE_ID,
        on_click=toggle,
        focus=f"m:{flow}" if flow and not boxes else focus_box(cg, hit, st.session_state.get(opened_key)),
        hint="scroll to zoom, drag to pan, hover for sums, click a double-bordered box to expand it "
        "(a triple-bordered box is identical blocks folded: it opens the first)",
    )
    prefixes = sorted(
        {g.key for g in cg.groups if g.expandable and not g.blocks}
        | set(expanded)
        | {b for g in cg.groups for b in g.blocks}
    )

    def picked() -> None:  # the view follows a module opened from the list too
        added = [m for m in st.session_state.get(state_key, []) if m not in expanded]
        st.session_state[opened_key] = added[-1] if added else None

    st.multiselect(
        "Expanded modules (a box per submodule)",
        prefixes,
        key=state_key,
        on_change=picked,
        help="Click a box to expand it; pick any one of the folded blocks here to open it; remove "
        "it here to collapse it again.",
    )


def render_side_by_side(a: Plan, b: Plan, label_a: str, label_b: str, key: str, graph: Graph | None = None) -> None:
    """Two plans as two DAGs with one colour scheme (the devices' colours, and one overlay
    scale over both), then the library's diff: moved nodes and per-partition deltas."""
    overlay = st.selectbox("Colour both by", OVERLAYS, key=f"{key}_overlay")
    scale = None
    if overlay != "device":
        values = [*partition_values(a, overlay, graph).values(), *partition_values(b, overlay, graph).values()]
        scale = colour_range(values) if values else None
    if sorted((d.logical_id, d.name) for d in a.devices) != sorted((d.logical_id, d.name) for d in b.devices):
        st.caption("The plans list different devices: a colour may name a different device on each side.")
    left, right = st.columns(2)
    dots = {
        side: plan_to_dot(plan, graph, overlay=overlay, scale=scale, title=label)
        for plan, label, side in ((a, label_a, "a"), (b, label_b, "b"))
    }
    try:  # one scale: both open at the scale that shows the larger drawing whole
        sizes = [svg_size(svg_of(d)) for d in dots.values()]
        span: tuple[float, float] | None = (max(w for w, _ in sizes), max(h for _, h in sizes))
    except PartitionError:
        span = None  # show_graph says what failed
    for col, label, side in ((left, label_a, "a"), (right, label_b, "b")):
        with col:
            st.markdown(f"**{md(label)}**")
            show_graph(dots[side], key=f"{key}_{side}", height=480, span=span, sync=f"{key}_pair")
    diff = diff_plans(a, b)
    moves = tables.moves_table(a, b)
    deltas = tables.partition_delta_table(diff)
    st.markdown(
        f"**{len(moves)} node{'s' if len(moves) != 1 else ''} moved**, "
        f"{len(deltas)} partition{'s' if len(deltas) != 1 else ''} changed; latency "
        f"{format_seconds(diff.latency_s_a)} -> {format_seconds(diff.latency_s_b)}"
    )
    if len(moves):
        st.dataframe(moves, hide_index=True)
    if len(deltas):
        st.dataframe(deltas, hide_index=True)


STEP_NODES = 150  # above this many ops a step is drawn on the model folded by module


def render_step(trace: DecisionTrace, index: int, plan: Plan, key: str) -> None:
    """One decision of ``trace`` drawn on the model (``plan``: whose devices give the colours);
    the view goes to the decision's nodes. A large model is drawn by module with its repeated
    blocks folded, the block holding the decision's first node opened."""
    touched = touched_nodes(trace, index)
    hint = "scroll to zoom, drag to pan; outlined: this step's nodes (blue taken, red dashed tried)"
    if len(trace.graph.op_indices) <= STEP_NODES:
        show_graph(
            step_to_dot(trace, index, plan.devices),
            key=key,
            height=520,
            focus=f"n{touched[0]}" if touched else None,
            hint=hint,
        )
        return
    opened = [block_of(trace.graph, touched[0])] if touched and block_of(trace.graph, touched[0]) else []
    dot, focus = step_boxes_to_dot(trace, index, plan.devices, expanded=opened)
    show_graph(
        dot,
        key=key,
        height=520,
        focus=focus,
        hint=hint.replace("nodes", "boxes") + (f"; {opened[0]} opened" if opened else ""),
    )
