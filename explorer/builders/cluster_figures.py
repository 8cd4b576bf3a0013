"""Pure builders for the Plan a cluster page: the Pareto chart of devices against step time, a
layout's memory against the device and its time by cause, the best layouts as a table, and a
layout's engine config as the text of a file (the tables live in :mod:`explorer.builders.cluster_tables`).
No Streamlit here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import plotly.graph_objects as go

from explorer.builders.cluster_tables import collectives_table, layouts_table
from explorer.builders.figures import dollars, round_ticks
from explorer.builders.text import counted
from partitioner.cluster import bands
from partitioner.units import GiB, format_bytes

if TYPE_CHECKING:
    from partitioner.pipeline.simulator import Simulation

from partitioner.cluster import ClusterPlan, LayoutResult

__all__ = [
    "pareto_figure",
    "memory_figure",
    "time_figure",
    "layouts_table",
    "CLOUD_PER_SIZE",
    "MEMORY_KINDS",
    "collectives_table",
    "rank_memory_figure",
    "rank_stash",
    "scaling_figure",
]

CLOUD_PER_SIZE = 200  # grey points drawn at each device count (thinned evenly over step time)
# The memory kinds in stacking order, each with one colour on every chart.
MEMORY_KINDS = {
    "weights": "#4c78a8",
    "gradients": "#f58518",
    "optimizer": "#e45756",
    "gathered layer": "#ff9da6",
    "activations": "#72b7b2",
    "recomputed layer": "#9d755d",
    "kv_cache": "#54a24b",
    "headroom": "#bab0ac",
}
_ANSWERS = (
    ("fewest devices", "fewest_devices", "diamond"),
    ("fastest", "fastest", "star"),
    ("cheapest", "cheapest", "square"),
)


def _thin(results: Sequence[LayoutResult], per_size: int) -> list[LayoutResult]:
    """At most ``per_size`` of the layouts at each device count, evenly over their step times
    (``results`` fastest first), so the chart stays light with tens of thousands of layouts."""
    sizes: dict[int, list[LayoutResult]] = {}
    for r in results:
        sizes.setdefault(r.devices, []).append(r)
    kept: list[LayoutResult] = []
    for devices in sorted(sizes):
        rs = sizes[devices]
        if len(rs) <= per_size:
            kept += rs
        else:
            kept += [rs[round(i * (len(rs) - 1) / (per_size - 1))] for i in range(per_size)]
    return kept


def _band_bars(results: Sequence[LayoutResult]) -> dict[str, object]:
    """Plotly's asymmetric error bars from each result's step band (zero where it has none)."""
    return dict(
        type="data",
        symmetric=False,
        array=[r.step_high_s - r.step_s for r in results],
        arrayminus=[r.step_s - r.step_low_s for r in results],
        color="#888888",
        thickness=1.5,
    )


def pareto_figure(found: ClusterPlan, step_label: str = "step time", per_size: int = CLOUD_PER_SIZE) -> go.Figure:
    """Fitting layouts (grey, thinned to ``per_size`` a device count), the fastest at each device
    count (``found.by_devices``, coloured by cost per million tokens) and the three answers;
    devices (log) against ``step_label`` in seconds (log)."""
    fig = go.Figure()
    cloud = _thin(found.fitting, per_size)
    fig.add_trace(
        go.Scatter(
            x=[r.devices for r in cloud],
            y=[r.step_s for r in cloud],
            mode="markers",
            marker=dict(color="#cccccc", size=5),
            name="other fitting layouts",
            text=[r.layout.label() for r in cloud],
            hoverinfo="text+x+y",
        )
    )
    best = list(found.by_devices.values())
    fig.add_trace(
        go.Scatter(
            x=[r.devices for r in best],
            y=[r.step_s for r in best],
            error_y=_band_bars(best),
            mode="lines+markers",
            name="fastest at each size (bars: the band)",
            text=[
                f"{r.layout.label()}<br>{step_label} {bands.seconds_band(r.step_low_s, r.step_high_s)}<br>"
                f"{bands.dollars_band(*bands.cost_band(r, r.cost_per_million_tokens))} per million tokens<br>"
                f"limit: {r.limit}"
                for r in best
            ],
            hoverinfo="text+x+y",
            line=dict(color="#888888"),
            marker=dict(
                size=11,
                color=[r.cost_per_million_tokens for r in best],
                colorscale="Viridis",
                colorbar=dict(title="$ / million tokens"),
                showscale=True,
                line=dict(width=1, color="#333"),
            ),
        )
    )
    for title, attr, symbol in _ANSWERS:
        r = getattr(found, attr)
        if r is not None:
            fig.add_trace(
                go.Scatter(
                    x=[r.devices],
                    y=[r.step_s],
                    mode="markers",
                    name=f"{title}: {r.layout.label()}",
                    marker=dict(symbol=symbol, size=16, color="rgba(0,0,0,0)", line=dict(width=2, color="#d62728")),
                    text=[f"{step_label} {bands.seconds_band(r.step_low_s, r.step_high_s)}"],
                    hoverinfo="name+text+x",
                )
            )
    fig.update_layout(
        title=f"Devices against {step_label} (log scales)",
        xaxis_title="devices (count, log)",
        yaxis_title=f"{step_label} (s, log)",
        height=460,
        legend=dict(orientation="h", y=-0.25),
    )
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


def scaling_figure(found: ClusterPlan, step_label: str = "step time", stops: int | None = None) -> go.Figure:
    """The fastest layout at each device count: ``step_label`` (left axis, log) and cost per
    million tokens (right axis) against devices (log), with a dashed line where adding devices
    stops paying (``stops``: :func:`partitioner.cluster.layout_search.stops_paying`)."""
    best = list(found.by_devices.values())
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[r.devices for r in best],
            y=[r.step_s for r in best],
            error_y=_band_bars(best),
            mode="lines+markers",
            name=f"{step_label} (bars: the band)",
            text=[f"{r.layout.label()}<br>{bands.seconds_band(r.step_low_s, r.step_high_s)}" for r in best],
            hoverinfo="text+x",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[r.devices for r in best],
            y=[r.cost_per_million_tokens for r in best],
            mode="lines+markers",
            name="$ per million tokens",
            yaxis="y2",
            line=dict(dash="dot", color="#e45756"),
            text=[
                f"{bands.dollars_band(*bands.cost_band(r, r.cost_per_million_tokens))} per million tokens" for r in best
            ],
            hoverinfo="text+x",
        )
    )
    ticks = round_ticks(max((r.cost_per_million_tokens for r in best), default=0.0))
    if stops is not None:
        fig.add_vline(
            x=stops,
            line_dash="dash",
            line_color="#888888",
            annotation_text=f"more than {counted(stops, 'device')} pays little",
        )
    fig.update_layout(
        title=f"{step_label[0].upper()}{step_label[1:]} and cost against devices (the fastest at each size)",
        xaxis=dict(title="devices (count, log)", type="log"),
        yaxis=dict(title=f"{step_label} (s, log)", type="log"),
        yaxis2=dict(
            title="$ per million tokens",
            overlaying="y",
            side="right",
            range=[0, ticks[-1]],
            tickmode="array",  # round dollars, not Plotly's ticks synced to the left axis (0.021, 0.232, ...)
            tickvals=ticks,
            ticktext=[dollars(t) for t in ticks],
            showgrid=False,
        ),
        height=400,
        legend=dict(orientation="h", y=-0.25),
    )
    return fig


def memory_figure(result: LayoutResult, capacity_bytes: int) -> go.Figure:
    """The fullest device's memory by kind (weights, gradients, optimizer, activations, KV cache,
    headroom), stacked in GiB, against the device's capacity (a dashed line)."""
    fig = go.Figure()
    kinds = [k for k in MEMORY_KINDS if k in result.memory] + sorted(k for k in result.memory if k not in MEMORY_KINDS)
    for kind in kinds:
        value = result.memory[kind]
        fig.add_trace(
            go.Bar(
                x=["per device"],
                y=[value / GiB],
                name=kind.replace("_", " "),
                marker_color=MEMORY_KINDS.get(kind),
                hovertemplate=f"{kind.replace('_', ' ')}: %{{y:.2f}} GiB<extra></extra>",
            )
        )
    fig.add_hline(
        y=capacity_bytes / GiB,
        line_dash="dash",
        line_color="#d62728",
        annotation_text=f"device memory {capacity_bytes / GiB:.0f} GiB",
    )
    used = result.memory_bytes / capacity_bytes if capacity_bytes else 0.0
    fig.update_layout(
        barmode="stack",
        title=f"Memory per device: {used:.0%} of it<br><sup>{result.layout.label()}</sup>",  # fits half of 1,280 px
        yaxis_title="memory (GiB)",
        xaxis_title="the fullest device",
        height=400,
    )
    return fig


