"""Plan a cluster: which accelerator, how many, laid out how (pipeline x tensor x data parallel,
ZeRO, recomputation), how fast and at what cost, for the sidebar's model
(:mod:`partitioner.cluster`); each answer exports as torchtitan, Megatron-LM or DeepSpeed config."""

from __future__ import annotations

import dataclasses
from typing import Any

import streamlit as st

from explorer import cluster_panels, loading, state
from explorer.builders import cluster_figures
from explorer.builders.cluster_tables import limited_by, token_breakdown
from explorer.builders.text import counted, md
from explorer.cluster_inputs import hardware_cluster, hardware_ui, min_cut_ui, tokens_in_words, workload_ui
from explorer.views import review_job
from partitioner import Graph, cluster, format_bytes, format_seconds
from partitioner.cluster import bands
from partitioner.cluster.layout_search import at_the_edge, stops_paying
from partitioner.interop.engines import EXPORT_ENGINES, engine_file

ENGINE_LABELS = {
    "torchtitan": "torchtitan up to 0.2 (TOML)",
    "torchtitan-args": "torchtitan 0.3 (arguments)",
    "megatron": "Megatron-LM (arguments)",
    "deepspeed": "DeepSpeed (JSON)",
}


@st.cache_data(max_entries=8, show_spinner=False)
def _profile(_graph: Graph, fingerprint: str, name: str) -> cluster.ModelProfile:
    del fingerprint  # the cache key: the graph itself is not hashed
    return cluster.profile(_graph, name)


@st.cache_data(max_entries=16, show_spinner=False)
def _search(
    _graph: Graph,
    fingerprint: str,
    name: str,
    work: cluster.Workload,
    accelerator: str,
    per_node: int,
    max_nodes: int,
    intra: str,
    inter: str,
    headroom_gib: float,
    price: float,
    host_gib: float = 2048.0,
    min_cut: tuple[tuple[float, float, float], ...] = (),
) -> cluster.ClusterPlan:
    """Every layout of every size (a few seconds for Llama-3-70B over 8 to 512 devices), cached
    by the inputs and the graph's fingerprint for every session of the server (a second session
    asking the same waits for the first's answer, not a search of its own). The progress bar is
    drawn inside, so a cached answer replays it to its end and empties it."""
    hw = dict(accelerator=accelerator, per_node=per_node, intra=intra, inter=inter, headroom_gib=headroom_gib)
    target = hardware_cluster({**hw, "price": price, "host_gib": host_gib})
    prof = dataclasses.replace(_profile(_graph, fingerprint, name), min_cut=min_cut, _cache={})
    bar = st.progress(0.0, text="Searching the layouts...")

    def show(at: cluster.SearchProgress) -> None:
        bar.progress(
            min(1.0, at.tried / max(at.total, 1)),
            text=f"Searching the layouts: {at.tried:,} of {at.total:,} tried ({at.devices:,} devices), "
            f"{at.fitting:,} fit, {at.elapsed_s:.1f} s",
        )

    try:
        return cluster.search(prof, work, target, cluster.device_counts(per_node, max_nodes), progress=show)
    finally:
        bar.empty()


def _answer(title: str, r: cluster.LayoutResult | None, work: cluster.Workload, column: Any, within: list[str]) -> None:
    """One answer: its device count, every time as its band, and the other answers whose band
    overlaps its own (``within``)."""
    if r is None:
        return
    serving = work.kind == "inference"
    column.metric(
        title,
        f"{r.devices} device{'s' if r.devices != 1 else ''}",
        help="the fastest layout at this size" if title == "Fewest devices" else None,
    )
    column.caption(
        md(
            f"{'Time to first token ' if serving else ''}{bands.seconds_band(r.step_low_s, r.step_high_s)}"
            f"{'' if serving else ' a step'}; {r.layout.label()}; "
            f"{bands.dollars_band(*bands.cost_band(r, r.cost_per_million_tokens))} per million tokens; "
            f"MFU {bands.mfu_band(r)}; {limited_by(r, serving)}"
            + (f"; {bands.host_memory_line(r)}" if r.layout.offload else "")
        )
    )
    if work.kind == "training" and r.tokens_per_s:
        dollars = bands.cost_band(r, r.cost_per_million_tokens * work.train_tokens / 1e6)
        column.caption(
            md(
                f"{tokens_in_words(work.train_tokens)} tokens: {bands.duration_band(*bands.run_days(r, work.train_tokens))}, "
                f"{bands.dollars_band(*dollars)}"
            )
        )
    elif r.extra:
        low, high = (v / r.tokens_per_s if r.tokens_per_s else 0.0 for v in r.tokens_per_s_band)
        per_sequence, per_device = (r.extra[f"tokens_per_s_per_{k}"] for k in ("sequence", "device"))
        column.caption(
            f"{bands.band(low * per_sequence, high * per_sequence)} tokens/s per sequence, "
            f"{bands.band(low * per_device, high * per_device)} tokens/s per device"
        )
        column.caption(md(token_breakdown(r)))
    if r.band_s[1] <= 0:  # the library gave this answer no band (yet): say so rather than look sure
        column.caption("A point: the planner gives no band for this answer.")
    if within:
        column.caption(f"Within the band of the {' and the '.join(within)}: neither is surely faster.")


