"""Reading what a person types or uploads: device tables, sizes, per-node latency files.

Every failure raises :class:`InputError` (a ``ValueError``) whose message names the row or
field, the rule and the fix, so the app can show it with ``st.error`` as it is.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import Any, Iterable, Mapping, Sequence

import partitioner
from partitioner import PRESETS, Device, DeviceSpecError
from partitioner.device_profile import DeviceProfile, cached_profiles, find_profile
from partitioner.devices import preset_fields, preset_profile
from partitioner.interop.readers import LatencyFileError, read_node_latency_text

__all__ = [
    "InputError",
    "DEVICE_COLUMNS",
    "CUSTOM",
    "exact_bytes_text",
    "device_types",
    "type_spec",
    "device_rows",
    "rows_to_devices",
    "with_headroom",
    "DEFAULT_HEADROOM_PERCENT",
    "parse_node_latency",
    "user_models_allowed",
    "ALLOW_USER_MODELS_ENV",
    "hf_default_fields",
    "hf_fields_for",
    "preset_overrides",
    "size_warning",
]

ALLOW_USER_MODELS_ENV = "PARTITION_EXPLORER_ALLOW_USER_MODELS"
CUSTOM = "custom"
# Columns of the device table (st.data_editor); speeds in the units people quote.
DEVICE_COLUMNS = ("name", "preset", "memory", "peak TFLOP/s", "memory GB/s", "link GB/s")
_SPEEDS = (  # (column, Device field, scale from the column's unit to the field's)
    ("peak TFLOP/s", "peak_flops", 1e12),
    ("memory GB/s", "memory_bandwidth_bytes_per_s", 1e9),
    ("link GB/s", "link_bandwidth_bytes_per_s", 1e9),
)
_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


class InputError(ValueError):
    """Something a person typed or uploaded cannot be read; the message says how to fix it."""


def exact_bytes_text(n: int) -> str:
    """A size that parses back to exactly ``n``: 1572864 -> '1.5 MiB', 1000 -> '1000 B'."""
    for unit, scale in _UNITS:
        value = round(n / scale, 3)
        if value >= 1:
            text = f"{value:.3f}".rstrip("0").rstrip(".") + f" {unit}"
            if partitioner.parse_bytes(text) == n:
                return text
    return f"{n} B"


def device_types() -> list[str]:
    """What the device type can be: custom, a preset, or a profile measured on this machine
    (``partition-explorer calibrate``; a profile named like a preset is reached by its file only)."""
    return [CUSTOM, *sorted(PRESETS), *(name for name in cached_profiles() if name not in PRESETS)]


def type_spec(kind: str) -> tuple[dict[str, Any], DeviceProfile | None]:
    """A device type's memory and speeds (Device fields) and, for a measured one, its profile;
    ``({}, None)`` for custom or a type that is not there (a profile deleted since)."""
    if kind in PRESETS:  # a GPU preset carries its kernel curves (measured or derived)
        return preset_fields(kind), preset_profile(kind)
    profile = find_profile(kind) if kind != CUSTOM else None
    if profile is None:
        return {}, None
    link = profile.link
    return {
        "memory_bytes": profile.memory_bytes,
        "peak_flops": profile.peak_flops,
        "memory_bandwidth_bytes_per_s": profile.memory_bandwidth_bytes_per_s,
        "link_bandwidth_bytes_per_s": link.bandwidth_bytes_per_s if link else None,
    }, profile


def device_rows(count: int, memory: str, preset: str = CUSTOM) -> list[dict[str, Any]]:
    """Rows of the device table for ``count`` equal devices (a preset or measured profile, or
    ``memory`` each)."""
    spec, _ = type_spec(preset)
    if preset != CUSTOM and not spec:
        raise InputError(f"unknown device type {preset!r}; choose one of {', '.join(device_types())}")
    rows = []
    for i in range(int(count)):
        row: dict[str, Any] = {"name": f"dev_{i}", "preset": preset, "memory": memory}
        if preset != CUSTOM:
            row["name"] = f"{preset}_{i}"
            row["memory"] = exact_bytes_text(spec["memory_bytes"])
            for column, field, scale in _SPEEDS:
                row[column] = spec[field] / scale if spec.get(field) else None
        else:
            for column, _, _ in _SPEEDS:
                row[column] = None
        rows.append(row)
    return rows


def _blank(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()


def rows_to_devices(rows: Iterable[Mapping[str, Any]]) -> list[Device]:
    """Devices from table rows, logical ids 0.. in row order. A blank memory or speed takes the
    row's preset value; a blank name becomes ``dev_<i>``."""
    devices: list[Device] = []
    for i, row in enumerate(rows):
        name = str(row.get("name") or "").strip() or f"dev_{i}"
        where = f"device row {i + 1} ({name})"
        preset = row.get("preset")
        preset = CUSTOM if _blank(preset) else str(preset).strip()
        preset = preset.lower() if preset.lower() in PRESETS else preset
        spec, profile = type_spec(preset)
        if preset != CUSTOM and not spec:
            raise InputError(f"{where}: unknown device type {preset!r}; choose one of {', '.join(device_types())}")
        memory = row.get("memory")
        if _blank(memory):
            if not spec:
                raise InputError(f"{where}: memory is empty; write a size such as '16GiB' or pick a preset")
            memory_bytes = int(spec["memory_bytes"])
        else:
            try:
                memory_bytes = partitioner.parse_bytes(str(memory).strip())
            except DeviceSpecError as exc:
                raise InputError(f"{where}: {exc}") from None
            if memory_bytes == 0:
                raise InputError(
                    f"{where}: memory must be more than 0 B (got {str(memory).strip()!r}); "
                    "a device with no memory holds nothing: write its memory, e.g. '16GiB'"
                )
        speeds: dict[str, float | None] = {}
        for column, field, scale in _SPEEDS:
            value = row.get(column)
            if _blank(value):
                speeds[field] = spec.get(field)
                continue
            try:
                number = float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise InputError(f"{where}: {column} must be a number (got {value!r})") from None
            if not number > 0:
                raise InputError(f"{where}: {column} must be > 0 or left empty (got {value!r})")
            speeds[field] = number * scale
            if (
                spec.get(field)
                and field != "link_bandwidth_bytes_per_s"
                and not math.isclose(number * scale, spec[field], rel_tol=1e-6)
            ):
                profile = None  # speeds of one's own: the roofline of them, not the type's kernel curves
        try:
            devices.append(
                Device(name=name, memory_bytes=memory_bytes, logical_id=i, kind=preset, profile=profile, **speeds)
            )
        except DeviceSpecError as exc:
            raise InputError(f"{where}: {exc}") from None
    if not devices:
        raise InputError("the device table is empty; add at least one row (or set the count above 0)")
    names = [d.name for d in devices]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"device names must be unique; {', '.join(dupes)} repeat; rename one of them")
    return devices


