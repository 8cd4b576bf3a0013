"""Compare modes: every mode (except aot_based) on the same model and devices."""

from __future__ import annotations

import streamlit as st

from explorer import compute, panels, sidebar, state


def main() -> None:
    config = state.current_config()
    if config is None or state.load_graph(config) is None:
        return
    st.markdown(f"#### Every mode on {config.model.label}, {len(config.devices)} devices")
    modes = sidebar.PLAN_MODES
    results = []
    with st.status(f"Running {len(modes)} modes...", expanded=False) as status:
        for mode in modes:
            status.update(label=f"Running {mode}...")
            results.append(compute.compare(config.with_mode(mode)))
        theirs = compute.accelerate(config)  # hf: models: Accelerate's own device map, on our cost model
        if theirs is not None:
            status.update(label="Scoring Accelerate's device map...")
            results.append(theirs)
        failed = sum(1 for r in results if r.error)
        status.update(label=f"Ran {len(modes)} modes ({failed} found no plan)", state="complete")
    panels.render_comparison(results)
    good = [r.mode for r in results if r.ok and r.mode in modes]
    if good:
        cols = st.columns(len(good))
        for col, mode in zip(cols, good):
            col.button(f"Open {mode} on Explore", key=f"compare_open_{mode}", on_click=state.open_page, args=("views/explore.py", mode))


main()
