"""Pure Plotly builders for the Pipeline page: the schedule as a timeline per rank (forward,
backward, input- and weight-gradient blocks; idle time is the grey behind them), the bubble
and step time against the microbatch count, and each stage's memory against its device.

No Streamlit here; each builder is linear in what it draws.
"""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.builders.figures import titled
from explorer.builders.tables import byte_unit, time_unit
from partitioner import Graph
from partitioner.draw.nodeview import block_of
from partitioner.pipeline import PipelinePlan, Simulation
from partitioner.pipeline.schedules import ActionKind
from partitioner.units import format_bytes, format_seconds

__all__ = [
    "stage_span",
    "schedule_figure",
    "microbatch_figure",
    "stage_memory_figure",
    "KIND_NAMES",
    "transfers",
    "bubble_note",
    "idle_parts",
]

KIND_NAMES = {
    ActionKind.F: "forward",
    ActionKind.B: "backward",
    ActionKind.I: "backward (inputs)",
    ActionKind.W: "backward (weights)",
}
_KIND_COLOURS = {ActionKind.F: "#4c78a8", ActionKind.B: "#f58518", ActionKind.I: "#e45756", ActionKind.W: "#54a24b"}
_IDLE_COLOUR = "#e6e6e6"


def transfers(sim: Simulation, transfer_s: Sequence[float] | float) -> list[tuple[int, float, float, str]]:
    """``(receiving rank, start s, end s, what)`` for each activation or gradient that crosses
    between ranks in ``sim``: a forward's input from the stage before, a backward's gradient from
    the stage after, each ``transfer_s[boundary]`` long from the end of the action that made it."""
    stages = 1 + max((e.stage for e in sim.timeline), default=-1)
    comm = [float(transfer_s)] * max(0, stages - 1) if isinstance(transfer_s, (int, float)) else list(transfer_s)
    rank_of = {e.stage: e.rank for e in sim.timeline}
    ended = {(e.stage, e.kind, e.microbatch): e.end_s for e in sim.timeline}
    found = []
    for e in sim.timeline:
        if e.kind == ActionKind.F and e.stage > 0:
            source = next((ended[k] for k in [(e.stage - 1, ActionKind.F, e.microbatch)] if k in ended), None)
            boundary, sender, what = e.stage - 1, rank_of.get(e.stage - 1), "activations"
        elif e.kind in (ActionKind.B, ActionKind.I) and e.stage < stages - 1:
            source = next(
                (
                    ended[k]
                    for k in [(e.stage + 1, ActionKind.B, e.microbatch), (e.stage + 1, ActionKind.I, e.microbatch)]
                    if k in ended
                ),
                None,
            )
            boundary, sender, what = e.stage, rank_of.get(e.stage + 1), "gradients"
        else:
            continue
        if source is None or sender == e.rank or boundary >= len(comm) or comm[boundary] <= 0:
            continue
        found.append(
            (e.rank, source, source + comm[boundary], f"{what} of microbatch {e.microbatch} to stage {e.stage}")
        )
    return found


LABEL_MIN_PX = 10  # inside-bar labels smaller than this are hidden, not shrunk


