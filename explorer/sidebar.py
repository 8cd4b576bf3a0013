"""The sidebar: ``*_ui()`` functions that read the widgets and return what a plan needs.

Rendered by the router on every page; every widget keeps its value for the session
(``persist_state="session"``), so what a person entered stays put while they move between pages,
even on a run a page switch ends before the sidebar is drawn, and size knobs keep theirs per model.
What a link carries is bound to the URL by Streamlit (:data:`explorer.fields.BOUND`, NOTE: [Bound
keys] in ``explorer.builders.links``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
import math
import re
from typing import Any

import streamlit as st

import partitioner
import sample_models
from explorer import compute, state
from explorer.builders.config import DEFAULT_MODEL, PLAN_MODES, ModelChoice, PlanConfig
from explorer.builders.inputs import (
    DEFAULT_HEADROOM_PERCENT,
    InputError,
    hf_default_fields,
    hf_fields_for,
    parse_node_latency,
    user_models_allowed,
)
from explorer.builders.text import md
from explorer.devices_panel import devices_ui, follow_model_devices
from explorer.fields import BOUND, bounded_number, clear_range_notes

__all__ = [
    "config_ui",
    "model_ui",
    "knobs_ui",
    "mode_ui",
    "hf_ui",
    "DEFAULT_MODEL",
    "PLAN_MODES",
    "USER_MODEL",
    "HF_MODEL",
]

USER_MODEL = "your own model..."
HF_MODEL = state.HF_MODEL
HF_DEVICE_TYPE = "h100-80gb"  # what a Hugging Face model runs on when the devices follow the model
HF_SPARE = 1.1  # room for the inputs a partition reads from others, beyond the model's own bytes


def config_ui() -> PlanConfig | None:
    """The whole sidebar; None while an input there is unreadable (the sidebar says why)."""
    clear_range_notes()
    with st.sidebar:
        st.subheader("Model")
        choice = model_ui()
        st.subheader("Devices")
        devices, rate = devices_ui()
        st.subheader("Partition mode")
        mode, options = mode_ui()
    if choice is None or devices is None or options is None:
        return None
    return PlanConfig.build(choice, devices, mode=mode, transfer_rate_bytes_per_s=rate, **options)


def model_ui() -> ModelChoice | None:
    allowed = user_models_allowed()
    options = sample_models.names() + [HF_MODEL] + ([USER_MODEL] if allowed else [])
    name = st.selectbox(
        "Model",
        options,
        index=options.index(DEFAULT_MODEL),
        key="model",
        **BOUND,
        help="A sample model; start the app with PARTITION_EXPLORER_ALLOW_USER_MODELS=1 to load your own."
        if not allowed
        else "A sample model, or your own factory.",
    )
    follow_model_devices(name, sample=name not in (USER_MODEL, HF_MODEL))
    if name == HF_MODEL:
        choice = hf_ui()
        if choice is not None:
            follow_hf_devices(choice)
        return choice
    st.session_state.pop(state.HF_DEVICES_FOR, None)  # the next hf: model chosen gets its devices
    if name == USER_MODEL:
        spec = st.text_input(
            "Model factory (package.module:factory)",
            key="user_factory",
            persist_state="session",
            placeholder="my_models:build",
            help="A callable taking no arguments that returns (module, example_inputs). Its folder "
            "must be on PYTHONPATH. Loading it runs its code.",
        )
        if st.button("Reload the model", key="user_reload", help="Import the factory again after editing it"):
            state.bump_model_generation()
        if not spec.strip():
            st.info("Write the import path of your model factory, e.g. `my_models:build`.")
            return None
        return ModelChoice(spec.strip(), user=True, generation=state.model_generation())
    st.caption(sample_models.describe(name))
    return ModelChoice(name, knobs_ui(name))


def hf_ui() -> ModelChoice | None:
    """A ``transformers`` architecture or preset by name, with config fields; None (and a message
    saying what to do) when transformers is missing or a field is wrong."""
    if importlib.util.find_spec("transformers") is None:
        st.info(
            "Hugging Face architectures need the transformers package: run "
            '`.venv/bin/pip install -c constraints.txt -e ".[hf]"` and restart the app.'
        )
        return None
    from sample_models import HF_PRESETS as PRESETS
    from sample_models import TOKEN_SETTINGS

    st.session_state.setdefault("hf_name", st.query_params.get("hf_name", "gpt2"))  # the binding's, on a link
    st.session_state.setdefault("hf_set", hf_default_fields(st.session_state["hf_name"]))  # a link's preset: none
    # The fields follow the architecture: a name sent with the form carries the fields over (its
    # default becomes the new one's, a layer count moves to the new field name) before they show.
    built_for = st.session_state.setdefault("hf_fields_for", st.session_state["hf_name"])
    if st.session_state["hf_name"].strip() != built_for.strip():
        st.session_state["hf_set"] = hf_fields_for(st.session_state["hf_set"], built_for, st.session_state["hf_name"])
        st.session_state["hf_fields_for"] = st.session_state["hf_name"]
    # One form: a change of any field traces once, with every field applied, when it is sent
    # (Enter in a field, or the button), rather than once per field.
    with st.form("hf_model", border=False, enter_to_submit=True):
        name = st.text_input(
            "Architecture or preset",
            key="hf_name",
            **BOUND,
            help="A transformers model type (llama, gpt2, t5, bert, vit, mixtral, ...) or a "
            f"checkpoint's config: {', '.join(PRESETS)}. Nothing is downloaded; models over "
            "50 M parameters get meta weights (shapes only).",
        )
        sets = st.text_input(
            "Config fields",
            key="hf_set",
            **BOUND,
            placeholder="num_hidden_layers=2 dtype=bf16",
            help="field=value pairs of its transformers config, space-separated; "
            "dtype=bf16, fp16 or fp32 sets the weights' and activations' type",
        )
        left, right = st.columns(2)
        batch = bounded_number(
            left,
            "Batch size",
            1,
            4096,
            fallback=TOKEN_SETTINGS["batch_size"],
            step=1,
            value=TOKEN_SETTINGS["batch_size"],
            key="hf_batch",
            **BOUND,
            help="sequences (or images) in the example input",
        )
        seq = bounded_number(
            right,
            "Sequence length",
            1,
            1 << 20,
            fallback=TOKEN_SETTINGS["seq_len"],
            step=1,
            value=TOKEN_SETTINGS["seq_len"],
            key="hf_seq",
            **BOUND,
            help=f"tokens per sequence in the example input (default {TOKEN_SETTINGS['seq_len']}: "
            "a what-if that traces fast; the real length traces on meta weights in seconds)",
        )
        st.form_submit_button("Build and trace", key="hf_build", help="Apply every field above at once")
    spec = "hf:" + name.strip().removeprefix("hf:")
    try:
        overrides = sample_models.parse_overrides(spec, sets.split(), where="Config fields")
    except ValueError as exc:
        st.error(md(exc))
        return None
    for key, value in (("batch_size", int(batch)), ("seq_len", int(seq))):  # the fields win over dtype-like sets
        if value != TOKEN_SETTINGS[key]:
            overrides[key] = value
        else:
            overrides.pop(key, None)
    typed = "dtype=" in sets
    st.caption(
        f"Built from its config with transformers, in **{md(overrides.get('dtype', 'fp32'))}**"
        + ("" if typed or "dtype" not in overrides else " (its checkpoint's; `dtype=fp32` in the fields to change)")
        + ". A model of identical layers is traced a few layers deep and repeated (seconds, Llama 3.1 405B "
        "included); one that is not is traced whole, up to minutes at real size; then the trace is on disk."
    )
    return ModelChoice(spec, tuple(sorted(overrides.items())))


def hf_device_count(need_bytes: int, device_bytes: int, headroom_percent: float) -> int:
    """The fewest devices of ``device_bytes`` each (less the headroom) that hold ``need_bytes`` with
    :data:`HF_SPARE` to spare, 2 to 1024: at least two, so every page has devices to split it over."""
    usable = device_bytes * (1 - min(max(headroom_percent, 0.0), 90.0) / 100)
    return int(min(1024, max(2, math.ceil(need_bytes * HF_SPARE / usable))))


def follow_hf_devices(choice: ModelChoice) -> None:
    """With *Switch to each model's default devices* ticked, a newly named hf: architecture or preset
    gets the fewest :data:`HF_DEVICE_TYPE` devices that hold it (the sample models' few MiB would
    hold none of it), and the sidebar says so. It is traced here (the page reuses the trace); one
    that cannot be traced keeps the devices and its page says why. A link's devices stand."""
    seen = st.session_state.get(state.HF_DEVICES_FOR)
    if seen == state.LINK_DEVICES or not st.session_state.get("follow_model", True):
        st.session_state[state.HF_DEVICES_FOR] = choice.name
        st.session_state.pop(state.HF_DEVICES_NOTE, None)
        return
    if seen != choice.name:
        try:
            graph = compute.trace(choice)
        except (ValueError, RuntimeError, TypeError):  # the page says why; tried again once it traces
            return
        st.session_state[state.HF_DEVICES_FOR] = choice.name
        device_bytes = partitioner.hardware.HARDWARE[HF_DEVICE_TYPE].memory_bytes
        headroom = st.session_state.get("dev_headroom", DEFAULT_HEADROOM_PERCENT)
        count = hf_device_count(graph.total_size_bytes, device_bytes, float(headroom or 0))
        st.session_state.update({"dev_preset": HF_DEVICE_TYPE, "dev_count": count})
        st.session_state[state.HF_DEVICES_NOTE] = (
            f"Devices set to {count} x {HF_DEVICE_TYPE}: the fewest (two at least) that hold its "
            f"{partitioner.format_bytes(graph.total_size_bytes)} (untick *Switch to each model's default "
            "devices* to keep your own)."
        )
    note = st.session_state.get(state.HF_DEVICES_NOTE)
    if note:
        st.caption(md(note))


