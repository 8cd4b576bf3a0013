"""Predicted against measured: a real run's partitions beside the plan's prediction, and a
prediction stacked by part beside one measured time. Pure Plotly, no Streamlit."""

from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go

from explorer.builders.figures import titled
from explorer.builders.tables import time_unit
from explorer.builders.text import plain
from partitioner.units import format_signed

__all__ = ["run_figure", "predicted_parts_figure"]


def run_figure(partitions: Sequence[Any], unit_s: float | None = None) -> go.Figure:
    """Predicted latency against measured compute (and input wait) per partition of a real run
    (``partitioner.runtime.execute.PartitionRun`` records)."""
    largest = max([max(p.predicted_s, p.compute_s + p.wait_s) for p in partitions] + [0.0])
    unit, scale = time_unit(unit_s or largest)
    names = [f"P{p.id}" for p in partitions]
    fig = go.Figure()
    fig.add_bar(name="predicted", x=names, y=[p.predicted_s / scale for p in partitions], marker_color="#9ecae1")
    fig.add_bar(name="measured compute", x=names, y=[p.compute_s / scale for p in partitions], marker_color="#3182bd")
    fig.add_bar(name="waiting for inputs", x=names, y=[p.wait_s / scale for p in partitions], marker_color="#fdae6b")
    fig.update_layout(barmode="group")
    fig.update_yaxes(title=f"time ({unit})")
    return titled(fig, "Predicted against measured, per partition", height=320)


def predicted_parts_figure(parts: Sequence[tuple[str, float]], measured_s: float, title: str) -> go.Figure:
    """A prediction stacked by part (seconds) beside one measured time, the error in the title."""
    total = sum(seconds for _, seconds in parts)
    unit, scale = time_unit(max(total, measured_s))
    fig = go.Figure()
    for name, seconds in parts:
        if seconds > 0:
            fig.add_bar(
                x=["predicted"],
                y=[seconds / scale],
                name=plain(name),
                hovertemplate=f"{plain(name)}: %{{y:.4g}} {unit}<extra></extra>",
            )
    fig.add_bar(
        x=["measured"],
        y=[measured_s / scale],
        name="measured",
        marker_color="#333333",
        hovertemplate=f"measured: %{{y:.4g}} {unit}<extra></extra>",
    )
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title=f"time ({unit})")
    error = (measured_s - total) / total if total > 0 else float("nan")
    return titled(fig, f"{plain(title)}: predicted against measured (error {format_signed(error)})", height=340)