def _summary(prof: cluster.ModelProfile, found: cluster.ClusterPlan) -> None:
    count = prof.param_count
    size = f"{count / 1e9:.3g} B" if count >= 1e8 else f"{count / 1e6:.3g} M" if count >= 1e5 else f"{count}"
    refused = "; ".join(f"{n:,} refused: {why}" for why, n in sorted(found.refused.items()))
    experts = (
        f"a mixture of {prof.experts} experts, {prof.experts_per_token} a token, in {prof.moe_layers} layers "
        f"({prof.expert_param_count / max(1, prof.param_count):.0%} of the parameters: layouts with expert "
        "parallelism ep split them over the data-parallel group); "
        if prof.experts
        else ""
    )
    st.caption(
        md(
            f"{size} parameters ({format_bytes(prof.weight_bytes)} as traced), {prof.layers} layers; {experts}"
            f"searched {found.evaluated:,} layouts in {found.search_s:.2f} s, {len(found.fitting):,} fit"
            + (f" ({refused})" if refused else "")
            + "."
        )
    )


def _render_answers(found: cluster.ClusterPlan, work: cluster.Workload) -> None:
    """The answers side by side (the three, and serving's knee of price and speed), each time as its
    band, then what the times assume."""
    answers = [(title, attr) for title, attr in bands.ANSWERS if attr != "knee" or found.knee is not None]
    cols = st.columns(len(answers))
    within = bands.within_band(found)
    for col, (title, attr) in zip(cols, answers):
        _answer(title.capitalize(), getattr(found, attr), work, col, within.get(title, []))
    assumed = bands.assumptions([getattr(found, attr) for _, attr in bands.ANSWERS])
    if assumed:
        st.caption(md(f"Times are bands (low-high, from the spreads this project measured) and assume: {assumed}."))


TABLE_COLUMNS = {  # short headers and widths in pixels: every column in view at 1,280 px
    "devices": st.column_config.NumberColumn("devices", width=62),
    "layout": st.column_config.TextColumn("layout", width=212),
    "step": None,  # its header names the work's time (_layouts_table)
    "mfu_text": st.column_config.TextColumn("MFU", width=80),
    "memory_gib": st.column_config.NumberColumn("GiB", format="%.1f", width=44, help="memory a device holds"),
    "limit": st.column_config.TextColumn("limit", width=74),
    "usd_text": st.column_config.TextColumn("$/M tok", width=104, help="dollars per million tokens"),
    "train_text": st.column_config.TextColumn("run", width=88, help="the training run's time (tokens to train)"),
    "train_usd_text": st.column_config.TextColumn("run $", width=90, help="the training run's cost"),
}


def _best_layouts(found: cluster.ClusterPlan) -> list[cluster.LayoutResult]:
    """The three answers, the fastest at each size, then the fastest overall: fastest first."""
    picked: dict[cluster.Layout, cluster.LayoutResult] = {}
    for r in (found.fastest, found.fewest_devices, found.cheapest, *found.by_devices.values(), *found.best(20)):
        if r is not None:
            picked.setdefault(r.layout, r)
    return sorted(picked.values(), key=lambda r: (r.step_s, r.devices))


def _layouts_table(best: list[cluster.LayoutResult], work: cluster.Workload) -> None:
    """The layouts as a table, each time as its band (low and high stay in the table's data)."""
    training = work.kind == "training"
    table = cluster_figures.layouts_table(best, work.train_tokens if training else None)
    step = "step" if training else "first token"
    config = {
        **TABLE_COLUMNS,
        "step": st.column_config.TextColumn(step, width=70, help="low-high: the band of the prediction"),
    }
    shown = [c for c in TABLE_COLUMNS if c in table.columns]
    st.dataframe(table, hide_index=True, column_order=shown, column_config=config)