def time_figure(result: LayoutResult, inference: bool = False) -> go.Figure:
    """Where the time goes, one bar per cause in seconds: a training step's, or for inference
    the prompt's prefill and each generated token's decode and communication."""
    parts = dict(result.parts_s)
    fig = go.Figure(
        go.Bar(
            x=[k for k in parts],
            y=list(parts.values()),
            marker_color="#4c78a8",
            hovertemplate="%{x}: %{y:.4g} s<extra></extra>",
        )
    )
    what = "inference: prefill, and per generated token" if inference else "one training step"
    total = "time to first token" if inference else "step"
    fig.update_layout(
        title=f"Time by cause: {total} {bands.seconds_band(result.step_low_s, result.step_high_s)}"
        f"<br><sup>{what}; {result.layout.label()}</sup>",
        yaxis_title="time (s)" if inference else "time per step (s)",
        xaxis_title="cause",
        height=400,
    )
    return fig


TIMELINE_ACTIONS = 2048  # stages x microbatches drawn at most (a Plotly bar per action)


def _simulate(r: LayoutResult) -> Simulation | None:
    """The opened layout's schedule simulated at the planner's per-microbatch forward and backward
    of a stage (equal stages); None without a pipeline or with more actions than can be drawn."""
    from partitioner.pipeline.schedules import virtual_stages
    from partitioner.pipeline.simulator import simulate

    lay = r.layout
    if lay.pp < 2 or r.stage_s == (0.0, 0.0) or lay.pp * r.microbatches > TIMELINE_ACTIONS:
        return None
    v = virtual_stages(lay.schedule, lay.virtual)
    forward, backward = r.stage_s
    return simulate(
        [forward / v] * (lay.pp * v),
        r.microbatches,
        lay.schedule,
        backward_s=[backward / v] * (lay.pp * v),
        virtual=lay.virtual,
    )


