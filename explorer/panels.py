"""``render_*`` functions: each draws one part of a page from a Plan with the pure builders."""

from __future__ import annotations

import hashlib
import math
import os
import shutil
from typing import Any, Callable, Sequence

import streamlit as st

from explorer.builders import figures, measured_figures, tables, teaching, timeline
from explorer.builders.text import md
from explorer.fields import BOUND
from partitioner import Graph, PartitionError, Plan, rescore
from partitioner.accelerator.compare import ModeResult
from partitioner.draw.dag import plan_to_dot, render_dot
from partitioner.units import format_seconds

__all__ = [
    "engine_ui",
    "render_summary",
    "render_notes",
    "render_charts",
    "render_tables",
    "render_violations",
    "render_downloads",
    "render_comparison",
]


def render_summary(
    plan: Plan, seconds: float | None = None, reference: Plan | None = None, graph: Graph | None = None
) -> None:
    """Headline numbers; with ``reference``, each shows its change from that plan; with ``graph``,
    how many devices the model needs at least (:func:`teaching.devices_needed`)."""
    used = plan.device_memory_bytes()
    busy = sum(1 for v in used.values() if v)
    cols = st.columns(5)

    def delta(now: float, before: float | None, fmt) -> str | None:
        if before is None or not (math.isfinite(now) and math.isfinite(before)):
            return None
        if abs(now - before) <= 1e-9 * max(abs(now), abs(before), 1e-300):  # float noise: no change
            return None
        return ("+" if now > before else "-") + fmt(abs(now - before))

    ref = reference
    cols[0].metric(
        "Latency (critical path)",
        format_seconds(plan.latency_s),
        delta(plan.latency_s, None if ref is None else ref.latency_s, format_seconds),
        delta_color="inverse",
    )
    cols[1].metric(
        "Partitions",
        len(plan.partitions),
        None if ref is None else (len(plan.partitions) - len(ref.partitions)) or None,
        delta_color="off",
    )
    needed = None if graph is None else teaching.devices_needed(graph, plan.devices)
    cols[2].metric(
        "Devices used",
        f"{busy} of {len(plan.devices)}",
        None if needed is None else needed[0],
        delta_color="off",
        delta_arrow="off",
        help=None if needed is None else needed[1],
    )
    util = plan.memory_utilisation()
    cols[3].metric(
        "Peak memory utilisation",
        tables.percent(util) if math.isfinite(util) else "inf",
        delta(util, None if ref is None else ref.memory_utilisation(), tables.percent),
        delta_color="inverse",
    )
    if seconds is not None:
        cols[4].metric("Time to partition", format_seconds(seconds))
    else:
        cols[4].metric("Mode", md(plan.mode), "edited" if plan.provenance.edited else None, delta_color="off")
    count = len(plan.partitions)
    best = plan.bound_summary()
    st.caption(
        f"Plan: {md(plan.model or 'model')} | {md(plan.mode_label)} | {count} partition{'s' if count != 1 else ''} | "
        f"latency {format_seconds(plan.latency_s)} | {best} | {plan.cost_model} cost model"
    )


def render_notes(plan: Plan) -> None:
    notes = teaching.explain_plan(plan)
    single = plan.provenance.single_partition
    with st.expander("Why does the plan look like this?", expanded=single):
        for note in notes:
            st.markdown(f"- {note}")


def render_charts(plan: Plan, overlay: str = "device", graph: Graph | None = None) -> None:
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figures.memory_figure(plan, overlay, graph), key="chart_memory")
    with right:
        st.plotly_chart(figures.device_memory_figure(plan), key="chart_device_memory")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figures.latency_figure(plan), key="chart_latency")
    with right:
        st.plotly_chart(timeline.timeline_figure(plan), key="chart_timeline")


PARTITION_PLACE = ["Partition", "Devices", "Nodes", "Memory", "Of capacity", "Critical path", "BFS level"]


def render_tables(plan: Plan) -> None:
    with st.expander("Tables: partitions, devices, edges", expanded=False):
        # The partitions' thirteen columns as two tables, where they are and what they take, then
        # their times: each reads whole at 1,280 px (one table scrolled its last columns out of view).
        partitions = tables.readable_partition_table(plan)
        for columns in (PARTITION_PLACE, ["Partition", *[c for c in partitions.columns if c not in PARTITION_PLACE]]):
            st.dataframe(partitions[columns], hide_index=True, width="stretch")
        st.dataframe(tables.readable_device_table(plan), hide_index=True, width="stretch")
        st.dataframe(tables.readable_edge_table(plan), hide_index=True, width="stretch")


