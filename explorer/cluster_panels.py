"""The Plan a cluster page's panels for an opened layout that do work: its stage DAG (the traced
graph cut by the Pipeline page's splitter) and *Run this layout* (its composition on this
machine's processes, beside the prediction on this machine's measured profile)."""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from explorer import graph_panels, panels, state
from explorer.builders import cluster_run_figures
from explorer.builders.text import md
from partitioner import Graph, PartitionError, cluster, format_bytes, format_seconds

RUNS = "cl_runs"  # session state: (graph fingerprint, layout) -> the checked run


def _runnable(lay: cluster.Layout, graph: Graph, hf: bool = False) -> tuple[cluster.Layout | None, str]:
    """The layout as this machine can run it (the library's rule,
    :func:`partitioner.cluster.run.runnable.local_layout`: the same tensor and pipeline degrees,
    ZeRO stage and schedule, data parallelism and microbatches reduced to this machine's processes
    and the traced example's rows, no recomputation); or None and why not."""
    from partitioner.cluster.run.runnable import local_layout
    from partitioner.processes.launch import MAX_LOCAL_PROCESSES
    from partitioner.tracing import cache as trace_cache

    meta = (
        "the model was built at full size on the meta device (shapes only, no weights): choose a "
        "smaller size in the sidebar (fewer layers, a smaller hidden size) so that it gets real weights"
    )
    if trace_cache.weights_on_meta(graph):  # known without tracing the whole module again
        return None, meta
    if graph.graph_module is None:
        return None, "the model has no traced graph to run"
    if any(p.is_meta for p in graph.graph_module.parameters()):
        return None, meta
    try:
        return local_layout(lay, graph.example_inputs or (), MAX_LOCAL_PROCESSES, exported=hf), ""
    except PartitionError as exc:
        return None, str(exc)


