"""Explore: the plan for the sidebar's model, devices and mode; its DAG, charts and tables."""

from __future__ import annotations

import streamlit as st

from explorer import graph_panels, panels, state
from explorer.builders import teaching
from explorer.builders.text import md


def main() -> None:
    loaded = state.current_plan()
    if loaded is None:
        return
    config, graph, result = loaded
    st.markdown(f"#### {md(config.model.label)} on {len(config.devices)} devices, mode `{config.mode}`")
    if result.plan is None:
        st.error(f"No plan: {md(result.error)}")
        st.caption(md(teaching.devices_needed(graph, config.device_list())[1]))
        return
    plan = result.plan
    panels.render_summary(plan, seconds=result.seconds, graph=graph)
    if graph.unpriced_ops:
        from partitioner.tracing.flops import describe_unpriced

        st.warning(md(describe_unpriced(graph.unpriced_ops)))
    if graph.tied_parameters:
        st.caption("Tied parameters, one tensor counted once: "
                   + "; ".join(" = ".join(f"`{n}`" for n in names) for names in graph.tied_parameters))
    panels.render_notes(plan)
    panels.render_cost_models(plan, graph)
    overlay, hit = graph_panels.view_controls("explore", graph, plan)
    node_s = graph_panels.node_seconds(plan, graph)
    view = st.segmented_control("Show", ["Partition DAG", "Model graph by module"], key="explore_view",
                                default="Partition DAG") or "Partition DAG"
    left, right = st.columns([3, 2])
    with left:
        if view == "Partition DAG":
            graph_panels.render_dag(plan, graph, key="explore", overlay=overlay, hit=hit, drilldown=True)
        else:
            graph_panels.render_model_graph(plan, graph, key="explore", overlay=overlay, hit=hit, node_s=node_s)
    with right:
        graph_panels.render_drilldown(plan, graph, key="explore", overlay=overlay, hit=hit, node_s=node_s)
    panels.render_charts(plan, overlay, graph)
    panels.render_tables(plan)
    panels.render_real_run(plan, graph)


main()
