"""Learn: what each mode does and why its plans look the way they do; the cost model."""

from __future__ import annotations

import streamlit as st

from explorer import compute, graph_panels, state
from explorer.builders import stepping, teaching
from explorer.builders.config import PlanConfig
from explorer.builders.text import md
from explorer.fields import BOUND
from partitioner import Graph, Plan
from partitioner.accelerator import steps
from partitioner.units import format_seconds


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
    plan = graph = None
    if config is not None:
        try:
            graph = compute.trace(config.model)
            plan = compute.plan(config).plan
        except Exception:  # the Explore page shows the error in full
            plan = None
    if plan is not None:
        st.markdown(f"#### Your current plan ({md(plan.model)}, `{plan.mode}`)")
        for note in teaching.explain_plan(plan):
            st.markdown(f"- {note}")
    if config is not None and plan is not None and graph is not None:
        step_through(config, plan, graph)
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


SPEEDS = {0.5: "slow", 1.0: "1 step/s", 2.0: "2 steps/s", 4.0: "fast"}


def _player(count: int, decisions: int) -> None:
    """Previous, Play/Pause, Next, the speed and the step slider of ``count`` steps."""

    def shift(by: int) -> None:
        st.session_state["learn_step"] = min(count, max(1, st.session_state.get("learn_step", 1) + by))
        st.session_state["learn_tick"] = False  # a click is not a tick of the player

    def play() -> None:
        st.session_state["learn_playing"] = not st.session_state.get("learn_playing", False)
        st.session_state["learn_tick"] = False
        if st.session_state["learn_playing"] and st.session_state.get("learn_step", 1) >= count:
            st.session_state["learn_step"] = 1
        st.session_state["learn_restart"] = True

    playing = bool(st.session_state.get("learn_playing", False))
    cols = st.columns([1, 1, 1, 2, 5])
    cols[0].button("Previous", key="learn_prev", on_click=shift, args=(-1,), width="stretch")
    cols[1].button(
        "Pause" if playing else "Play",
        key="learn_play",
        on_click=play,
        width="stretch",
        help="Play the steps one after another at the chosen speed",
    )
    cols[2].button("Next", key="learn_next", on_click=shift, args=(1,), width="stretch")
    st.session_state.setdefault("learn_speed", 1.0)
    cols[3].select_slider(
        "Speed",
        list(SPEEDS),
        format_func=SPEEDS.get,
        key="learn_speed",
        on_change=lambda: st.session_state.update(learn_restart=True, learn_tick=False),
    )
    if count > 1:
        cols[4].slider(
            "Step",
            1,
            count,
            key="learn_step",
            persist_state="session",  # a page switch keeps it (a link carries it: explorer.builders.links)
            help=f"{decisions} decisions in {count} steps (a partition filled, a pass, a merge)",
        )


def step_through(config: PlanConfig, plan: Plan, graph: Graph) -> None:
    """The stepper as a fragment; while playing it reruns itself at the chosen speed."""
    playing = bool(st.session_state.get("learn_playing", False))
    every = 1.0 / float(st.session_state.get("learn_speed", 1.0)) if playing else None
    st.fragment(_step_through, run_every=every)(config, plan, graph)


def _step_through(config: PlanConfig, plan: Plan, graph: Graph) -> None:
    """One algorithm on the current model, a round of decisions at a time (a partition filled, a
    KL pass, a merge), played or stepped: the graph coloured by where each node is after it, the
    view following the step's nodes, and the latency so far. The trace is computed once."""
    st.markdown(f"#### Step through an algorithm on {md(plan.model)}")
    names: list[str] = list(steps.ALGORITHMS)
    algorithm = (
        st.radio(
            "Algorithm",
            names,
            captions=[steps.ALGORITHMS[a] for a in names],  # its name in the link, not a label
            key="learn_algorithm",
            on_change=lambda: st.session_state.update(learn_step=1, learn_playing=False),
            **BOUND,
        )
        or names[0]
    )
    trace = compute.decision_trace(config, algorithm)
    if isinstance(trace, str):
        st.warning(f"{steps.ALGORITHMS[algorithm]} finds no plan here: {md(trace)}")
        return
    groups = stepping.group_steps(trace)
    count = len(groups)
    if count == 0:
        st.info("The algorithm made no decision on this model (nothing to move or merge).")
        return
    was_playing = bool(st.session_state.get("learn_playing"))
    step, still = stepping.player_step(
        st.session_state.get("learn_step", 1), count, was_playing, st.session_state.pop("learn_tick", True)
    )
    st.session_state["learn_step"] = step
    if was_playing and not still:  # the end: stop playing (and stop the timer)
        st.session_state["learn_playing"] = False
        st.rerun(scope="app")
    st.session_state["learn_tick"] = True

    _player(count, len(trace.decisions))
    if st.session_state.pop("learn_restart", False):
        st.rerun(scope="app")  # the timer's speed is set where the fragment starts
    shown = stepping.step_shown(trace, groups, step, plan)
    index = shown.decision
    metrics = st.columns(3)
    metrics[0].metric(
        "Step",
        f"{step} of {count}",
        f"{shown.span} of {len(trace.decisions)}, {shown.taken} taken",
        delta_color="off",
    )
    latency = shown.latency_s
    metrics[1].metric("Latency after it", "plan not complete" if latency is None else format_seconds(latency))
    metrics[2].metric("Partitions", shown.partitions)
    decision = trace.decisions[index]
    st.caption(md(groups[step - 1].title))
    (st.success if decision.accepted else st.warning)(
        f"**{decision.kind}** ({'taken' if decision.accepted else 'tried, not taken'}): {md(decision.text)}"
    )
    graph_panels.render_step(trace, index, plan, key="learn_steps")
    if step == count:
        note = stepping.replay_note(trace, plan)
        if note:
            st.info(note)
    if trace.truncated:
        st.caption("The trace stopped recording after 20,000 decisions; the algorithm itself ran to its end.")
    state.write_url()  # the step in the link (a played step changes without the router's run)


main()
