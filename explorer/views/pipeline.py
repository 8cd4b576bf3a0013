"""Pipeline: the sidebar's model cut into pipeline stages for a schedule (torch.distributed.
pipelining's GPipe, 1F1B, Interleaved 1F1B, zero bubble); the schedule's timeline with its
bubbles, the step time against the microbatch count, each stage's memory, the split against the
ones people use, and a real run on local processes."""

from __future__ import annotations

import hashlib

import streamlit as st

from explorer import compute, graph_panels, loading, panels
from explorer.builders import pipeline_figures, pipeline_tables
from explorer.builders.text import md
from explorer.fields import bounded_number
from partitioner import Graph, pipeline
from partitioner.pipeline.schedules import SCHEDULES, stages_per_rank
from partitioner.pipeline.stages import BOTTLENECK_NOTE
from partitioner.units import format_change, format_seconds

PIPELINE_RUNS = "pipeline_runs"  # pipeline plan JSON hash -> its last real run
TRAINING = pipeline_tables.TRAINING


def _controls(device_count: int) -> tuple[int, int, str, str | None]:
    cols = st.columns(4)
    # held in the link by Streamlit's binding, which keeps a widget's own default out of the URL:
    # the defaults are the widgets' (value=, index=), not set in session state
    # a count out of range (more than the sidebar's devices, typed or since fewer) is said, not applied
    ranks = bounded_number(
        cols[0],
        "Devices in the pipeline",
        1,
        max(1, device_count),
        fallback=min(4, device_count),
        value=min(4, device_count),
        step=1,
        key="pp_ranks",
        bind="query-params",
        persist_state="session",
        help="the first N devices of the sidebar, one pipeline rank each",
    )
    microbatches = bounded_number(
        cols[1],
        "Microbatches",
        1,
        1024,
        fallback=8,
        value=8,
        step=1,
        key="pp_microbatches",
        bind="query-params",
        persist_state="session",
        help="the batch is cut into this many; torch's schedules take: gpipe any "
        "count, 1f1b at least one per stage, interleaved and zero bubble a "
        "multiple of max(1, microbatches // devices)",
    )
    schedule = cols[2].selectbox(
        "Schedule",
        list(SCHEDULES),
        index=1,  # 1f1b
        key="pp_schedule",
        bind="query-params",
        persist_state="session",
        help="interleaved and zero-bubble schedules hold two stages per device",
    )
    training = cols[3].selectbox(
        "Work",
        list(TRAINING),
        key="pp_training",
        help="training adds the backward, gradients and optimizer state",
        bind="query-params",
        persist_state="session",
    )
    return int(ranks), int(microbatches), schedule, TRAINING[training]


STAGE_COLUMNS = {  # widths in pixels: the nine columns of an inference plan read whole at 1,280 px
    "Stage": st.column_config.TextColumn(width=52),
    "Device": st.column_config.TextColumn(width=72),
    "Ops": st.column_config.NumberColumn(width=50, help="operations of the traced graph in the stage"),
    "Nodes": st.column_config.TextColumn(
        width=180,
        help="the stage's first and last layer (its first and last operation in a model without numbered blocks)",
    ),
    "Forward": st.column_config.TextColumn(width=75, help="forward time per microbatch"),
    "Backward": st.column_config.TextColumn(width=75, help="backward time per microbatch"),
    "Transfer out": st.column_config.TextColumn(width=90),
    "Memory": st.column_config.TextColumn(width=75),
    "Stashed": st.column_config.TextColumn(width=75, help="activations stashed for the microbatches in flight"),
    "Of device": st.column_config.TextColumn(width=75),
    "Device holds": st.column_config.TextColumn(
        width=95, help="the device's share held by all its stages (interleaved schedules put two on one)"
    ),
}


def _real_run(pp: pipeline.PipelinePlan, graph: Graph) -> None:
    key = hashlib.sha256(pp.to_json(indent=None).encode()).hexdigest()[:16]
    results = st.session_state.setdefault(PIPELINE_RUNS, {})
    with st.expander("Run on local processes", expanded=key in results):
        st.caption(
            "Runs these stages with torch.distributed.pipelining's own schedule, one process per "
            "device over gloo, on the model's example batch cut into the microbatches; checks the "
            "outputs (and when training, every gradient) against the model in one process."
        )
        why = panels.too_many_processes(len(set(pp.device_ids))) or pipeline_tables.why_not_runnable(pp, graph)
        if why:
            st.info(f"Cannot run this plan: {md(why)}.")
        if st.button("Run on local processes", key="pp_run", disabled=bool(why), help=why or None):
            done = panels.run_with_status(
                lambda progress: pipeline.run(pp, graph, graph.example_inputs or (), timeout_s=180, progress=progress)
            )
            if done is not None:
                results[key] = done
        result = results.get(key)
        if result is None:
            return
        same, verdict = pipeline_tables.run_verdict(result)
        (st.success if same else st.error)(verdict)
        stages = list(range(len(result.stage_forward_s)))
        st.plotly_chart(
            pipeline_figures.run_figure(stages, result.simulated_forward_s, result.stage_forward_s), key="pp_run_chart"
        )
        st.dataframe(pipeline_tables.run_table(result.simulated_forward_s, result.stage_forward_s), hide_index=True)
        st.caption(
            "Simulated times use the devices' speeds as described: with this machine's measured profile as "
            "the device type (`partition-explorer calibrate`, then `local` in the sidebar) they are this "
            "machine's; with a preset, expect a constant factor."
        )