def render_violations(violations: Sequence[object]) -> None:
    """The plan's broken rules in words (``Plan.violations``), or that it is valid."""
    if not violations:
        st.success("The plan is valid: every node is placed once, every device has room, data flows one way.")
        return
    st.error(
        f"The plan breaks {len(violations)} rule{'s' if len(violations) != 1 else ''}:\n\n"
        + "\n".join(f"- {md(v)}" for v in violations)
    )


def render_downloads(plan: Plan, key: str, stem: str) -> None:
    """Plan JSON, and the DAG as SVG (rendered on click; needs Graphviz) and DOT."""
    dot = plan_to_dot(plan)
    cols = st.columns(3)
    cols[0].download_button(
        "Plan (JSON)",
        plan.to_json(),
        file_name=f"{stem}.json",
        mime="application/json",
        key=f"{key}_json",
        on_click="ignore",
    )
    if shutil.which("dot"):
        cols[1].download_button(
            "DAG (SVG)",
            lambda: _svg(dot),
            file_name=f"{stem}.svg",
            mime="image/svg+xml",
            key=f"{key}_svg",
            on_click="ignore",
        )
    else:
        cols[1].warning("SVG needs Graphviz's `dot`: install Graphviz (apt-get install graphviz).")
    cols[2].download_button(
        "DAG (DOT)", dot, file_name=f"{stem}.dot", mime="text/vnd.graphviz", key=f"{key}_dot", on_click="ignore"
    )


def _svg(dot: str) -> bytes:
    try:
        return render_dot(dot, "svg")
    except PartitionError as exc:  # the download gets the message instead of a picture
        return f"<!-- {exc} -->".encode()


def render_comparison(results: Sequence[ModeResult], op_count: int | None = None) -> None:
    frame = tables.comparison_table(results, op_count)
    st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        column_config={
            "Note": st.column_config.TextColumn(width="large"),
            "Error": st.column_config.TextColumn(width="large"),
        },
    )
    notes = tables.optimal_notes(results, op_count)
    if notes:
        st.caption(" ".join(f"**{md(mode)}**: {md(text)}." for mode, text in notes.items()))
    st.plotly_chart(figures.comparison_figure(results), key="chart_comparison")
    for r in results:
        if r.error:
            st.warning(f"**{md(r.mode)}** found no plan{_reason(r.mode, r.error)}")


def _reason(mode: str, error: str) -> str:
    """': why' of a mode's failure, without the error's own "mode 'x' found no plan" said again."""
    text = error.strip()
    for said in (f"mode '{mode}' found no plan", f"{mode} found no plan"):
        if text.lower().startswith(said.lower()):
            text = text[len(said) :].lstrip(":;,. ")
    return f": {md(text)}" if text else "."


RUN_RESULTS = "run_results"  # plan JSON hash -> RunResult of its last real run


def too_many_processes(count: int) -> str | None:
    """Why a run of ``count`` processes is not offered on this machine, or None; checked before
    the button is drawn, so the button is disabled with this reason."""
    from partitioner.processes.launch import MAX_LOCAL_PROCESSES

    if count <= MAX_LOCAL_PROCESSES:
        return None
    return (
        f"this run needs {count} processes, and this machine runs at most {MAX_LOCAL_PROCESSES} "
        f"({os.cpu_count()} cores; each process holds a few hundred MB of torch): plan for fewer devices "
        "here, or run the plan across hosts with torchrun"
    )


def run_with_status(
    start: Callable[[Callable[[str], None]], Any], starting: str = "Starting processes..."
) -> Any | None:
    """Call ``start(progress)`` (a run on local processes, or work in a worker) under a status box
    that says ``starting`` (what it does and how long it may take), then its progress; its
    :class:`~partitioner.RunError` becomes a message and None.

    Streamlit's Stop button (and a rerun) arrive as an exception from a status update, in
    ``progress``: the run and its processes stop there, and the exception goes on up, as does any
    other; the box then says the run did not finish."""
    from partitioner import RunError

    with st.status(starting, expanded=True) as status:
        try:
            result = start(lambda text: status.update(label=text))
        except RunError as exc:
            status.update(label="The run failed", state="error")
            st.error(f"The run failed: {md(exc)}")
            return None
        except BaseException:
            _unfinished(status)
            raise
        status.update(label="Run finished", state="complete")
        return result


