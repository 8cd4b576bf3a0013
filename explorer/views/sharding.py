"""Sharding: the sidebar's devices run the model together (tensor parallelism); a person shards
parameters along an axis (autodist's partition lists, DTensor's Colwise/RowwiseParallel), sees
each device's memory and the collectives the spec adds, and runs it on local processes."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

import streamlit as st

import sample_models
from explorer import loading, panels, state
from explorer.builders import measured_figures, sharding_tables, training_figures
from explorer.builders.text import counted, md
from partitioner import Device, Graph, ShardingError, format_bytes, sharding
from partitioner.calibration.naming import calibrated_words
from partitioner.sharding import tensor_parallel
from partitioner.units import format_seconds

SPECS = "shard_specs"  # graph fingerprint -> {parameter: partition list}, the person's edits
VERSION = "shard_editor_version"  # bumped when a suggestion replaces the table
SPEC_FROM = "sh_spec_from"  # how the shown spec was made ("model", "suggest"): a link carries it
RUNS = "shard_runs"  # spec hash -> its last real run


def _module(config: state.PlanConfig, graph: Graph) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """What the ranks run: an hf: model as built (its exported graph cannot be pickled; the same
    name and settings build the same weights), else the traced module."""
    from partitioner.runtime.execute import picklable

    if sample_models.is_hf(config.model.name):
        return sample_models.load(config.model.name, dict(config.model.overrides))
    return picklable(graph.graph_module), graph.example_inputs or (), {}


def _run(config: state.PlanConfig, graph: Graph, plan: tensor_parallel.TPPlan, training: bool) -> None:
    from partitioner.sharding.tp_run import run_sharded

    key = hashlib.sha256(json.dumps([plan.spec, training], sort_keys=True).encode()).hexdigest()[:16]
    runs = st.session_state.setdefault(RUNS, {})
    with st.expander("Run on local processes", expanded=key in runs):
        if any(p.is_meta for p in graph.graph_module.parameters()):
            st.info(
                "This model was built at full size on the meta device (shapes only, no weights), so it cannot "
                "run; the memory and collectives above are predictions. To run it, choose a smaller size in "
                "the sidebar (fewer layers, a smaller hidden size) so that it gets real weights."
            )
            return
        st.caption(
            f"Starts {plan.world_size} processes with torch.distributed over gloo, applies the styles "
            "with parallelize_module, runs the example inputs and compares the outputs with one process, "
            "and the collectives CommDebugMode counts with the prediction."
        )
        why = panels.too_many_processes(plan.world_size)
        if why:
            st.info(f"Cannot run this spec here: {why}.")
        if st.button("Run on local processes", key="sh_run", disabled=bool(why), help=why):

            def start(progress: Callable[[str], None]) -> Any:
                module, inputs, kwargs = _module(config, graph)
                return run_sharded(
                    module,
                    inputs,
                    plan,
                    training=training,
                    timeout_s=180,
                    progress=progress,
                    example_kwargs=kwargs,
                    repeats=5,
                )

            try:
                done = panels.run_with_status(start)
            except ShardingError as exc:
                done = None
                st.error(f"Cannot run it: {md(exc)}")
            if done is not None:
                runs[key] = done
        result = runs.get(key)
        if result is None:
            return
        good, verdict = sharding_tables.run_verdict(result)
        (st.success if good else st.error)(verdict.format(counted=md(result.counted())))
        _forward_against_prediction(config, graph, plan, result.forward_s)


def _forward_against_prediction(
    config: state.PlanConfig, graph: Graph, plan: tensor_parallel.TPPlan, measured_s: float
) -> None:
    """The run's forward (median of 5 warm ones on rank 0) beside the one predicted on the
    devices' measured profile, by part; without a profile, how to get one."""
    from partitioner.cost.measured import device_profile
    from partitioner.cost.runs import tp_forward

    profile = device_profile(config.device_list())
    if profile is None:
        st.caption(
            f"Forward measured {format_seconds(measured_s)} (median of 5 warm ones on rank 0). For a "
            "prediction to hold it against, measure this machine (`partition-explorer calibrate`) and "
            "choose its profile, `local`, as the device type in the sidebar."
        )
        return
    predicted = tp_forward(graph, plan, profile)
    st.plotly_chart(
        measured_figures.predicted_parts_figure(predicted.parts, measured_s, "The tensor-parallel forward"),
        key="sh_run_chart",
    )
    st.caption(
        md(
            f"Predicted on the measured profile {profile.name!r}"
            + (f" ({calibrated_words(profile)})" if profile.measured_at else "")
            + ": compute of each rank's shard, DTensor's "
            "dispatch per sharded module and each collective; measured: the median of 5 warm forwards on "
            "rank 0."
        )
    )


