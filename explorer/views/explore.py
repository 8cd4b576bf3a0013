"""Explore: the plan for the sidebar's model, devices and mode; its DAG, charts and tables."""

from __future__ import annotations

import streamlit as st

from explorer import panels, state


def main() -> None:
    loaded = state.current_plan()
    if loaded is None:
        return
    config, graph, result = loaded
    st.markdown(f"#### {config.model.label} on {len(config.devices)} devices, mode `{config.mode}`")
    if result.plan is None:
        st.error(f"No plan: {result.error}")
        return
    plan = result.plan
    panels.render_summary(plan, seconds=result.seconds)
    if graph.tied_parameters:
        st.caption("Tied parameters, one tensor counted once: "
                   + "; ".join(" = ".join(f"`{n}`" for n in names) for names in graph.tied_parameters))
    panels.render_notes(plan)
    panels.render_cost_models(plan, graph)
    left, right = st.columns([3, 2])
    with left:
        panels.render_dag(plan, key="explore")
    with right:
        panels.render_drilldown(plan, graph, key="explore")
    panels.render_charts(plan)
    panels.render_tables(plan)
    panels.render_real_run(plan, graph)


main()