def run_here(chosen: cluster.Layout, graph: Graph, prof: cluster.ModelProfile, config: state.PlanConfig) -> None:
    """Run the opened layout's shape for one training step of the traced example on local
    processes (a process per rank, with a time limit) and show it beside the prediction on this
    machine's measured profile (measured first when none is cached)."""
    import sample_models
    from partitioner.cluster.run.checked import check_layout
    from partitioner.cluster.run.tp_plans import model_tp_plan
    from partitioner.pipeline.steps import step_simulator
    from partitioner.runtime.execute import picklable

    hf = sample_models.is_hf(config.model.name)
    lay, why = _runnable(chosen, graph, hf)
    if lay is None:
        st.info(f"Cannot run this layout here: {md(why)}.")
        return
    runs = st.session_state.setdefault(RUNS, {})
    key = (graph.fingerprint(), lay)
    if lay.label() != chosen.label():
        st.caption(
            md(
                f"Runs {lay.label()}: {chosen.label()} on {lay.devices} processes and the traced example's "
                f"{int((graph.example_inputs or ())[0].shape[0])} rows (the same tensor-parallel and pipeline "
                "degrees, data parallelism and microbatches reduced to fit)."
            )
        )
    st.caption(
        md(
            f"Starts {lay.devices} processes on this machine (torch.distributed over gloo, started as torchrun "
            f"starts them), builds one (pp, dp, tp) device mesh and runs {lay.label()} for one training step "
            "of the traced example: tensor parallelism by DTensor's parallelize_module ("
            + (
                "the model's own plan: attention by heads"
                if hf
                else "its Linear or MLP pairs, column then row, the rest replicated"
            )
            + "), data parallelism by FSDP's fully_shard (ZeRO 2, 3) or a gradient all-reduce, pipeline stages "
            "by torch's schedules. Outputs and gradients are checked against one process; the step is "
            "predicted for this machine."
            + ("" if lay.recompute == chosen.recompute else " Recomputation is not run here.")
        )
    )

    def start(progress: Any) -> Any:
        if hf:  # the model as built (its exported graph cannot be pickled): the same config, the same weights
            module, inputs, kwargs = sample_models.load(config.model.name, dict(config.model.overrides))
        else:
            module, inputs, kwargs = picklable(graph.graph_module), graph.example_inputs or (), {}
        return check_layout(
            module,
            inputs,
            lay,
            timeout_s=180,
            progress=progress,
            graph=graph,
            tp_plan=model_tp_plan(graph, lay.tp),
            example_kwargs=kwargs,
        )

    too_many = panels.too_many_processes(lay.devices)
    if too_many:
        st.info(f"Cannot run this layout here: {md(too_many)}.")
    if st.button("Run this layout", key="cl_run", disabled=bool(too_many), help=too_many):
        try:
            done = panels.run_with_status(start)
        except PartitionError as exc:  # a model the composed run refuses (a layer it cannot split): named
            st.error(f"Cannot run this layout: {md(exc)}")
            done = None
        if done is not None:
            runs[key] = done
    check = runs.get(key)
    if check is None:
        return
    result = check.run
    work = cluster.Workload("training", max(1, prof.tokens0 // prof.seq0), prof.seq0, prof.element_bytes, "none")
    planned = cluster.evaluate(
        prof, work, cluster.local_cluster(lay.devices, result.backend == "nccl"), lay, step_simulator()
    )
    good = result.outputs_equal and result.gradients_equal and result.loss_equal is not False
    (st.success if good else st.error)(
        md(
            f"Outputs {'equal' if result.outputs_equal else 'differ from'} one process's and gradients "
            f"{'equal' if result.gradients_equal else 'differ'} (max difference {result.max_abs_diff:.2g})"
            + (f": {result.mismatch}" if result.mismatch else "")
            + f". Measured {format_seconds(result.step_s)} a step "
            f"(the slowest rank's median), predicted {format_seconds(check.predicted.total_s)} on the profile "
            f"{check.profile_name!r} of this machine (load {check.load_average[0]:.1f} on {os.cpu_count()} cores)."
        )
    )
    st.plotly_chart(cluster_run_figures.run_figure(check), key="cl_run_chart")
    left, right = st.columns([2, 3])
    left.dataframe(cluster_run_figures.parts_table(check), hide_index=True, width="stretch")
    right.dataframe(
        cluster_run_figures.run_table(planned, result.ranks),
        hide_index=True,
        width="stretch",
        column_config={"rank": st.column_config.NumberColumn(width="small")},
    )
    st.caption(
        "Parts the run does not time apart (compute, dispatch, tensor-parallel collectives, bubble) are "
        "measured together as the rest of the step. Held: the parameter and gradient shards each rank holds "
        "after the step (activations are freed by then); predicted: the planner's weights and gradients a "
        "device. `partition-explorer calibrate` measures this machine again; a loaded machine moves its "
        "speed between the calibration and the run."
    )


def stage_dag(chosen: cluster.LayoutResult, graph: Graph, target: cluster.Cluster) -> None:
    """The traced graph cut into the layout's pipeline stages by the Pipeline page's splitter (on
    request: a large model's split takes seconds), drawn as a plan of stages."""
    from partitioner import Device, InfeasibleError, pipeline
    from partitioner.pipeline.schedules import virtual_stages

    lay = chosen.layout
    if lay.pp < 2:
        st.caption("No pipeline stages: the whole model runs on every rank (split by tensor parallelism).")
        return
    stages = lay.pp * virtual_stages(lay.schedule, lay.virtual)
    if not st.toggle(f"Cut the traced graph into {stages} stages", key="cl_stage_dag"):
        st.caption(
            "The Pipeline page's splitter (the slowest stage as small as it can be, on the traced example) "
            "cuts the graph; the planner assumes equal layers a stage."
        )
        return
    acc = target.accelerator

    def split(memory: int) -> tuple[Any, Any]:
        devices = [
            Device(
                f"rank {k}: tp{lay.tp} x {acc.name}",
                memory,
                k,
                acc.peak_flops * lay.tp,
                acc.memory_bandwidth_bytes_per_s * lay.tp,
                target.intra.bandwidth_bytes_per_s,
                acc.name,
            )
            for k in range(lay.pp)
        ]
        cut = pipeline.plan(
            graph, devices, stages=stages, microbatches=max(chosen.microbatches, lay.pp), schedule=lay.schedule
        )
        return cut, cut.as_plan(graph, devices, target.intra.bandwidth_bytes_per_s)

    note = ""
    try:
        with st.spinner("Cutting the graph into stages..."):
            try:  # a stage on its tensor-parallel group: tp devices' memory and speed
                cut, stage_plan = split(acc.memory_bytes * lay.tp)
            except InfeasibleError:  # the weights as traced exceed it: draw the cut all the same
                cut, stage_plan = split(graph.total_size_bytes * 2 + (1 << 30))
                group = format_bytes(acc.memory_bytes * lay.tp)
                note = (
                    f" A stage's weights as traced exceed its tp{lay.tp} group's {group}, so the boxes are "
                    "measured against room for any cut (the layout itself shards them further with ZeRO and "
                    "counts them in its own precision)."
                )
    except PartitionError as exc:
        st.error(f"Cannot cut the graph into {stages} stages: {md(exc)}")
        return
    st.caption(
        md(
            f"{stages} stages on {lay.pp} pipeline ranks ({', '.join(f'{len(s):,}' for s in cut.stages)} "
            f"nodes a stage), one forward pass of the traced example; each rank is its tensor-parallel group "
            f"of {lay.tp} devices (their memory and speed together).{note}"
        )
    )
    graph_panels.render_dag(stage_plan, graph, key="cluster")