def _made_spec(
    made: str, graph: Graph, devices: list[Device], rate: float | None, training: bool
) -> dict[str, str] | None:
    """The spec ``made`` names: ``"model"`` the model's own plan, ``"suggest"`` the suggestion that
    fits (with the gradients and Adam's states when ``training``); None with the reason said."""
    try:
        if made == "model":
            return tensor_parallel.from_model_plan(graph, len(devices))
        asked = devices
        if training:  # a spec that fits with the gradients and optimizer state
            unsharded = sharding.device_memory(graph, devices, {})
            copies = sharding_tables.training_copies(graph)
            asked = sharding_tables.devices_for_training(graph, devices, unsharded, copies)
        return tensor_parallel.suggest(graph, asked, rate)
    except ShardingError as exc:  # in training its figures are of the devices asked, not the real ones
        if made == "model":
            st.error(f"The model's plan does not apply: {md(exc)}")
        else:
            st.error(
                "No suggestion that trains with Adam: sharding everything that splits still leaves a device "
                "over its memory once the gradients and Adam's two states are counted; add devices or memory, "
                "turn training off, or also cut the model into stages (pipeline)"
                if training
                else f"No suggestion: {md(exc)}"
            )
        return None


def _spec_ui(graph: Graph, devices: list[Device], rate: float | None) -> tuple[dict[str, str], bool]:
    """The spec editor: training or not, the model's own plan or a suggestion, and the table a
    person edits (kept per model in session state); returns (the spec, training)."""
    specs = st.session_state.setdefault(SPECS, {})
    key = graph.fingerprint()
    fresh = key not in specs  # this model's first view in the session: a link's spec is made
    spec = specs.setdefault(key, {})
    cols = st.columns([1, 1, 2])
    training = cols[1].toggle(
        "Training with Adam",
        key="sh_training",
        bind="query-params",
        persist_state="session",
        help="each device holds its shard of the weights, their gradients and Adam's two states "
        "(16 bytes a parameter in mixed precision, 4 copies of the weights in fp32), and the backward's "
        "collectives are counted; off: inference, the weights alone",
    )
    made = None
    if graph.model_info.tp_plan and cols[1].button(
        "Use the model's own plan",
        key="sh_model_plan",
        help="transformers' config.base_model_tp_plan: attention by heads, MLPs column then row",
    ):
        made = "model"
    if cols[0].button("Suggest a spec that fits", key="sh_suggest"):
        made = "suggest"
    if made is None and fresh and st.session_state.get(SPEC_FROM) in ("model", "suggest"):
        made = st.session_state[SPEC_FROM]  # a link's: the spec its sender made, made again here
    if made is not None:
        made_spec = _made_spec(made, graph, devices, rate, training)
        if made_spec is not None:
            spec = specs[key] = made_spec
            st.session_state[SPEC_FROM] = made  # a link carries how the spec was made (not later edits)
            st.session_state[VERSION] = st.session_state.get(VERSION, 0) + 1
            state.write_url()
    cols[2].caption(
        'A Linear\'s weight split by rows ("n,1") runs column-parallel, by columns ("1,n") '
        "row-parallel; an Embedding split by rows, row-parallel; GPT-2's Conv1D weight is (in, out), so "
        '"1,n" is its column split. n is the number of devices. The suggestion starts from a Hugging '
        "Face model's own plan where it has one."
    )
    edited = st.data_editor(
        sharding_tables.parameter_table(graph, spec),
        key=f"sh_editor_{st.session_state.get(VERSION, 0)}",
        disabled=["parameter", "shape", "bytes"],
        hide_index=True,
        width="stretch",
        column_config={
            "spec": st.column_config.TextColumn("spec", help="autodist's partition list, e.g. 2,1; empty = replicated")
        },
    )
    specs[key] = sharding_tables.spec_from_rows(edited.to_dict("records"))
    return specs[key], bool(training)