def schedule_figure(sim: Simulation, ranks: int, transfer_s: Sequence[float] | float = 0.0) -> go.Figure:
    """Every action of every rank from its start to its end, labelled with its microbatch (and
    its stage when a rank holds several) where the label fits; transfers between ranks as thin
    hatched bars under the receiving rank's row; the grey behind each row is the rank's idle time."""
    unit, scale = time_unit(sim.step_time_s)
    fig = go.Figure()
    rows = [f"rank {r}" for r in range(ranks)]
    fig.add_bar(
        orientation="h",
        y=rows,
        base=[0.0] * ranks,
        x=[sim.step_time_s / scale] * ranks,
        marker={"color": _IDLE_COLOUR},
        name="idle (bubble)",
        hoverinfo="skip",
    )
    per_rank_stages: dict[int, set[int]] = {}
    for e in sim.timeline:
        per_rank_stages.setdefault(e.rank, set()).add(e.stage)
    several = any(len(v) > 1 for v in per_rank_stages.values())
    for kind in ActionKind:
        events = [e for e in sim.timeline if e.kind == kind]
        if not events:
            continue
        fig.add_bar(
            orientation="h",
            name=KIND_NAMES[kind],
            y=[f"rank {e.rank}" for e in events],
            base=[e.start_s / scale for e in events],
            x=[(e.end_s - e.start_s) / scale for e in events],
            text=[f"s{e.stage}:{e.microbatch}" if several else str(e.microbatch) for e in events],
            textposition="inside",
            insidetextanchor="middle",
            textangle=0,
            textfont={"size": 12, "color": "#ffffff"},
            marker={"color": _KIND_COLOURS[kind], "line": {"color": "#ffffff", "width": 0.5}},
            hovertext=[
                f"rank {e.rank}, stage {e.stage}: {KIND_NAMES[e.kind]} of microbatch {e.microbatch}, "
                f"{format_seconds(e.start_s)} to {format_seconds(e.end_s)}"
                for e in events
            ],
            hoverinfo="text",
        )
    moved = transfers(sim, transfer_s)
    if moved:
        fig.add_bar(
            orientation="h",
            name="transfer in (hatched)",
            y=[f"rank {r}" for r, *_ in moved],
            base=[start / scale for _, start, _, _ in moved],
            x=[(end - start) / scale for _, start, end, _ in moved],
            width=0.18,
            offset=0.3,  # a thin strip at the bottom of the receiving rank's row
            marker={
                "color": "#ffffff",
                "line": {"color": "#555555", "width": 0.5},
                "pattern": {"shape": "/", "fgcolor": "#555555", "size": 5},
            },
            hovertext=[f"{what}: {format_seconds(start)} to {format_seconds(end)}" for _, start, end, what in moved],
            hoverinfo="text",
        )
    fig.update_layout(barmode="overlay", uniformtext={"minsize": LABEL_MIN_PX, "mode": "hide"})
    fig.update_yaxes(type="category", autorange="reversed", categoryorder="array", categoryarray=rows)
    fig.update_xaxes(title=f"time ({unit})", range=[0, sim.step_time_s / scale * 1.01 or 1])
    title = (
        f"Schedule {sim.schedule}: step {format_seconds(sim.step_time_s)}, "
        f"bubble {sim.bubble_fraction:.1%} (labels: {'stage:' if several else ''}microbatch, where they fit)"
    )
    fig = titled(fig, title, height=max(260, 130 + 40 * ranks))
    # The legend above the plot, under the title: below it, it met the x-axis title.
    fig.update_layout(
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0},
        margin={"l": 10, "r": 10, "t": 70, "b": 10},
    )
    return fig