def layout_timeline(r: LayoutResult) -> go.Figure | None:
    """The opened layout's pipeline schedule as the Pipeline page draws it (:func:`_simulate`);
    None without a pipeline or when it has more actions than can be drawn."""
    from explorer.builders.pipeline_figures import schedule_figure

    sim = _simulate(r)
    return None if sim is None else schedule_figure(sim, r.layout.pp)


def rank_stash(r: LayoutResult) -> list[float] | None:
    """The most microbatches each pipeline rank holds at once, all its chunks together, in
    microbatches of its whole share (the Pipeline page's simulator; the planner keeps rank 0's:
    NOTE: [Interleaved stash]); None when the schedule is too long to simulate."""
    sim = _simulate(r)
    return None if sim is None else list(sim.rank_peak_stash)


def rank_memory_figure(r: LayoutResult, capacity_bytes: int) -> go.Figure | None:
    """Training memory on each pipeline rank: the model states (equal stages) and the activations
    of the microbatches its stages hold at once (:func:`rank_stash`), stacked in GiB, against the
    device; None without a pipeline or when the schedule is too long to simulate."""
    stash = rank_stash(r)
    if stash is None:
        return None
    per_mb = r.memory.get("activations", 0.0) / max(stash[0], 1)  # the planner's figure is rank 0's
    fig = go.Figure()
    labels = [f"rank {k}" for k in range(len(stash))]
    for kind in MEMORY_KINDS:
        if kind not in r.memory:
            continue
        values = [per_mb * held if kind == "activations" else r.memory[kind] for held in stash]
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[v / GiB for v in values],
                name=kind.replace("_", " "),
                marker_color=MEMORY_KINDS[kind],
                hovertext=[
                    f"{kind.replace('_', ' ')}: {format_bytes(v)}"
                    + (f" ({held:g} microbatches held)" if kind == "activations" else "")
                    for v, held in zip(values, stash)
                ],
                hoverinfo="text",
            )
        )
    fig.add_hline(
        y=capacity_bytes / GiB,
        line_dash="dash",
        line_color="#d62728",
        annotation_text=f"device memory {capacity_bytes / GiB:.0f} GiB",
    )
    fig.update_layout(
        barmode="stack",
        title=f"Training memory on each pipeline rank: {r.layout.label()}",
        yaxis_title="memory (GiB)",
        xaxis_title="pipeline rank (each with tp x dp devices alike)",
        height=400,
    )
    return fig
