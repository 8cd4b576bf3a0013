"""Pure builders for the Plan a cluster page: the Pareto chart of devices against step time, a
layout's memory against the device and its time by cause, the best layouts as a table."""

from __future__ import annotations

from typing import Sequence

import pandas as pd
import plotly.graph_objects as go

from partitioner.cluster import ClusterPlan, LayoutResult

__all__ = ["pareto_figure", "memory_figure", "time_figure", "layouts_table"]

GiB = 2**30


def pareto_figure(found: ClusterPlan, step_label: str = "step time") -> go.Figure:
    """Every fitting layout (grey) and the fastest at each device count (coloured by cost per
    million tokens), devices (log) against step time (log)."""
    fig = go.Figure()
    every = found.fitting
    fig.add_trace(go.Scatter(x=[r.devices for r in every], y=[r.step_s for r in every], mode="markers",
                             marker=dict(color="#cccccc", size=5), name="every fitting layout",
                             text=[r.layout.label() for r in every], hoverinfo="text+x+y"))
    best = list(found.by_devices.values())
    fig.add_trace(go.Scatter(
        x=[r.devices for r in best], y=[r.step_s for r in best], mode="lines+markers", name="fastest at each size",
        text=[f"{r.layout.label()}<br>${r.cost_per_million_tokens:.3g} per million tokens" for r in best],
        hoverinfo="text+x+y",
        marker=dict(size=10, color=[r.cost_per_million_tokens for r in best], colorscale="Viridis",
                    colorbar=dict(title="$ / M tokens"), showscale=True)))
    fig.update_layout(title=f"Devices against {step_label} (log scales)", xaxis_title="devices",
                      yaxis_title=f"{step_label} (s)", height=420, legend=dict(orientation="h", y=-0.2))
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


def memory_figure(result: LayoutResult, capacity_bytes: int) -> go.Figure:
    """The fullest device's memory by kind, stacked, against its capacity (GiB)."""
    fig = go.Figure()
    for kind, value in result.memory.items():
        fig.add_trace(go.Bar(x=["per device"], y=[value / GiB], name=kind.replace("_", " ")))
    fig.add_hline(y=capacity_bytes / GiB, line_dash="dash", annotation_text="device memory")
    fig.update_layout(barmode="stack", title=f"Memory per device: {result.layout.label()}",
                      yaxis_title="memory (GiB)", height=380)
    return fig


def time_figure(result: LayoutResult) -> go.Figure:
    """Where the step's time goes, one bar per cause (seconds)."""
    parts = {k: v for k, v in result.parts_s.items()}
    fig = go.Figure(go.Bar(x=list(parts), y=list(parts.values()), marker_color="#4c78a8"))
    fig.update_layout(title=f"Time by cause: {result.layout.label()}", yaxis_title="time per step (s)",
                      xaxis_title="cause", height=380)
    return fig


def layouts_table(results: Sequence[LayoutResult], train_tokens: float | None = None) -> pd.DataFrame:
    """One row a layout: numbers stay numbers (seconds, GiB, fractions, dollars)."""
    rows = []
    for r in results:
        row = {"devices": r.devices, "layout": r.layout.label(), "dp": r.layout.dp, "tp": r.layout.tp,
               "pp": r.layout.pp, "zero": r.layout.zero, "recompute": r.layout.recompute,
               "step_s": r.step_s, "mfu": r.mfu, "memory_gib": r.memory_bytes / GiB, "limit": r.limit,
               "usd_per_million_tokens": r.cost_per_million_tokens}
        if train_tokens:
            row["train_days"] = train_tokens / r.tokens_per_s / 86400 if r.tokens_per_s else float("inf")
        rows.append(row)
    return pd.DataFrame(rows)