def idle_parts(sim: Simulation) -> tuple[float, float, float]:
    """Shares of all ranks' idle time that are the fill (before a rank's first action), the drain
    (after its last) and the gaps between its actions; (0, 0, 0) when nothing idles."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for e in sim.timeline:
        first[e.rank] = min(first.get(e.rank, e.start_s), e.start_s)
        last[e.rank] = max(last.get(e.rank, e.end_s), e.end_s)
    idle = sum(sim.rank_idle_s)
    if idle <= 0:
        return 0.0, 0.0, 0.0
    fill = sum(first.values())
    drain = sum(sim.step_time_s - t for t in last.values())
    return fill / idle, drain / idle, max(0.0, idle - fill - drain) / idle


def bubble_note(sim: Simulation, training: bool, other: Simulation | None = None) -> str:
    """What the bubble counts, and why zero bubble's is what it is at these settings (``other``:
    the same stages under the other two-stages-per-rank schedule, interleaved or zero bubble)."""
    ranks = 1 + max((e.rank for e in sim.timeline), default=0)
    text = (
        f"The bubble is the idle share of {ranks} ranks \u00d7 the step time (grey): a rank waits for the "
        "schedule to fill and drain, and for its inputs to arrive (transfers, hatched)."
    )
    if sim.schedule == "zero_bubble":
        if other is None:
            versus = ""
        elif f"{sim.bubble_fraction:.1%}" == f"{other.bubble_fraction:.1%}":
            versus = f" ({sim.bubble_fraction:.1%} here, as interleaved's on the same stages)"
        else:
            versus = (
                f" ({sim.bubble_fraction:.1%} here against interleaved's {other.bubble_fraction:.1%} on the "
                "same stages)"
            )
        if not training:
            text += (
                " Zero bubble removes idle time by splitting each backward into its input-gradient (I) and "
                "weight-gradient (W) halves and running the W's in the gaps. At inference there is no "
                f"backward, so nothing fills them: it runs the forwards alone, in its own order{versus}. "
                "Choose training under Work to see the gaps fill."
            )
        elif other is not None and sim.bubble_fraction >= other.bubble_fraction - 0.0005:
            fill, drain, between = idle_parts(sim)
            text += (
                f" Zero bubble fills gaps with the weight-gradient (W) halves of the backward, yet at "
                f"{sim.microbatches} microbatches on {ranks} ranks it idles no less{versus}: of its idle time "
                f"{fill:.0%} is the fill (ranks waiting for their first input), {drain:.0%} the drain, and "
                f"{between:.0%} waits in between, where a slower stage or a transfer holds the next rank up; "
                "the W's cannot start before their own backward, so they do not cover these."
            )
        else:
            text += f" Its weight-gradient (W) halves of the backward run in the gaps{versus}."
    elif sim.schedule == "interleaved_1f1b" and other is not None:
        text += f" Zero bubble on the same stages: {other.bubble_fraction:.1%}."
    return text


def microbatch_figure(points: Sequence[tuple[int, float, float]], chosen: int) -> go.Figure:
    """``(microbatches, step time, bubble fraction)`` points: the bubble shrinks as the batch is
    cut finer, the step time with it until per-microbatch overheads win."""
    unit, scale = time_unit(max((p[1] for p in points), default=0.0))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    xs = [p[0] for p in points]
    fig.add_scatter(
        x=xs,
        y=[p[1] / scale for p in points],
        name=f"step time ({unit})",
        mode="lines+markers",
        line={"color": "#4c78a8"},
        secondary_y=False,
    )
    fig.add_scatter(
        x=xs,
        y=[100 * p[2] for p in points],
        name="bubble (%)",
        mode="lines+markers",
        line={"color": "#e45756", "dash": "dot"},
        secondary_y=True,
    )
    fig.add_vline(x=chosen, line={"color": "#333333", "dash": "dash", "width": 1})
    fig.update_xaxes(title="microbatches", type="log", tickvals=xs, ticktext=[str(x) for x in xs])
    fig.update_yaxes(title=f"step time ({unit})", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(
        title="bubble (%)", range=[0, 100], tickvals=[0, 25, 50, 75, 100], showgrid=False, secondary_y=True
    )
    fig = titled(  # two lines: the whole title fits half a 1,280 px page
        fig,
        "Step time and bubble by microbatch count<br><sup>each count planned as the command line plans it; "
        "dashed: chosen</sup>",
    )
    return fig.update_layout(margin={"t": 60})


def stage_span(graph: Graph, nodes: Sequence[str]) -> str:
    """What a stage holds in a person's words: its first and last layers (``model.layers.0 ->
    model.layers.9``, with "embedding" or "head" where it also holds operations before the first
    block or after the last) where the model has numbered blocks, else its first and last
    operations. O(len(nodes))."""
    index = graph.index
    blocks = [block_of(graph, index[n]) for n in nodes if n in index]
    named = [b for b in blocks if b]
    arrow = " \u2192 "
    if not named:
        return f"{nodes[0]}{arrow}{nodes[-1]}" if len(nodes) > 1 else str(nodes[0])
    first, last = named[0], named[-1]
    lead = "" if blocks[0] else "embedding, "
    tail = "" if blocks[-1] else ", head"
    return f"{lead}{first}{'' if first == last else arrow + last}{tail}"


def stage_memory_figure(pp: PipelinePlan, capacity: Sequence[int]) -> go.Figure:
    """Per stage: weights (with gradients and optimizer state when training) and the stashed
    activations, stacked, against the capacity of the stage's device (``capacity[stage]``). When
    stages share a device (interleaved schedules), one bar a device: its stages' parts stacked,
    each named, against its capacity (NOTE: [Stages sharing a device])."""
    weights = [m - s for m, s in zip(pp.stage_memory_bytes, pp.stage_stash_bytes)]
    shared = len(set(pp.device_ids)) < len(pp.stages)
    if shared:
        devices = list(dict.fromkeys(pp.device_ids))
        labels = [f"device {d}" for d in devices]
        column = [devices.index(d) for d in pp.device_ids]
        limits = [capacity[pp.device_ids.index(d)] for d in devices]
        held = [pp.device_memory_bytes()[d] for d in devices]
    else:
        labels = [f"stage {s}" for s in range(len(pp.stages))]
        column = list(range(len(pp.stages)))
        limits = list(capacity)
        held = list(pp.stage_memory_bytes)
    unit, scale = byte_unit(max([*held, *limits], default=0))
    fig = go.Figure()
    # One pair of traces a stage when stages share a device (stacked in stage order), else one pair.
    groups = [[s] for s in range(len(pp.stages))] if shared else [list(range(len(pp.stages)))]
    for group in groups:
        for name, values, color in (
            ("weights" + (" + gradients + optimizer" if pp.training else ""), weights, "#72b7b2"),
            ("stashed activations", pp.stage_stash_bytes, "#b279a2"),
        ):
            fig.add_bar(
                x=[labels[column[s]] for s in group],
                y=[values[s] / scale for s in group],
                name=name,
                legendgroup=name,
                showlegend=group[0] == 0,
                marker={"color": color, "line": {"color": "white", "width": 1 if shared else 0}},
                hovertext=[f"stage {s}: {format_bytes(values[s])}" for s in group],
                hoverinfo="text",
            )
    fig.add_scatter(
        x=labels,
        y=[c / scale for c in limits],
        name="device capacity",
        mode="markers",
        marker={"symbol": "line-ew-open", "size": 36, "color": "#333333", "line": {"width": 3}},
    )
    fig.update_layout(barmode="stack")
    top = max([*held, *limits], default=0) / scale
    fig.update_yaxes(title=f"memory ({unit})", range=[0, top * 1.08 or 1])  # the capacity marks always drawn
    return titled(fig, "Memory per device, its stages together" if shared else "Memory per stage against its device")


def run_figure(stages: Sequence[int], simulated_s: Sequence[float], measured_s: Sequence[float]) -> go.Figure:
    """A real pipeline run's forward per microbatch on each stage beside the simulation's."""
    unit, scale = time_unit(max([*simulated_s, *measured_s], default=0.0))
    labels = [f"S{s}" for s in stages]
    fig = go.Figure()
    fig.add_bar(x=labels, y=[t / scale for t in simulated_s], name="simulated", marker={"color": "#9ecae1"})
    fig.add_bar(x=labels, y=[t / scale for t in measured_s], name="measured", marker={"color": "#3182bd"})
    fig.update_layout(barmode="group")
    fig.update_yaxes(title=f"forward per microbatch ({unit})")
    fig.update_xaxes(title="stage")
    return titled(fig, "Simulated against measured, per stage")
