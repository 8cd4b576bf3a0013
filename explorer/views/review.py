"""Review & edit: download the plan, load one (file or pasted JSON), move nodes by hand and see
latency and validity recomputed at once (``partitioner.evaluate_plan`` + ``Plan.violations``).

The edited mapping lives in ``st.session_state["edit"]`` (a frozen ``explorer.builders.editing.Edit``),
so an error never loses it; messages from loading a plan stay until the next load. Every change
(a move, a placement, a load, starting over) first keeps the edit it replaces in
``st.session_state["edit_history"]`` (``editing.remember``), so Undo steps back through them and
nothing made is lost.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Mapping, Sequence

import streamlit as st

from explorer import compute, graph_panels, loading, panels
from explorer.builders import editing, tables
from explorer.builders.config import PlanConfig
from explorer.builders.text import md
from partitioner import Device, Graph, Plan, rescore
from partitioner.draw.dot import shown_name
from partitioner.plan.size import plan_from_json
from partitioner.units import format_rate, format_seconds

EDIT = "edit"
LOAD_MESSAGE = "plan_load_message"
UPLOAD_SEEN = "plan_upload_seen"
HISTORY = "edit_history"  # editing.History: (what the change was, the edit before it, or None)


def _remember(what: str) -> None:
    """Keep the edit as it is now, before ``what`` replaces it, for Undo."""
    st.session_state[HISTORY] = editing.remember(st.session_state.get(HISTORY, ()), what, st.session_state.get(EDIT))


def _undo() -> None:
    history = st.session_state.get(HISTORY, ())
    if not history:
        return
    st.session_state[HISTORY], before = editing.undo(history)
    if before is None:
        st.session_state.pop(EDIT, None)
    else:
        st.session_state[EDIT] = before
    st.session_state.pop(SCORED, None)
    st.session_state.pop(LOAD_MESSAGE, None)


def _load(text: str | bytes, source: str, graph: Graph) -> None:
    """Read plan JSON into the edit; a bad file leaves the current edit as it was."""
    try:
        loaded = plan_from_json(text, graph)  # refused at once when larger than the model allows
        problems = loaded.violations(graph)
    except Exception as exc:  # PlanFormatError names the fix; anything else is explained too
        st.session_state[LOAD_MESSAGE] = ("error", f"Could not read {md(source)}: {md(compute.explain_error(exc))}")
        return
    edit = editing.edit_from_plan(loaded, source=source, loaded=True)
    _remember(f"loading {source}")
    st.session_state[EDIT] = edit
    if problems:
        st.session_state[LOAD_MESSAGE] = (
            "warning",
            f"Loaded {md(source)} ({len(loaded.partitions)} partitions); checked against the current model "
            "it breaks these rules:\n\n" + "\n".join(f"- {md(p)}" for p in problems),
        )
    else:
        st.session_state[LOAD_MESSAGE] = ("success", f"Loaded {md(source)}: valid for the current model.")


def load_ui(graph: Graph) -> None:
    st.markdown("##### Load a plan")
    left, right = st.columns(2)
    with left:
        upload = st.file_uploader(
            "Plan JSON file",
            type=["json"],
            key="plan_upload",
            help="A plan saved from this app or `partition-explorer plan`",
        )
        if upload is not None and st.session_state.get(UPLOAD_SEEN) != upload.file_id:
            st.session_state[UPLOAD_SEEN] = upload.file_id
            _load(upload.getvalue(), f"file {upload.name}", graph)
    with right:
        text = st.text_area("...or paste plan JSON", key="plan_paste", height=100)
        if st.button("Load pasted plan", key="plan_paste_load"):
            if text.strip():
                _load(text, "the pasted plan", graph)
            else:
                st.session_state[LOAD_MESSAGE] = ("error", "Nothing pasted: paste the plan's JSON text first.")
    message = st.session_state.get(LOAD_MESSAGE)
    if message:
        kind, body = message
        {"error": st.error, "warning": st.warning, "success": st.success}[kind](body)


def _devices(edit: editing.Edit, config: PlanConfig) -> list[Device]:
    if (
        edit.loaded is not None
        and st.radio(
            "Score the plan on",
            ["plan", "sidebar"],
            key="review_devices",
            horizontal=True,
            format_func={"plan": "the devices in the plan file", "sidebar": "the devices in the sidebar"}.get,
        )
        == "plan"
    ):
        return list(edit.loaded.devices)
    return config.device_list()


def edit_ui(edit: editing.Edit, plan: Plan, graph: Graph) -> tuple[str, editing.Edit] | None:
    """Widgets for one edit; returns (what was done, the new mapping) when a button was pressed."""
    where = plan.node_to_partition()
    names = [n for n in graph.op_names if n in where]
    parts = sorted(plan.partitions, key=lambda p: p.id)
    device_names = {d.logical_id: shown_name(d.name) for d in plan.devices}  # cut: a plan file's names are any length

    def part_label(pid: int) -> str:
        if pid == editing.NEW:
            return "a new partition"
        p = next(q for q in parts if q.id == pid)
        return f"P{pid} on {', '.join(device_names.get(d, str(d)) for d in p.device_ids)}"

    st.markdown("##### Move a node")
    cols = st.columns([3, 3, 2, 1.2])
    node = cols[0].selectbox("Node", names, key="edit_node", format_func=lambda n: f"{n} (in P{where[n]})")
    target = cols[1].selectbox(
        "Move to", [p.id for p in parts] + [editing.NEW], key="edit_target", format_func=part_label
    )
    device = cols[2].selectbox(
        "New partition's device",
        sorted(device_names),
        key="edit_device",
        format_func=lambda d: device_names[d],
        disabled=target != editing.NEW,
    )
    cols[3].markdown("&nbsp;")
    if cols[3].button("Move", key="edit_move", type="primary") and node is not None:
        return f"the move of {node}", editing.move_node(edit, node, target, [device])
    st.markdown("##### Place a partition on other devices")
    cols = st.columns([3, 5, 1.2])
    pid = cols[0].selectbox("Partition", [p.id for p in parts], key="edit_place_partition", format_func=part_label)
    chosen = cols[1].multiselect(
        "Devices (several: replicated)",
        sorted(device_names),
        key="edit_place_devices",
        format_func=lambda d: device_names[d],
    )
    cols[2].markdown("&nbsp;")
    if cols[2].button("Place", key="edit_place") and pid is not None:
        if not chosen:
            st.warning("Choose at least one device to place the partition on.")
            return None
        return f"placing P{pid} on other devices", editing.place_partition(edit, pid, chosen)
    return None


def main() -> None:
    loaded = loading.current_plan()
    if loaded is None:
        return
    config, graph, result = loaded
    current = result.plan
    if current is not None:
        st.markdown("##### Download the current plan")
        panels.render_downloads(current, key="dl_current", stem=f"{current.model}_{current.mode}")
    else:
        st.error(f"The sidebar's settings give no plan: {md(result.error)}")
    load_ui(graph)

    edit = st.session_state.get(EDIT)
    if edit is None:
        if current is None:
            st.info("Load a plan above to review and edit it.")
            return
        edit = editing.edit_from_plan(current, source=f"the {current.mode} plan of {current.model}")
    st.divider()
    st.markdown(f"#### Editing {md(edit.source)}")
    devices = _devices(edit, config)
    # the sidebar's rate is a separate comparison below for a loaded plan
    base, rate, latency = editing.scoring_inputs(
        edit, current, config.transfer_rate_bytes_per_s, config.node_latency_map()
    )
    try:
        edited = _scored(edit, graph, devices, rate, latency, base)
    except Exception as exc:  # unknown nodes or devices: PartitionError naming them
        made_for = f" ({md(base.model)})" if base is not None and base.model else ""
        st.error(
            f"This mapping does not fit the current model or devices: {md(compute.explain_error(exc))}\n\n"
            f"Switch back to the model it was made for{made_for}, or start over from the current plan."
        )
        _history_buttons()
        return
    shown = editing.edit_from_plan(edited, source=edit.source)  # ids as the scored plan shows them
    edit = dataclasses.replace(edit, nodes=shown.nodes, placements=shown.placements)
    picked = edit_ui(edit, edited, graph)
    if picked is not None:
        what, changed = picked
        try:  # renumber partitions as the scored plan does, so the ids shown stay right
            rescored = _scored(changed, graph, devices, rate, latency, base)
            _remember(what)
            st.session_state[EDIT] = dataclasses.replace(
                editing.edit_from_plan(rescored, source=edit.source), loaded=edit.loaded
            )
        except Exception as exc:
            st.error(f"That edit cannot be scored: {md(compute.explain_error(exc))}")
        else:
            st.rerun()
    panels.render_summary(edited, reference=base)
    if edit.loaded is not None and rate != config.transfer_rate_bytes_per_s:
        sidebar_view = rescore(edited, graph, transfer_rate_bytes_per_s=config.transfer_rate_bytes_per_s)
        st.info(
            f"These are the plan's own figures, at the transfer rate it was made with "
            f"({format_rate(rate)}). Re-scored at the sidebar's rate "
            f"({format_rate(config.transfer_rate_bytes_per_s)}) the same partitions take "
            f"{format_seconds(sidebar_view.latency_s)}."
        )
    panels.render_violations(edited.violations(graph))
    panels.render_cost_models(edited, graph)
    left, right = st.columns([3, 2])
    with left:
        graph_panels.render_dag(edited, graph, key="review")
    with right:
        if base is not None:
            _moves(base, edited, edit.source)
        panels.render_downloads(edited, key="dl_edited", stem=f"{edited.model}_edited")
        _history_buttons()
    panels.render_charts(edited)
    if base is not None and st.toggle("Side by side with the plan before the edit", key="review_sbs_on"):
        graph_panels.render_side_by_side(
            base, edited, f"before: {edit.source}", "after the edit", key="review_sbs", graph=graph
        )


def _moves(base: Plan, edited: Plan, source: str) -> None:
    """The nodes the edit moved from ``base`` (a placement moves every node of its partition)."""
    moves = tables.moves_table(base, edited)
    st.markdown(f"**Nodes moved** from {md(source)}: {len(moves)}")
    if len(moves):
        st.dataframe(moves, hide_index=True)
        placed = int((moves["change"] != "other partition").sum())
        if placed:
            st.caption(f"{placed} of them stay in their partition, placed on other devices.")


SCORED = "edit_scored"


def _scored(
    edit: editing.Edit,
    graph: Graph,
    devices: list[Device],
    rate: float | None,
    latency: Mapping[str, Sequence[float]] | None,
    base: Plan | None,
) -> Plan:
    """``editing.evaluate_edit`` once per mapping: a move scores its edit, and the rerun that
    shows it finds that plan here instead of scoring it again."""
    key = json.dumps(
        [
            edit.nodes,
            edit.placements,
            [d.to_dict() for d in devices],
            rate,
            latency,
            graph.fingerprint(),
            base.to_json(indent=None) if base is not None else None,
        ],
        sort_keys=True,
        default=str,
    )
    cached = st.session_state.get(SCORED)
    if cached is not None and cached[0] == key:
        return cached[1]
    plan = editing.evaluate_edit(edit, graph, devices, rate, latency, base=base)
    st.session_state[SCORED] = (key, plan)
    return plan


def _reset() -> None:
    if st.session_state.get(EDIT) is not None:
        _remember("starting over")
    st.session_state.pop(EDIT, None)
    st.session_state.pop(SCORED, None)
    st.session_state.pop(LOAD_MESSAGE, None)


def _history_buttons() -> None:
    """Undo (the last move, placement, load or start over) beside Start over."""
    history = st.session_state.get(HISTORY, ())
    left, right = st.columns(2)
    left.button(
        "Undo",
        key="edit_undo",
        on_click=_undo,
        disabled=not history,
        icon=":material/undo:",
        help=f"Undo {md(history[-1][0])}" if history else "Nothing to undo yet",
    )
    right.button(
        "Start over",
        key="edit_reset",
        on_click=_reset,
        icon=":material/restart_alt:",
        help="From the current plan of the sidebar; your edit is kept: Undo brings it back",
    )


main()
