"""Pure Plotly builders for the Pipeline page: the schedule as a timeline per rank (forward,
backward, input- and weight-gradient blocks; idle time is the grey behind them), the bubble
and step time against the microbatch count, and each stage's memory against its device.

No Streamlit here; each builder is linear in what it draws.
"""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from partitioner.pipeline import PipelinePlan, Simulation
from partitioner.pipeline.schedules import ActionKind
from partitioner.units import format_bytes, format_seconds

from explorer.builders.figures import _layout
from explorer.builders.tables import byte_unit, time_unit

__all__ = ["schedule_figure", "microbatch_figure", "stage_memory_figure", "KIND_NAMES"]

KIND_NAMES = {ActionKind.F: "forward", ActionKind.B: "backward", ActionKind.I: "backward (inputs)",
              ActionKind.W: "backward (weights)"}
_KIND_COLOURS = {ActionKind.F: "#4c78a8", ActionKind.B: "#f58518", ActionKind.I: "#e45756", ActionKind.W: "#54a24b"}
_IDLE_COLOUR = "#e6e6e6"


def schedule_figure(sim: Simulation, ranks: int) -> go.Figure:
    """Every action of every rank from its start to its end, labelled with its microbatch (and
    its stage when a rank holds several); the grey behind each row is the rank's idle time."""
    unit, scale = time_unit(sim.step_time_s)
    fig = go.Figure()
    rows = [f"rank {r}" for r in range(ranks)]
    fig.add_bar(orientation="h", y=rows, base=[0.0] * ranks, x=[sim.step_time_s / scale] * ranks,
                marker={"color": _IDLE_COLOUR}, name="idle (bubble)", hoverinfo="skip")
    per_rank_stages: dict[int, set[int]] = {}
    for e in sim.timeline:
        per_rank_stages.setdefault(e.rank, set()).add(e.stage)
    several = any(len(v) > 1 for v in per_rank_stages.values())
    for kind in ActionKind:
        events = [e for e in sim.timeline if e.kind == kind]
        if not events:
            continue
        fig.add_bar(
            orientation="h", name=KIND_NAMES[kind],
            y=[f"rank {e.rank}" for e in events],
            base=[e.start_s / scale for e in events],
            x=[(e.end_s - e.start_s) / scale for e in events],
            text=[f"s{e.stage}:{e.microbatch}" if several else str(e.microbatch) for e in events],
            textposition="inside", insidetextanchor="middle", textangle=0,
            marker={"color": _KIND_COLOURS[kind], "line": {"color": "#ffffff", "width": 0.5}},
            hovertext=[f"rank {e.rank}, stage {e.stage}: {KIND_NAMES[e.kind]} of microbatch {e.microbatch}, "
                       f"{format_seconds(e.start_s)} to {format_seconds(e.end_s)}" for e in events],
            hoverinfo="text",
        )
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(type="category", autorange="reversed", categoryorder="array", categoryarray=rows)
    fig.update_xaxes(title=f"time ({unit})", range=[0, sim.step_time_s / scale * 1.01 or 1])
    title = (f"Schedule {sim.schedule}: step {format_seconds(sim.step_time_s)}, "
             f"bubble {sim.bubble_fraction:.1%} (labels: {'stage:' if several else ''}microbatch)")
    return _layout(fig, title, height=max(220, 90 + 36 * ranks))


def microbatch_figure(points: Sequence[tuple[int, float, float]], chosen: int) -> go.Figure:
    """``(microbatches, step time, bubble fraction)`` points: the bubble shrinks as the batch is
    cut finer, the step time with it until per-microbatch overheads win."""
    unit, scale = time_unit(max((p[1] for p in points), default=0.0))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    xs = [p[0] for p in points]
    fig.add_scatter(x=xs, y=[p[1] / scale for p in points], name=f"step time ({unit})", mode="lines+markers",
                    line={"color": "#4c78a8"}, secondary_y=False)
    fig.add_scatter(x=xs, y=[100 * p[2] for p in points], name="bubble (%)", mode="lines+markers",
                    line={"color": "#e45756", "dash": "dot"}, secondary_y=True)
    fig.add_vline(x=chosen, line={"color": "#333333", "dash": "dash", "width": 1})
    fig.update_xaxes(title="microbatches", type="log", tickvals=xs, ticktext=[str(x) for x in xs])
    fig.update_yaxes(title=f"step time ({unit})", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title="bubble (%)", range=[0, 100], tickvals=[0, 25, 50, 75, 100], showgrid=False,
                     secondary_y=True)
    return _layout(fig, "Step time and bubble against the microbatch count (dashed: chosen)")


def stage_memory_figure(pp: PipelinePlan, capacity: Sequence[int]) -> go.Figure:
    """Per stage: weights (with gradients and optimizer state when training) and the stashed
    activations, stacked, against the capacity of the stage's device."""
    unit, scale = byte_unit(max([*pp.stage_memory_bytes, *capacity], default=0))
    labels = [f"stage {s}" for s in range(len(pp.stages))]
    weights = [m - s for m, s in zip(pp.stage_memory_bytes, pp.stage_stash_bytes)]
    fig = go.Figure()
    fig.add_bar(x=labels, y=[w / scale for w in weights], name="weights" + (" + gradients + optimizer"
                                                                           if pp.training else ""),
                marker={"color": "#72b7b2"}, hovertext=[format_bytes(w) for w in weights], hoverinfo="text")
    fig.add_bar(x=labels, y=[s / scale for s in pp.stage_stash_bytes], name="stashed activations",
                marker={"color": "#b279a2"}, hovertext=[format_bytes(s) for s in pp.stage_stash_bytes],
                hoverinfo="text")
    fig.add_scatter(x=labels, y=[c / scale for c in capacity], name="device capacity", mode="markers",
                    marker={"symbol": "line-ew-open", "size": 36, "color": "#333333", "line": {"width": 3}})
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title=f"memory ({unit})", rangemode="tozero")
    return _layout(fig, "Memory per stage against its device")
