"""Compare modes: every mode (except aot_based) on the same model and devices."""

from __future__ import annotations

import streamlit as st

import sample_models
from explorer import compute, graph_panels, loading, panels, sidebar, state
from explorer.builders.text import counted, md
from partitioner import Graph, PartitionError
from partitioner.accelerator.compare import ModeResult
from partitioner.plan.size import plan_from_json


def main() -> None:
    inputs = loading.page_inputs()
    if inputs is None:
        return
    config, graph = inputs
    st.markdown(f"#### Every mode on {md(config.model.label)}, {counted(len(config.devices), 'device')}")
    modes = sidebar.PLAN_MODES
    results = []
    with st.status(f"Running {len(modes)} modes...", expanded=False) as status:
        for mode in modes:
            status.update(label=f"Running {mode}...")
            results.append(compute.compare(config.with_mode(mode)))
        failed = sum(1 for r in results if r.error)
        if sample_models.is_hf(config.model.name):
            status.update(label="Scoring Accelerate's device map...")
        theirs = compute.accelerate(config)  # hf: models: Accelerate's own device map, on our cost model
        if theirs is not None:
            results.append(theirs)
        status.update(label=f"Ran {len(modes)} modes ({failed} found no plan)", state="complete")
    panels.render_comparison(results, len(graph.op_indices))
    good = [r.mode for r in results if r.ok and r.mode in modes]
    if good:
        cols = st.columns(len(good))
        for col, mode in zip(cols, good):
            col.button(
                f"Open {mode} on Explore",
                key=f"compare_open_{mode}",
                on_click=state.open_page,
                args=("views/explore.py", mode),
            )
    _side_by_side(results, graph)


def _side_by_side(results: list[ModeResult], graph: Graph) -> None:
    """Two plans (two modes' results, or plan files) as two DAGs and the diff between them."""
    st.markdown("#### Side by side")
    plans = {f"{r.mode} plan": r.plan for r in results if r.ok and r.plan is not None}
    with st.expander("Add plan files to compare (JSON from the command line or a download)"):
        for upload in (
            st.file_uploader("Plan files", type=["json"], accept_multiple_files=True, key="compare_uploads") or []
        ):
            try:
                plans[f"file {upload.name}"] = plan_from_json(upload.getvalue(), graph)  # sized by the model
            except PartitionError as exc:
                st.error(
                    f"{md(upload.name)} is not a plan: {md(exc)}. Download a plan from Explore or write one "
                    "with `partition-explorer partition ... --out plan.json`."
                )
    names = list(plans)
    if len(names) < 2:
        st.info("Side by side needs two plans: at least two modes must find one, or add plan files.")
        return
    cols = st.columns(2)
    left = cols[0].selectbox("Left", names, index=0, key="compare_left")
    right = cols[1].selectbox("Right", names, index=min(1, len(names) - 1), key="compare_right")
    graph_panels.render_side_by_side(plans[left], plans[right], left, right, key="compare_sbs", graph=graph)


main()
