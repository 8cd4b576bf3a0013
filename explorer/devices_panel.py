"""The sidebar's Devices section: quick controls (count, memory or a device type), a per-device
table, headroom and the transfer rate; the controls follow each sample model's default devices."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import sample_models
from explorer.builders.inputs import (
    CUSTOM,
    DEFAULT_HEADROOM_PERCENT,
    DEVICE_COLUMNS,
    InputError,
    device_rows,
    device_types,
    exact_bytes_text,
    rows_to_devices,
    type_spec,
    with_engine,
    with_headroom,
)
from explorer.builders.text import md
from explorer.fields import BOUND, bounded_number
from explorer.panels import engine_ui
from partitioner import Device
from partitioner.calibration.naming import calibrated_words

__all__ = ["devices_ui", "follow_model_devices", "DEFAULT_TRANSFER_GBPS"]

# A PCIe-class link: with free transfers every mode finds the same plan, which hides what they do.
DEFAULT_TRANSFER_GBPS = 25.0
MAX_TRANSFER_GBPS = 1e6  # 1 PB/s: far above any link (NVLink 5 is 1.8 TB/s), a bound a typo meets


def follow_model_devices(name: str, sample: bool) -> None:
    """On the first run, and when the model changes while 'follow' is on, set the device
    controls to sample model ``name``'s default devices (on which it needs several devices);
    ``sample``: ``name`` is a sample model (not Hugging Face's, not a person's own)."""
    last = st.session_state.get("devices_for_model")
    if last == name:
        return
    st.session_state["devices_for_model"] = name
    if not sample or (last is not None and not st.session_state.get("follow_model", True)):
        return
    count, memory = sample_models.default_devices(name)
    st.session_state["dev_count"] = int(count)
    st.session_state["dev_memory"] = exact_bytes_text(int(memory))
    st.session_state["dev_preset"] = CUSTOM


def devices_ui() -> tuple[list[Device] | None, float | None]:
    """Devices from the quick controls (count, memory or preset) or the per-device table, and
    the transfer rate in bytes/s (None: from the devices' link bandwidth, or free)."""
    types = device_types()  # custom first: the default
    if st.session_state.get("dev_preset", CUSTOM) not in types:  # a measured profile deleted since
        st.session_state["dev_preset"] = CUSTOM
    preset = st.selectbox(
        "Device type",
        types,
        key="dev_preset",
        **BOUND,
        help="custom: give the memory; a preset brings real memory and speeds; a profile "
        "measured here (partition-explorer calibrate) brings this machine's curves",
    )
    _, kernels_of = type_spec(preset)
    if kernels_of is not None and kernels_of.measured_at:  # a calibrated profile: when and at what load
        st.caption(md(f"Profile {preset!r}: {calibrated_words(kernels_of)}."))
    engine = "eager"
    if kernels_of is not None and kernels_of.gpu is not None:
        engine = engine_ui("dev_engine", lambda e: kernels_of.with_engine(e).assumes)  # type: ignore[union-attr]
    # a value out of range (0, 99999) is said beside the field and above the page, not dropped in the browser
    # set in session state, not as the widgets' values: the sidebar sets them to each model's devices
    st.session_state.setdefault("dev_count", 4)
    st.session_state.setdefault("dev_memory", "16 GiB")
    count = bounded_number(st, "Number of devices", 1, 1024, fallback=4, step=1, key="dev_count", **BOUND)
    if preset == CUSTOM:
        memory = st.text_input("Memory per device", key="dev_memory", help="e.g. 16GiB, 512 MiB, 1.5GB", **BOUND)
    else:  # the type's memory shown; the custom memory is kept for when custom is chosen again
        memory = st.session_state.get("dev_memory", "16 GiB")
        st.text_input(
            "Memory per device",
            value=exact_bytes_text(type_spec(preset)[0]["memory_bytes"]),
            disabled=True,
            key=f"dev_memory_of_{preset}",
            help="set by the device type; choose custom to give your own",
        )
    edited = _device_table(int(count), memory, preset, types)
    headroom, rate_gbps = _headroom_and_rate()
    rate = float(rate_gbps) * 1e9 if rate_gbps else None
    try:
        return with_headroom(with_engine(rows_to_devices(edited.to_dict("records")), engine), float(headroom)), rate
    except InputError as exc:
        st.error(md(exc))
        return None, rate


def _device_table(count: int, memory: str, preset: str, types: list[str]) -> pd.DataFrame:
    """The per-device table (one row a device), started again whenever the quick controls change."""
    base = (count, memory, preset)
    if st.session_state.get("dev_base") != base:
        st.session_state["dev_base"] = base
        st.session_state["dev_table_version"] = st.session_state.get("dev_table_version", 0) + 1
    version = st.session_state["dev_table_version"]
    table = pd.DataFrame(device_rows(int(count), memory, preset), columns=list(DEVICE_COLUMNS))
    with st.expander("Edit devices one by one", expanded=False):
        st.caption(
            "One row per device (add or delete rows for a mixed set). Empty speeds take "
            "the preset's or a modest default. Changing the controls above restarts the table."
        )
        edited = st.data_editor(
            table,
            key=f"dev_table_{version}",
            num_rows="dynamic",
            hide_index=True,
            # Narrow columns, so all six fit the sidebar's width.
            column_config={
                "name": st.column_config.TextColumn(width="small"),
                "preset": st.column_config.SelectboxColumn(options=types, default=CUSTOM, width="small"),
                "memory": st.column_config.TextColumn(help="e.g. 16GiB", default=memory, width="small"),
                "peak TFLOP/s": st.column_config.NumberColumn(
                    "TFLOP/s", min_value=0.0, format="%g", width="small", help="peak TFLOP/s"
                ),
                "memory GB/s": st.column_config.NumberColumn(
                    "mem GB/s", min_value=0.0, format="%g", width="small", help="memory bandwidth, GB/s"
                ),
                "link GB/s": st.column_config.NumberColumn(
                    "link GB/s", min_value=0.0, format="%g", width="small", help="link bandwidth, GB/s"
                ),
            },
        )
    return edited


def _headroom_and_rate() -> tuple[float, float]:
    """The memory headroom (% of each device) and the transfer rate between devices (GB/s; 0: from the
    devices' link bandwidth), with the follow-the-model switch under them."""
    headroom = bounded_number(
        st,
        "Memory headroom (% of each device)",
        0.0,
        90.0,
        fallback=DEFAULT_HEADROOM_PERCENT,
        step=5.0,
        format="%g",
        value=DEFAULT_HEADROOM_PERCENT,
        key="dev_headroom",
        **BOUND,
        help=f"kept free on every device (CUDA context, allocator fragmentation, buffers): the modes plan "
        f"within the rest, and the charts show the rest as each device's capacity. {DEFAULT_HEADROOM_PERCENT:g} % "
        "by default: 4 GiB of an 80 GiB H100, as Plan a cluster keeps; 0 fills devices to the last byte",
    )
    rate_gbps = bounded_number(
        st,
        "Transfer rate between devices (GB/s)",
        0.0,
        MAX_TRANSFER_GBPS,
        fallback=DEFAULT_TRANSFER_GBPS,
        step=1.0,
        format="%g",
        value=DEFAULT_TRANSFER_GBPS,
        key="transfer_gbps",
        **BOUND,
        help="0: use the slowest link bandwidth the devices give; with none, transfers are free",
    )
    st.session_state.setdefault("follow_model", True)
    st.checkbox(
        "Switch to each model's default devices",
        key="follow_model",
        persist_state="session",
        help="When you pick another model, set the devices to ones on which it needs several",
    )
    return float(headroom), float(rate_gbps)