def _written_layout(
    written: str, work: cluster.Workload, prof: cluster.ModelProfile, target: cluster.Cluster
) -> cluster.LayoutResult | None:
    """A written layout evaluated as the search evaluates it; None when it does not read (said)."""
    from partitioner import PartitionError
    from partitioner.cluster.layouts import check_layout
    from partitioner.cluster.run.compose import parse_layout

    try:
        layout = parse_layout(written)
        check_layout(prof, layout, work)
        mine = cluster.evaluate(prof, work, target, layout)
    except PartitionError as exc:
        cut = written if len(written) <= 60 else written[:57] + "..."
        st.error(f"Cannot open {md(cut)}: {md(exc)}")
        return None
    if not mine.fits:
        st.warning(
            md(
                f"{mine.layout.label()} does not fit: {format_bytes(mine.memory_bytes)} a device of "
                f"{format_bytes(target.accelerator.memory_bytes)}. Its figures below show by how much."
            )
        )
    return mine


def _render_table(
    found: cluster.ClusterPlan, work: cluster.Workload, prof: cluster.ModelProfile, target: cluster.Cluster
) -> cluster.LayoutResult:
    """The best layouts as a table; returns the one opened below it: chosen from them, or written
    (any layout, fitting or not, evaluated as the search evaluates it)."""
    best = _best_layouts(found)
    _layouts_table(best, work)
    labels = [f"{r.devices} device{'s' if r.devices != 1 else ''}: {r.layout.label()}" for r in best]
    left, right = st.columns([3, 2])
    chosen = best[labels.index(left.selectbox("Open a layout", labels, key="cl_open"))]
    written = right.text_input(
        "...or write one",
        key="cl_write",
        bind="query-params",  # in the link, kept across pages
        persist_state="session",
        max_chars=500,  # a layout is a few words (partitioner.cluster.words.MAX_LAYOUT_CHARS)
        placeholder="e.g. dp4 tp2 pp2 1f1b mb2 zero1",
        help="words: dp, tp, pp, cp, ep, mb (sequences a microbatch) with a number, zero0-3, shard8 (HSDP: ZeRO "
        "over 8 ranks, replicated across), gpipe / 1f1b / interleaved_1f1b (v4: 4 chunks a rank), recompute-selective "
        "/ -full / -layers-4, no-sp (no sequence parallelism), offload (the optimizer on the host), fp32-grads "
        "(DeepSpeed's fp32 gradient partition); what is left out is 1 or none",
    )
    mine = _written_layout(written, work, prof, target) if written.strip() else None
    return chosen if mine is None else mine


def _schedule_tab(chosen: cluster.LayoutResult, training: bool) -> None:
    timeline = cluster_figures.layout_timeline(chosen) if training else None
    if timeline is not None:
        st.plotly_chart(timeline, key="cl_timeline")
        st.caption(
            md(
                f"{chosen.layout.label()}: one step's pipeline schedule as the Pipeline page simulates it, "
                "each stage at this layout's forward and backward of a microbatch (tensor-parallel and "
                f"stage transfers included); the simulator's step is {format_seconds(chosen.step_s)} "
                "less the exposed gradient reduction."
            )
        )
    elif chosen.layout.pp > 1 and training:
        st.caption(
            f"The schedule has {chosen.layout.pp * chosen.microbatches:,} stage-microbatch actions: too "
            "many to draw; the step comes from the schedule's closed form."
        )
    else:
        st.caption("No pipeline stages in this layout" + ("." if training else " (inference)."))


def _rank_memory_tab(chosen: cluster.LayoutResult, training: bool, capacity: int) -> None:
    figure = cluster_figures.rank_memory_figure(chosen, capacity) if training else None
    if figure is not None:
        st.plotly_chart(figure, key="cl_rank_memory")
        st.caption(
            "Each rank holds the same share of the model states (equal stages); activations are what "
            "its stages hold at once, all together, in the simulated schedule (interleaved: its chunks "
            "peak at different times). The planner checks rank 0, which holds the most."
        )
    else:
        st.caption("Every device holds the same memory in this layout: the chart above is each device's.")


def _collectives_tab(rows: list[Any]) -> None:
    if rows:
        st.dataframe(cluster_figures.collectives_table(rows), hide_index=True, width="stretch")
        st.caption(
            "Counts per step (inference: the prompt's prefill, then each generated token) on the "
            "fullest device: Megatron-LM's two all-reduces per layer each way, GShard's all-to-alls, "
            "the ZeRO paper's gradient reduction (1.5 times with ZeRO-3); ring collectives priced on "
            "each group's link. Their totals are the time chart's communication bars."
        )
    else:
        st.caption("One device, or data parallelism without gradients to reduce: nothing to communicate.")


def _export_tab(chosen: cluster.LayoutResult, work: cluster.Workload, training: bool) -> None:
    if not training:
        st.caption("Inference layouts are exported with the training engines' parallelism settings.")
    cols = st.columns(len(EXPORT_ENGINES))
    for col, engine in zip(cols, EXPORT_ENGINES):
        name, text, mime = engine_file(engine, chosen.layout, work)
        col.download_button(
            f"{ENGINE_LABELS.get(engine, engine)} config", text, file_name=name, mime=mime, key=f"cl_dl_{engine}"
        )


