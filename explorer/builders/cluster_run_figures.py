"""Pure builders for a real run of a cluster layout on this machine beside its prediction
(:mod:`partitioner.cluster.run.checked`): the step by part, each part's error, each rank's memory.
No Streamlit here."""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd
import plotly.graph_objects as go

from explorer.builders.text import plain
from partitioner.cluster import LayoutResult
from partitioner.units import format_bytes, format_seconds, format_signed

__all__ = ["run_figure", "parts_table", "run_table"]


def run_figure(check: Any) -> go.Figure:
    """A real run's step beside its prediction on this machine's profile
    (:class:`partitioner.cluster.run.checked.LayoutCheck`): the prediction stacked by part (compute,
    DTensor dispatch, each collective, bubble), the measurement by what the run times apart (the
    dp gradient sync and the rest), each with the end-to-end error in the title."""
    from partitioner.cluster.run.checked import END_TO_END, REST, SYNC

    fig = go.Figure()
    for part in check.parts:
        if part.name in (REST, SYNC, END_TO_END) or part.predicted_s <= 0:
            continue
        fig.add_trace(
            go.Bar(
                x=["predicted"],
                y=[part.predicted_s],
                name=plain(part.name),
                hovertemplate=f"{plain(part.name)}: %{{y:.4g}} s<extra></extra>",
            )
        )
    timed = [p for p in check.parts if p.name in (REST, SYNC) and p.measured_s is not None]
    for part in timed or [check.parts[-1]]:
        fig.add_trace(
            go.Bar(
                x=["measured"],
                y=[part.measured_s],
                name=f"measured: {plain(part.name)}",
                hovertemplate=f"{plain(part.name)}: %{{y:.4g}} s<extra></extra>",
            )
        )
    error = check.error
    fig.update_layout(
        barmode="stack",
        height=400,
        yaxis_title="time per step (s)",
        xaxis_title="",
        title=f"One training step on this machine, predicted against measured: "
        f"{check.run.layout.label()} (error {'-' if error is None else format_signed(error)})",
    )
    return fig


def parts_table(check: Any) -> pd.DataFrame:
    """Each part of a checked run: predicted, measured where the run times it apart, the error."""
    return pd.DataFrame(
        [
            {
                "part": p.name,
                "predicted": format_seconds(p.predicted_s),
                "measured": "inside the rest" if p.measured_s is None else format_seconds(p.measured_s),
                "error": "-" if p.error is None else format_signed(p.error),
            }
            for p in check.parts
        ]
    )


def run_table(predicted: LayoutResult, ranks: Sequence[Any]) -> pd.DataFrame:
    """Each rank's mesh place and the parameter and gradient bytes it held, beside the predicted
    weights and gradients a device holds, with the error."""
    states = predicted.memory.get("weights", 0.0) + predicted.memory.get("gradients", 0.0)
    rows = []
    for r in ranks:
        mesh = (f"pp={r.pp} " if predicted.layout.pp > 1 else "") + f"dp={r.dp} tp={r.tp}"
        rows.append(
            {
                "rank": r.rank,
                "mesh": mesh,
                "weights held": format_bytes(r.parameter_bytes),
                "gradients held": format_bytes(r.gradient_bytes),
                "predicted": format_bytes(states),
                "error": format_signed((r.memory_bytes - states) / states) if states else "-",
                "step": format_seconds(r.step_s),
            }
        )
    return pd.DataFrame(rows)