def _headline(pp: pipeline.PipelinePlan, ranks: int, microbatches: int, training: str | None, seconds: float) -> None:
    """Step time and bubble beside the simple splits', and how the split was found."""
    equal = dict((name, step) for name, step, _ in pp.baselines)
    cols = st.columns(4)
    cols[0].metric("Step time", format_seconds(pp.step_time_s))
    cols[1].metric("Bubble", f"{pp.bubble_fraction:.1%}")
    for col, name in zip(cols[2:], ("equal layers", "by parameters")):
        if name in equal and pp.step_time_s > 0:
            gain = equal[name] / pp.step_time_s - 1
            col.metric(
                f"Split by {name}" if name == "parameters" else f"Split into {name}",
                format_seconds(equal[name]),
                format_change(gain, same="same step time"),
                delta_color="inverse" if gain >= 0.0005 else "off",
            )
    st.caption(
        f"{len(pp.stages)} stages on {ranks} device{'s' if ranks != 1 else ''}, {microbatches} "
        f"microbatches, {'training with ' + training if training else 'inference'}; split in "
        f"{format_seconds(seconds)} by an exact dynamic program over cut points (the slowest "
        "stage under each device's memory), simulated over the schedule's per-rank actions and kept "
        "unless a simple split below (equal layers, by parameters) that fits simulates faster."
    )


def main() -> None:
    inputs = loading.page_inputs()
    if inputs is None:
        return
    config, graph = inputs
    devices = config.device_list()
    st.markdown(f"#### Pipeline stages for {md(config.model.label)}")
    ranks, microbatches, schedule, training = _controls(len(devices))
    per_rank = stages_per_rank(schedule)
    with st.spinner("Splitting into stages..."):
        result = compute.pipeline_plan(config, ranks, ranks * per_rank, microbatches, schedule, training)
    if result.plan is None:
        st.error(f"No pipeline plan: {md(result.error)}")
        return
    pp = result.plan
    too_fine = pipeline_tables.microbatch_warning(pipeline_tables.example_sequences(graph), microbatches)
    if too_fine:
        st.warning(too_fine, icon=":material/warning:")
    _headline(pp, ranks, microbatches, training, result.seconds)
    sim = pipeline_tables.resimulate(pp, microbatches)
    st.plotly_chart(
        pipeline_figures.schedule_figure(sim, ranks, pipeline_tables.transfer_s(pp, microbatches)),
        key="pp_schedule_chart",
    )
    other = pipeline_tables.twin_simulation(pp, microbatches, schedule)
    st.caption(md(pipeline_figures.bubble_note(sim, training is not None, other)))
    left, right = st.columns(2)
    sweep = pipeline_tables.microbatch_sweep(
        pp, plan_at=lambda m: compute.pipeline_plan(config, ranks, ranks * per_rank, m, schedule, training).plan
    )
    caps = [next(d.memory_bytes for d in devices if d.logical_id == i) for i in pp.device_ids]
    with left:
        st.plotly_chart(pipeline_figures.microbatch_figure(sweep, microbatches), key="pp_sweep_chart")
    with right:
        st.plotly_chart(pipeline_figures.stage_memory_figure(pp, caps), key="pp_memory_chart")
    st.markdown("##### The split against the ones people use")
    st.dataframe(pipeline_tables.splits_table(pp), hide_index=True, width="stretch")
    if any(step < pp.step_time_s * (1 - 0.0005) for _, step, _ in pp.baselines):
        st.caption(md(BOTTLENECK_NOTE[0].upper() + BOTTLENECK_NOTE[1:] + "."))
    st.markdown("##### Stages")
    st.dataframe(
        pipeline_tables.stages_table(pp, {d.logical_id: d.name for d in devices}, caps, graph),
        hide_index=True,
        width="stretch",
        column_config=STAGE_COLUMNS,
    )
    if result.stage_plan is not None:
        with st.expander("Stage DAG (the stages as a plan: one forward pass, no microbatches)"):
            graph_panels.render_dag(result.stage_plan, graph, key="pipeline")
    st.download_button(
        "Download the pipeline plan (JSON)",
        pp.to_json(),
        file_name="pipeline.json",
        mime="application/json",
        key="pp_download",
    )
    _real_run(pp, graph)


main()