def main() -> None:
    inputs = loading.page_inputs()
    if inputs is None:
        return
    config, graph = inputs
    devices = config.device_list()
    st.markdown(f"#### Sharding {md(config.model.label)} over {counted(len(devices), 'device')}")
    if len(devices) < 2 or graph.graph_module is None:
        st.info("Sharding needs at least two devices (set them in the sidebar) and a traced model.")
        return
    rate = config.transfer_rate_bytes_per_s
    spec, training = _spec_ui(graph, devices, rate)
    try:
        plan = tensor_parallel.tp_plan(graph, spec, len(devices), rate, training=training)
        before = sharding.device_memory(graph, devices, {})
        after = sharding.device_memory(graph, devices, plan.spec)
        if training:  # NOTE: [Training memory on Sharding]
            copies = sharding_tables.training_copies(graph)
            before, after = (sharding_tables.with_training_state(graph, before, m, copies) for m in (before, after))
    except ShardingError as exc:
        st.error(f"{md(exc)}. Your edits are kept; fix the spec in the table.")
        return
    head = sharding_tables.memory_headline(devices, before, after)
    metrics = st.columns(3)
    metrics[0].metric(
        "Largest device memory",
        format_bytes(head.largest_bytes),
        f"-{format_bytes(head.saved_bytes)} sharded" if head.saved_bytes > 0 else None,
        delta_color="inverse",
        help=None if head.saved_bytes > 0 else "Nothing is sharded yet: every device holds the whole model.",
    )
    metrics[1].metric("Collectives per step", sum(plan.counts(None).values()))
    metrics[2].metric("Communication time", format_seconds(plan.comm_time_s))
    (st.warning if head.over else st.success)(
        f"Over capacity: {md(', '.join(head.over))}."
        if head.over
        else "Every device fits" + (", with the gradients and Adam's two states." if training else ".")
    )
    st.plotly_chart(training_figures.shard_memory_figure(before, after, devices), key="sh_memory_chart")
    st.caption(
        "Memory of training with Adam: each device's shard of the weights, their gradients and Adam's two "
        "states (the ZeRO paper's 16 bytes a parameter in mixed precision, 4 copies of the weights in fp32), "
        "and the activations, which tensor parallelism does not shard here."
        if training
        else "Memory of inference: each device's shard of the weights and the activations; turn on Training "
        "with Adam to count gradients and optimizer state."
    )
    st.markdown("##### Collectives the spec adds")
    if plan.collectives:
        st.dataframe(
            sharding_tables.collectives_table(plan),
            hide_index=True,
            width="stretch",
            column_config={
                "Collective": st.column_config.TextColumn(width="small"),
                "Pass": st.column_config.TextColumn(width="small"),
                "Bytes": st.column_config.TextColumn(width="small"),
                "Time": st.column_config.TextColumn(width="small"),
                "Why": st.column_config.TextColumn(width="large"),
            },
        )
    else:
        st.caption("None: nothing is sharded.")
    st.download_button(
        "Download the spec (JSON)",
        json.dumps(plan.spec, indent=2),
        file_name="shard_spec.json",
        mime="application/json",
        key="sh_download",
    )
    _run(config, graph, plan, training)


main()
