"""Explore: the plan for the sidebar's model, devices and mode; its DAG, charts and tables."""

from __future__ import annotations

import streamlit as st

from explorer import graph_panels, loading, panels
from explorer.builders import teaching
from explorer.builders.text import counted, md

EXPLORE_VIEWS = ("Partition DAG", "Model graph by module")


def start_here() -> None:
    """What to do first, and where each question is answered (the first page a person sees)."""
    with st.expander("Start here", expanded=not st.session_state.get("explore_started", False)):
        st.markdown(
            "1. **Pick a model** in the sidebar: a small sample, or *Hugging Face architecture...* with a "
            "checkpoint's preset (`llama-3-70b`, `mixtral-8x7b`, ...) at its real size.\n"
            "2. **Describe the devices** you have or mean to buy (a preset such as `h100-80gb`, how many).\n"
            "3. **Read the answer** on the page that asks your question:"
        )
        cols = st.columns(2)
        cols[0].page_link(
            "views/cluster.py", label="How many GPUs, laid out how? **Plan a cluster**", icon=":material/dns:"
        )
        cols[0].page_link(
            "views/techniques.py", label="Which technique for my devices? **Techniques**", icon=":material/compare:"
        )
        cols[1].page_link(
            "views/explore.py", label="Where does each layer go? **Explore**, below", icon=":material/account_tree:"
        )
        cols[1].page_link("views/learn.py", label="How does partitioning work? **Learn**", icon=":material/school:")
        st.caption("Everything you set is in the page's address: copy it to share exactly this view.")


def main() -> None:
    start_here()
    loaded = loading.current_plan()
    if loaded is None:
        return
    config, graph, result = loaded
    st.markdown(f"#### {md(config.model.label)} on {counted(len(config.devices), 'device')}, mode `{config.mode}`")
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
        st.caption(
            "Tied parameters, one tensor counted once: "
            + "; ".join(" = ".join(f"`{n}`" for n in names) for names in graph.tied_parameters)
        )
    panels.render_notes(plan)
    panels.render_cost_models(plan, graph)
    overlay, hit = graph_panels.view_controls("explore", graph, plan)
    node_s = graph_panels.node_seconds(plan, graph)
    view = (
        st.segmented_control(
            "Show",
            list(EXPLORE_VIEWS),
            default=EXPLORE_VIEWS[0],
            key="explore_view",
            bind="query-params",  # the link carries it (Streamlit's binding)
            persist_state="session",
        )
        or EXPLORE_VIEWS[0]
    )
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
