"""Pure builders for the Training memory and Sharding pages: the trade-off between saved
activations and recomputation over the budget sweep, each device's training memory stacked
against its capacity, the traced graph coloured by what min-cut saves and recomputes (Graphviz
DOT), and each device's memory before and after a shard spec.

No Streamlit here; each builder is linear in what it draws.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go

from explorer.builders.figures import titled
from explorer.builders.tables import byte_unit, time_unit
from explorer.builders.text import plain
from partitioner import Device, Graph
from partitioner.draw.dot import quote
from partitioner.remat.memory import RematResult
from partitioner.units import format_bytes, format_flops, format_seconds

__all__ = [
    "tradeoff_figure",
    "training_memory_figure",
    "shard_memory_figure",
    "remat_to_dot",
    "PARTS",
    "STATUS_COLOURS",
]

PARTS = {"parameters": "#4c78a8", "gradients": "#72b7b2", "optimizer": "#b279a2", "activations": "#f58518"}
STATUS_COLOURS = {"saved": "#4c78a8", "recomputed": "#f58518", "neither": "#e6e6e6"}


def tradeoff_figure(results: Sequence[RematResult], budget: float) -> go.Figure:
    """Saved activation memory against the recomputation the backward adds, one point per budget
    of the sweep; the current budget is the larger, outlined point."""
    ordered = sorted(results, key=lambda r: r.budget)
    t_unit, t_scale = time_unit(max((r.recompute_time_s for r in ordered), default=0.0) or 1e-9)
    b_unit, b_scale = byte_unit(max((r.saved_activation_bytes for r in ordered), default=0) or 1)
    fig = go.Figure()
    fig.add_scatter(
        x=[r.recompute_time_s / t_scale for r in ordered],
        y=[r.saved_activation_bytes / b_scale for r in ordered],
        mode="lines+markers+text",
        text=[f"{r.budget:g}" for r in ordered],
        textposition="top right",
        name="budget sweep",
        marker={"size": 8, "color": "#4c78a8"},
        hovertext=[
            f"budget {r.budget:g}: saves {format_bytes(r.saved_activation_bytes)}, recomputes "
            f"{len(r.recomputed)} nodes ({r.recomputed_ops} aten ops, {format_flops(r.recompute_flops)}, {format_seconds(r.recompute_time_s)})"
            for r in ordered
        ],
        hoverinfo="text",
    )
    current = [r for r in ordered if r.budget == budget]
    if current:
        r = current[0]
        fig.add_scatter(
            x=[r.recompute_time_s / t_scale],
            y=[r.saved_activation_bytes / b_scale],
            mode="markers",
            name=f"budget {budget:g}",
            hoverinfo="skip",
            marker={"size": 16, "color": "rgba(0,0,0,0)", "line": {"color": "#e45756", "width": 3}},
        )
    fig.update_xaxes(title=f"recomputation added to the backward ({t_unit})", rangemode="tozero")
    fig.update_yaxes(title=f"saved activations ({b_unit})", rangemode="tozero")
    return titled(fig, "Activation memory against recomputation (labels: budget)")


def training_memory_figure(used: Mapping[int, Mapping[str, int]], devices: Sequence[Device]) -> go.Figure:
    """Each device's parameters, gradients, optimizer state and saved activations, stacked,
    with its capacity as a marker line."""
    names = {d.logical_id: plain(d.name) for d in devices}
    caps = {d.logical_id: d.memory_bytes for d in devices}
    ids = sorted(used)
    largest = max([sum(used[d].values()) for d in ids] + [caps[d] for d in ids] + [1])
    unit, scale = byte_unit(largest)
    x = [f"{names.get(d, d)} ({d})" for d in ids]
    fig = go.Figure()
    for part, colour in PARTS.items():
        fig.add_bar(
            x=x,
            y=[used[d][part] / scale for d in ids],
            name=part,
            marker={"color": colour},
            hovertext=[f"{part}: {format_bytes(used[d][part])}" for d in ids],
            hoverinfo="text",
        )
    fig.add_scatter(
        x=x,
        y=[caps[d] / scale for d in ids],
        mode="markers",
        name="capacity",
        marker={"symbol": "line-ew-open", "size": 40, "color": "#e45756", "line": {"width": 3}},
        hovertext=[f"capacity {format_bytes(caps[d])}" for d in ids],
        hoverinfo="text",
    )
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title=f"memory ({unit})")
    return titled(fig, "Training memory per device against capacity")


def remat_to_dot(graph: Graph, result: RematResult, max_nodes: int = 600) -> str:
    """The traced graph's op nodes (the first ``max_nodes``), filled by what the backward does with
    each: reads its saved value, recomputes it, or neither; the tooltip gives the details."""
    saved, recomputed = set(result.saved), set(result.recomputed)
    ops = list(graph.op_indices)[:max_nodes]
    shown = set(ops)
    lines = [
        "digraph remat {",
        '  rankdir=TB; node [shape=box, style="rounded,filled", fontname=Helvetica, '
        'fontsize=10]; edge [color="#999999"];',
        f'  label="budget {result.budget:g}: {len(saved)} saved ({format_bytes(result.saved_activation_bytes)}), '
        f"{len(recomputed)} recomputed nodes ({result.recomputed_ops} aten ops)"
        + (f"; first {max_nodes} of {len(graph.op_indices)} ops" if len(graph.op_indices) > max_nodes else "")
        + '"; labelloc=t;',
    ]
    for v in ops:
        node = graph.nodes[v]
        status = "saved" if node.name in saved else "recomputed" if node.name in recomputed else "neither"
        tip = (
            f"{node.name} ({node.target}){' in ' + node.module_path if node.module_path else ''}: {status}"
            + (f", {format_bytes(result.saved_bytes_by_node[node.name])} saved" if status == "saved" else "")
            + f"; output {format_bytes(node.output_bytes)}, {format_flops(node.flops)}"
        )
        lines.append(f'  n{v} [label={quote(node.name)}, fillcolor="{STATUS_COLOURS[status]}", tooltip={quote(tip)}];')
    for v in ops:
        for u in graph.preds[v]:
            if u in shown:
                lines.append(f"  n{u} -> n{v};")
    lines.append("}")
    return "\n".join(lines)


def shard_memory_figure(before: Mapping[int, int], after: Mapping[int, int], devices: Sequence[Device]) -> go.Figure:
    """Each device's memory with every parameter whole, beside its memory under the shard spec,
    against its capacity."""
    ids = [d.logical_id for d in devices]
    caps = {d.logical_id: d.memory_bytes for d in devices}
    unit, scale = byte_unit(max([before[d] for d in ids] + [after[d] for d in ids] + list(caps.values()) + [1]))
    x = [f"{plain(d.name)} ({d.logical_id})" for d in devices]
    fig = go.Figure()
    fig.add_bar(
        x=x,
        y=[before[d] / scale for d in ids],
        name="unsharded",
        marker={"color": "#bab0ac"},
        hovertext=[f"unsharded: {format_bytes(before[d])}" for d in ids],
        hoverinfo="text",
    )
    fig.add_bar(
        x=x,
        y=[after[d] / scale for d in ids],
        name="with the spec",
        marker={"color": "#4c78a8"},
        hovertext=[f"with the spec: {format_bytes(after[d])}" for d in ids],
        hoverinfo="text",
    )
    fig.add_scatter(
        x=x,
        y=[caps[d] / scale for d in ids],
        mode="markers",
        name="capacity",
        marker={"symbol": "line-ew-open", "size": 40, "color": "#e45756", "line": {"width": 3}},
        hovertext=[f"capacity {format_bytes(caps[d])}" for d in ids],
        hoverinfo="text",
    )
    fig.update_layout(barmode="group")
    fig.update_yaxes(title=f"memory ({unit})", rangemode="tozero")
    return titled(fig, "Memory per device, unsharded and with the spec")
