"""Training memory: what functorch's min-cut (the partitioner ``torch.compile`` runs on every
training graph) saves for the backward and what it recomputes, under an activation memory budget;
the trade-off over budgets; and each device's training memory under the current plan."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pandas as pd
import streamlit as st

from explorer import compute, loading, panels
from explorer.builders import training_figures
from explorer.builders.text import md
from explorer.viewer import show_graph
from partitioner import Graph, PartitionError, format_bytes, remat
from partitioner.cost.training import OPTIMIZERS
from partitioner.units import format_flops, format_seconds

RESULTS = "remat_results"  # (graph fingerprint, loss) -> the sweep's results
BUDGETS = (0.0, 0.25, 0.5, 0.75, 1.0)
OPTIMIZER_BY_LABEL = {o.label: o.name for o in OPTIMIZERS.values()}


def _sweep(graph: Graph, loss: str) -> list[remat.RematResult] | None:
    key = (graph.fingerprint(), loss)
    results = st.session_state.setdefault(RESULTS, {})
    if key in results:
        return results[key]
    st.caption(
        "Traces the model's forward and backward together (AOT autograd) and runs torch's "
        "min_cut_rematerialization_partition at budgets 0, 0.25, 0.5, 0.75 and 1, in a worker "
        f"process stopped after {_minutes(_time_limit_s(graph))}. A few seconds for the small samples, "
        "about a minute for gpt2_small, minutes for a large Hugging Face model (its weights on the meta device "
        "run as fake tensors: no memory)."
    )
    if not st.button("Trace the joint graph and run min-cut", key="tm_run", type="primary"):
        return None
    try:
        done = panels.run_with_status(
            lambda progress: remat.sweep(
                graph, graph.example_inputs or (), BUDGETS, loss, timeout_s=_time_limit_s(graph), progress=progress
            ),
            starting=f"Tracing the joint graph and running min-cut at {len(BUDGETS)} budgets in a worker "
            f"(stopped after {_minutes(_time_limit_s(graph))})...",
        )
    except PartitionError as exc:
        st.error(f"Cannot analyse training for this model: {md(exc)}")
        return None
    if done is not None:
        results[key] = done
    return done


def _time_limit_s(graph: Graph) -> float:
    """The worker's limit: 5 minutes, and a quarter of a second an op beyond (Llama-3-70B's 5,600
    ops: about 23 minutes; its joint trace and five min-cuts take some 5 minutes on 2 idle cores)."""
    return max(300.0, 0.25 * len(graph.op_indices))


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes"


def _memory(graph: Graph, result: remat.RematResult, results: list[remat.RematResult], optimizer: str) -> None:
    config = loading.current_config()
    planned = compute.plan(config) if config is not None else None
    if planned is None or planned.plan is None:
        cause = f": {md(planned.error)}" if planned is not None and planned.error else ""
        st.warning(
            f"No plan of this model fits the sidebar's devices{cause}. Training memory is drawn per device "
            "of a plan: add devices or memory in the sidebar (the Explore page shows the plan)."
        )
        return
    plan = planned.plan
    used = {d: m.parts() for d, m in remat.training_memory(plan, graph, result, optimizer).items()}
    st.plotly_chart(training_figures.training_memory_figure(used, plan.devices), key="tm_memory_chart")
    fitting = remat.largest_fitting_budget(plan, graph, results, optimizer)
    if fitting is None:
        st.warning(
            "No budget of the sweep fits every device: even recomputing all that can be, parameters, "
            "gradients and optimizer state need more than some device holds. Add devices or memory, "
            "or pick a lighter optimizer."
        )
    elif fitting.budget == result.budget:
        st.success(
            f"Every device fits at budget {result.budget:g}; that is the largest budget of the sweep "
            "that fits (the least recomputation)."
        )
    else:
        st.info(
            f"The largest budget of the sweep at which every device fits is {fitting.budget:g} "
            f"(saves {format_bytes(fitting.saved_activation_bytes)}, recomputes {fitting.recomputed_ops} ops)."
        )
    caps = {d.logical_id: d.memory_bytes for d in plan.devices}
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "device": d,
                    **{k: format_bytes(v) for k, v in parts.items()},
                    "total": format_bytes(sum(parts.values())),
                    "of capacity": f"{sum(parts.values()) / caps[d]:.1%}",
                }
                for d, parts in used.items()
            ]
        ),
        hide_index=True,
    )
    st.caption(
        f"Plan: {md(plan.mode_label)} on the sidebar's devices. Gradients take the parameters' bytes "
        "again; optimizer state is kept in the parameters' dtype (in fp32 beside an fp32 master copy when the "
        "weights are 16-bit: mixed precision); a replicated partition counts on each of its devices."
    )


def main() -> None:
    inputs = loading.page_inputs()
    if inputs is None:
        return
    config, graph = inputs
    st.markdown(f"#### Training memory for {md(config.model.label)}")
    cols = st.columns(3)
    bound: dict[str, Any] = {"bind": "query-params", "persist_state": "session"}  # in the link, kept across pages
    budget = cols[0].select_slider(
        "Activation memory budget",
        options=list(BUDGETS),
        value=0.5,
        key="tm_budget",
        help="torch's activation_memory_budget: 1 saves what min-cut would, 0 recomputes all it can",
        **bound,
    )
    loss = cols[1].selectbox("Loss", list(remat.LOSSES), key="tm_loss", help="of every floating-point output", **bound)
    optimizer = OPTIMIZER_BY_LABEL[
        cols[2].selectbox("Optimizer", list(OPTIMIZER_BY_LABEL), key="tm_optimizer", **bound)
    ]
    results = _sweep(graph, loss)
    if not results:
        return
    by_budget = {r.budget: r for r in results}
    result, save_all, redo_all = by_budget[budget], by_budget[1.0], by_budget[0.0]
    metrics = st.columns(4)
    less = save_all.saved_activation_bytes - result.saved_activation_bytes
    metrics[0].metric(
        "Saved activations",
        format_bytes(result.saved_activation_bytes),
        f"-{format_bytes(less)} against budget 1" if less else "as at budget 1",
        delta_color="inverse",
    )
    metrics[1].metric(
        "Recomputed nodes",
        len(result.recomputed),
        f"of {len(redo_all.recomputed)} at budget 0",
        delta_color="off",
        help=f"Nodes of the traced graph (as drawn below) whose output the backward "
        f"computes again: {result.recomputed_ops} aten ops once decomposed "
        f"({redo_all.recomputed_ops} at budget 0). Views are not counted: redoing them is free.",
    )
    metrics[2].metric("Recompute FLOPs", format_flops(result.recompute_flops))
    metrics[3].metric("Recompute time", format_seconds(result.recompute_time_s), "at 10 TFLOP/s", delta_color="off")
    if any(r.gradients_equal is False for r in results):
        st.error("The split forward and backward did not give eager's gradients at some budget.")
    elif any(r.gradients_equal is None for r in results):
        st.caption(
            "The weights are on the meta device (shapes only), so the joint trace ran on fake tensors: "
            "the figures are exact for these shapes, and the gradients were not computed to check the split."
        )
    left, right = st.columns(2)
    with left:
        st.plotly_chart(training_figures.tradeoff_figure(results, budget), key="tm_tradeoff_chart")
    with right:
        _memory(graph, result, results, optimizer)
    st.markdown("##### What the backward reads and recomputes")
    st.caption(
        "Blue: the backward reads the node's saved output; orange: the backward computes it "
        "again; grey: neither. Hover a node for its details."
    )
    dot = training_figures.remat_to_dot(graph, result)
    show_graph(dot, key="tm_graph", height=640)
    digest = hashlib.sha256(dot.encode()).hexdigest()[:8]
    st.download_button(
        "Download the results (JSON)",
        data=json.dumps([r.to_dict() for r in results], indent=2),
        file_name=f"remat-{digest}.json",
        mime="application/json",
        key="tm_download",
    )


main()