@functools.lru_cache(maxsize=None)
def _field_comments(cls: type) -> dict[str, str]:
    """The ``# comment`` after each field in the config dataclass's source (base classes too)."""
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        for match in re.finditer(r"^\s+(\w+)\s*:[^#\n]*#\s*(.+)$", source, flags=re.M):
            found[match.group(1)] = match.group(2).strip()
    return found


def knobs_ui(name: str) -> tuple[tuple[str, Any], ...]:
    """The size knobs of sample model ``name`` (its config's int, float and bool fields), as
    sorted overrides of the defaults."""
    cls = sample_models.config_class(name)
    defaults = cls()
    comments = _field_comments(cls)
    overrides: dict[str, Any] = {}
    with st.expander("Size knobs", expanded=False):
        for field in dataclasses.fields(cls):
            default = getattr(defaults, field.name)
            key = f"knob_{name}_{field.name}"
            if not isinstance(default, (bool, int, float)):
                continue
            tip = comments.get(field.name)
            if isinstance(default, bool):
                value: Any = st.checkbox(field.name, value=default, key=key, help=tip, **BOUND)
            elif isinstance(default, int):
                value = st.number_input(field.name, value=default, step=1, key=key, help=tip, **BOUND)
            else:
                value = st.number_input(field.name, value=default, format="%g", key=key, help=tip, **BOUND)
            if value != default:
                overrides[field.name] = value
        st.button("Reset to defaults", key=f"knob_reset_{name}", on_click=_reset_knobs, args=(name,))
    return tuple(sorted(overrides.items()))