def _unfinished(status: Any) -> None:
    """Label the box of a run that an exception ended; after a Stop every later update raises
    Stop again (the page is going away), which the caller's own exception stands for."""
    try:
        status.update(label="The run did not finish", state="error")
    except BaseException:  # noqa: BLE001 - the exception being raised already says what happened
        pass


def render_real_run(plan: Plan, graph: Graph) -> None:
    """Run the plan on one local process per device (torch.distributed, gloo) and show the
    measurement beside the prediction. The ranks are processes of their own, with a time limit;
    the page shows their progress and keeps the last result of each plan."""
    from partitioner.runtime.execute import ranked_devices, run

    key = hashlib.sha256(plan.to_json(indent=None).encode()).hexdigest()[:16]
    results = st.session_state.setdefault(RUN_RESULTS, {})
    with st.expander("Run on local processes", expanded=key in results):
        count = len(ranked_devices(plan))
        idle = len(plan.devices) - count
        st.caption(
            f"Starts {count} processes (one per device that holds a partition"
            f"{f'; the {idle} idle devices get none' if idle else ''}) on this machine with "
            "torch.distributed over gloo, runs each partition where the plan puts it, and "
            "checks the outputs against the model. Takes a few seconds per process."
        )
        why = too_many_processes(count)
        if why:
            st.info(f"Cannot run this plan here: {why}.")
        if st.button("Run on local processes", key="run_local", disabled=bool(why), help=why):
            done = run_with_status(
                lambda progress: run(plan, graph, graph.example_inputs or (), timeout_s=120, progress=progress)
            )
            if done is not None:
                results[key] = done
        result = results.get(key)
        if result is None:
            return
        if result.outputs_equal:
            st.success(
                f"Outputs equal the model's. Measured end to end "
                f"{format_seconds(result.measured_latency_s)} on {result.world_size} processes "
                f"(predicted {format_seconds(result.predicted_latency_s)})."
            )
        else:
            st.error("The outputs of the run differ from the model's.")
        st.plotly_chart(measured_figures.run_figure(result.partitions), key="chart_real_run")
        st.caption(
            "Predicted figures use the roofline estimate of the devices you described; this "
            "machine's processes share its cores, so expect a constant factor. "
            "`partition-explorer run --calibrate` re-scores with timings measured here."
        )


def render_cost_models(plan: Plan, graph: Graph) -> None:
    """The same partitions under both cost models, side by side, and where they differ."""
    other = "torch" if plan.cost_model == "physical" else "physical"
    try:
        there = rescore(plan, graph, other)
    except PartitionError as exc:
        st.caption(f"Cannot score the plan under the {other} cost model: {md(exc)}")
        return
    with st.expander("Physical and torch's numbers for this plan", expanded=False):
        st.dataframe(tables.cost_model_table(plan, there), hide_index=True)
        st.caption("The Learn page explains the differences with a tiny example each.")


def engine_ui(key: str, assumes: Callable[[str], str], default: str = "eager") -> str:
    """The engine a page's times are for (partitioner.kernels.ENGINES), a radio under ``key``
    (``default`` until a person picks), with what the times then assume (``assumes(engine)``) said
    under it."""
    from partitioner.kernels import ENGINES

    words = {"eager": "eager PyTorch", "graphs": "CUDA graphs, fused kernels"}
    engine = st.radio(
        "Engine the times are for",
        list(ENGINES),
        index=list(ENGINES).index(default),
        captions=[words[e] for e in ENGINES],  # the name itself in the link, not a label
        key=key,
        horizontal=True,
        help="eager: a plain PyTorch model call or training loop (one kernel an op, launched from "
        "Python); graphs: a serving engine (vLLM, TensorRT-LLM) or compiled training",
        **BOUND,
    )
    st.caption(md(f"Times assume {assumes(engine)}."))
    return str(engine)