# Memory kept free on every device by default: 5 % is 4 GiB of an 80 GiB H100, what the Plan a
# cluster page keeps (CUDA context, allocator fragmentation, communication buffers); plans that
# fill a device to 100 % are not what a practitioner would run.
DEFAULT_HEADROOM_PERCENT = 5.0


def with_engine(devices: list[Device], engine: str) -> list[Device]:
    """``devices`` timed for ``engine`` (partitioner.kernels.ENGINES) where they carry kernel
    curves; the others as they are."""
    return [
        dataclasses.replace(d, profile=d.profile.with_engine(engine))
        if d.profile is not None and d.profile.gpu is not None
        else d
        for d in devices
    ]


def with_headroom(devices: list[Device], percent: float) -> list[Device]:
    """``devices`` with ``percent`` of each one's memory kept free (what the modes may fill is the
    rest); the name, id and speeds stay."""
    if not 0 <= percent < 100:
        raise InputError(f"the memory headroom must be from 0 to under 100 % (got {percent:g} %)")
    if not percent:
        return devices
    return [dataclasses.replace(d, memory_bytes=max(1, int(d.memory_bytes * (1 - percent / 100)))) for d in devices]


def parse_node_latency(data: bytes | str, filename: str = "latency.json") -> dict[str, tuple[float, float]]:
    """Per-node latencies from an uploaded JSON or CSV file: the library's one reader
    (:func:`partitioner.interop.readers.read_node_latency_text`), its errors as :class:`InputError`."""
    try:
        return read_node_latency_text(data, filename)
    except LatencyFileError as exc:
        raise InputError(str(exc)) from None