def _reset_knobs(name: str) -> None:
    defaults = sample_models.config_class(name)()
    for field in dataclasses.fields(defaults):
        key = f"knob_{name}_{field.name}"
        if key in st.session_state:
            st.session_state[key] = getattr(defaults, field.name)


def mode_ui() -> tuple[str, dict[str, Any] | None]:
    """The mode and its options (None when an uploaded latency file cannot be read)."""
    mode = st.selectbox(
        "Mode",
        PLAN_MODES,
        index=PLAN_MODES.index(partitioner.DEFAULT_MODE),
        key="mode",
        help="See the Learn page for what each mode does",
        **BOUND,
    )
    st.caption(partitioner.DESCRIPTIONS.get(mode, "").split(". ")[0].strip().rstrip(".") + ".")
    saturate = st.checkbox("Saturate host (copy the plan onto idle devices)", key="saturate_host", **BOUND)
    force = st.checkbox("Force partitioning when the model fits one device", key="force_partition", **BOUND)
    torch_numbers = st.checkbox(
        "Numbers as torch's partitioner computes them",
        key="torch_cost_model",
        **BOUND,
        help="torch.fx's partitioner_utils: an input counted for every node "
        "reading it, partitions on one device overlapping in time. The Learn "
        "page explains the differences.",
    )
    source = st.radio(
        "Node latencies",
        ["roofline", "upload"],
        key="latency_source",
        persist_state="session",
        horizontal=True,
        format_func={"roofline": "roofline estimate", "upload": "upload per node"}.get,
        help="Roofline: max(bytes / memory bandwidth, FLOPs / peak FLOP/s) on the slowest device",
    )
    node_latency = None
    if source == "upload":
        upload = st.file_uploader(
            "Per-node latencies (CSV or JSON)",
            type=["csv", "json"],
            key="latency_file",
            help='CSV with columns name, mem_s, compute_s; or JSON {"fc1": [mem_s, compute_s], ...}. '
            "Nodes left out keep the roofline estimate.",
        )
        if upload is None:
            st.caption("Until a file is uploaded the roofline estimate is used.")
        else:
            try:
                node_latency = parse_node_latency(upload.getvalue(), upload.name)
            except InputError as exc:
                st.error(md(exc))
                return mode, None
    st.session_state.setdefault("search_budget", 0)
    st.session_state.setdefault("time_limit_s", 10)
    with st.expander("Advanced", expanded=mode == "optimal"):
        budget = bounded_number(
            st,
            "Search budget (cost-model evaluations, 0 = automatic)",
            0,
            1_000_000,
            fallback=0,
            step=100,
            key="search_budget",
            persist_state="session",
            help="Caps the work of cost_aware and kl_based",
        )
        limit = bounded_number(
            st,
            "Solver time limit (s)",
            1,
            600,
            fallback=10,
            step=5,
            key="time_limit_s",
            persist_state="session",
            help="How long the optimal mode's solver may search; it runs in a "
            "worker process and keeps the best plan found",
        )
    return mode, {
        "saturate_host": bool(saturate),
        "force_partition": bool(force),
        "search_budget": int(budget) or None,
        "time_limit_s": float(limit),
        "node_latency": node_latency,
        "cost_model": "torch" if torch_numbers else "physical",
    }