def _render_layout(
    chosen: cluster.LayoutResult,
    work: cluster.Workload,
    target: cluster.Cluster,
    prof: cluster.ModelProfile,
    graph: Graph,
    config: state.PlanConfig,
) -> None:
    """The opened layout in the other pages' views: memory and time by cause, its schedule, each
    pipeline rank's memory, its collectives, its stage DAG and its engine configs."""
    capacity = target.accelerator.memory_bytes
    training = work.kind == "training"
    left, right = st.columns(2)
    left.plotly_chart(cluster_figures.memory_figure(chosen, capacity), key="cl_memory")
    right.plotly_chart(cluster_figures.time_figure(chosen, not training), key="cl_time")
    if bands.host_memory_line(chosen):
        left.caption(bands.host_memory_line(chosen).capitalize() + ".")
    if chosen.assumes:
        right.caption(md(f"The time assumes: {'; '.join(chosen.assumes)}."))
    schedule, memory, comms, dag, export, here = st.tabs(
        ["Pipeline schedule", "Memory per rank", "Collectives", "Stage DAG", "Export", "Run it here"]
    )
    with schedule:
        _schedule_tab(chosen, training)
    with memory:
        _rank_memory_tab(chosen, training, capacity)
    with comms:
        _collectives_tab(cluster.collectives(prof, work, target, chosen.layout))
    with dag:
        cluster_panels.stage_dag(chosen, graph, target)
    with export:
        _export_tab(chosen, work, training)
    with here:
        if training:
            cluster_panels.run_here(chosen.layout, graph, prof, config)
        else:
            st.caption("Runs here are training steps: choose training above.")


def main() -> None:
    loaded = loading.page_inputs()
    if loaded is None:
        return
    config, graph = loaded
    st.markdown(f"#### Plan a cluster for {md(config.model.label)}")
    prof = _profile(graph, graph.fingerprint(), config.model.label)
    work = workload_ui(prof.element_bytes, graph.fingerprint())
    hw = hardware_ui(work.kind)
    review_job.render(prof, config.model.label, hw)
    min_cut = min_cut_ui(graph, prof) if work.kind == "training" else ()
    try:
        found = _search(graph, graph.fingerprint(), config.model.label, work, **hw, min_cut=min_cut)
    except ValueError as exc:  # a setting the planner refuses (PartitionError): its message names it
        st.error(f"Cannot plan this cluster: {md(exc)}")
        return
    _summary(prof, found)
    if not found.fitting:
        st.warning("No layout fits: allow more nodes, a larger accelerator, a smaller batch, or less headroom.")
        return
    _render_answers(found, work)
    step_label = "time to first token" if work.kind == "inference" else "step time"
    searched = cluster.device_counts(hw["per_node"], hw["max_nodes"])
    edge = at_the_edge(found, searched)
    if edge:
        st.warning(
            md(
                f"{', '.join(a.capitalize() for a in edge)}: {max(searched):,} devices, the largest size "
                f"searched ({hw['max_nodes']} nodes of {hw['per_node']}): more devices may do better. Raise "
                "*Up to nodes* to see where adding devices stops paying."
            )
        )
    st.plotly_chart(cluster_figures.pareto_figure(found, step_label), key="cl_pareto")
    stops = stops_paying(found)
    st.plotly_chart(cluster_figures.scaling_figure(found, step_label, stops))
    if stops is not None:
        st.caption(
            md(
                f"From {counted(stops, 'device')} on, the next size searched cuts the {step_label} by less than 10 % "
                "or costs half as much again per token: adding devices stops paying there."
            )
        )
    target = hardware_cluster(hw)
    chosen = _render_table(found, work, prof, target)
    _render_layout(chosen, work, target, prof, graph, config)
    st.caption(
        "How the figures are made: model states by the ZeRO paper's formulas (ZeRO-3 also holds the layer "
        "it gathers, as DeepSpeed's estimators count it), activations as autograd keeps them (the traced "
        "graph's saved values, Korthikanti et al.'s accounting: split by tensor parallelism, the rest by "
        "sequence parallelism; full recomputation keeps each layer's input per microbatch in flight and "
        "one layer's working set) times the microbatches the first rank holds at once, all its chunks "
        "together (the Pipeline page's simulator; interleaving adds Megatron-LM's 1 + (pp - 1)/(pp v)), time "
        "from the graph, NCCL's ring, tree or one-shot all-reduce by size on each link and the simulated "
        "schedule; expert parallelism adds two all-to-alls per MoE layer each way, context parallelism a "
        "ring of keys and values; kernel launches as the engine named above makes them (eager: the host's "
        "measured cost per op, 6 to 17 us; CUDA graphs: none from the host). Left out: uneven expert routing."
    )


main()