def user_models_allowed(environ: Mapping[str, str] | None = None, argv: Sequence[str] | None = None) -> bool:
    """True when the operator started the app allowing ``package.module:factory`` models:
    ``PARTITION_EXPLORER_ALLOW_USER_MODELS=1`` or ``streamlit run explorer/app.py --
    --allow-user-models``. Loading one runs its code, so it is off unless asked for."""
    environ = os.environ if environ is None else environ
    argv = sys.argv if argv is None else argv
    flag = environ.get(ALLOW_USER_MODELS_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return flag or "--allow-user-models" in argv


HF_DEFAULT_LAYERS = 2  # layers the hf: source builds by default: a what-if that traces in seconds


def _bare(name: str) -> str:
    return name.strip().removeprefix("hf:")


def _preset_fields(name: str) -> dict[str, Any]:
    """The fields preset ``name`` sets (its checkpoint's config); {} for an architecture."""
    from sample_models import HF_PRESETS as PRESETS

    return dict(PRESETS[_bare(name)][1]) if _bare(name) in PRESETS else {}


def hf_default_fields(name: str) -> str:
    """The config fields the hf: source starts ``name`` with: for an architecture, two layers under
    the field names of its architecture (``n_layer=2`` for gpt2, ``num_hidden_layers=2`` for llama);
    for a preset, none (a preset is chosen to ask about the checkpoint's real size); "" when the
    architecture is unknown."""
    from sample_models import layer_fields

    if _preset_fields(name):
        return ""
    return " ".join(f"{field}={HF_DEFAULT_LAYERS}" for field in layer_fields(_bare(name)))


def hf_fields_for(text: str, old: str, new: str) -> str:
    """The config fields ``text`` of architecture ``old`` carried over to architecture ``new``: the
    default of ``old`` becomes the default of ``new``, and a layer count under ``old``'s field name
    moves to ``new``'s (``n_layer=4 dtype=bf16`` -> ``num_hidden_layers=4 dtype=bf16``); other
    fields are kept as the person wrote them. Choosing a preset clears the fields the preset sets
    (its layers, widths, vocabulary): ``n_layer=2 dtype=bf16`` -> ``dtype=bf16`` for llama-3-70b."""
    from sample_models import layer_fields

    if text.strip() == hf_default_fields(old):
        return hf_default_fields(new)
    sets = _preset_fields(new)
    if sets:  # layer counts moved to the preset's architecture's names, then what the preset sets dropped
        moved = hf_fields_for(text, old, _preset_arch(new))
        return " ".join(item for item in moved.split() if item.split("=", 1)[0] not in sets)
    before = layer_fields(_bare(old))
    after = layer_fields(_bare(new))
    if len(before) != 1 or len(after) != 1 or before == after:
        return text
    return " ".join(
        after[0] + item[len(before[0]) :] if item.startswith(before[0] + "=") else item for item in text.split()
    )


def _preset_arch(name: str) -> str:
    from sample_models import HF_PRESETS as PRESETS

    return PRESETS[_bare(name)][0] if _bare(name) in PRESETS else ""


def preset_overrides(spec: str, overrides: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """The fields of preset ``spec`` (``hf:llama-3-70b``) that ``overrides`` set to another value,
    as (field, given, the preset's); [] for an architecture or a preset left at its size."""
    sets = _preset_fields(spec)
    return [
        (field, overrides[field], value)
        for field, value in sets.items()
        if field in overrides and overrides[field] != value
    ]


def size_warning(spec: str, overrides: Mapping[str, Any]) -> str | None:
    """What a page's heading says when a preset's size is overridden: "llama-3-70b with 2 of 80
    layers: ..." (None when the model is the preset's real size or not a preset)."""
    changed = preset_overrides(spec, overrides)
    if not changed:
        return None
    from sample_models import layer_fields

    layers = set(layer_fields(_bare(spec)))
    said = [
        f"{given:,} of {value:,} layers" if field in layers else f"{field}={given} (the checkpoint's {value})"
        for field, given, value in changed
    ]
    return (
        f"{_bare(spec)} with {', '.join(said)}: every figure on this page is for that smaller model, not the "
        f"checkpoint. Clear {', '.join(f for f, _, _ in changed)} in the sidebar's Config fields for the real size."
    )
