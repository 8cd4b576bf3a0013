"""Learn: what each mode does and why its plans look the way they do; the cost model."""

from __future__ import annotations

import streamlit as st

from explorer import compute, state, teaching


def main() -> None:
    st.markdown("#### How partitioning works here")
    st.markdown(
        "A model is traced into a graph of operations (torch.fx). A **plan** puts every "
        "operation into a **partition** and every partition onto one or more **devices**; "
        "partitions form a DAG (data flows from parents to children) drawn with its **BFS "
        "levels** as rows. Every partition's memory must fit its device, and the slowest chain "
        "of partitions and transfers, the **critical path**, is the plan's latency."
    )
    st.markdown(teaching.COST_MODEL)
    st.markdown(teaching.TWO_COST_MODELS)
    config = st.session_state.get(state.CONFIG)
    plan = None
    if config is not None:
        try:
            plan = compute.plan(config).plan if compute.trace(config.model) is not None else None
        except Exception:  # the Explore page shows the error in full
            plan = None
    if plan is not None:
        st.markdown(f"#### Your current plan ({plan.model}, `{plan.mode}`)")
        for note in teaching.explain_plan(plan):
            st.markdown(f"- {note}")
    st.markdown("#### The modes")
    for mode, text in teaching.MODE_TEXT.items():
        current = plan is not None and plan.mode == mode
        with st.expander(f"{text.title}" + ("  (current)" if current else ""), expanded=current):
            st.markdown(f"**What it does.** {text.idea}")
            st.markdown(f"**What its plans look like.** {text.shape}")
            st.markdown(f"**When to use it.** {text.use}")
    st.markdown(
        "#### Things to try\n"
        "- Pick **mlp**, raise the device memory until the model fits one device: the plan "
        "collapses to a single partition. Tick *force partitioning* to see the mode anyway.\n"
        "- Pick **dlrm** and compare `size_based` with `sparse_nn` on the Compare page.\n"
        "- Set a transfer rate (e.g. 1 GB/s) and watch `cost_aware` merge partitions to avoid transfers.\n"
        "- Tick *saturate host* with more devices than the plan needs: partitions become striped (replicated).\n"
        "- On Review & edit, move a node to another partition and read the violations."
    )


main()
