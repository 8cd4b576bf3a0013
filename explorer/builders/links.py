"""A shared link's query parameters read as the sidebar's widgets would take them: each value
typed and checked against its widget's rule (a number's range, a choice among the options, a
size knob of the model's config), out-of-range numbers clamped and unreadable values dropped,
each with a note that says why. Pure: the app's ``explorer.state`` applies the result."""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from partitioner.units import parse_bytes

__all__ = ["LinkValues", "read_link", "URL_KEYS", "HF_URL_KEYS", "RANGES"]

URL_KEYS: dict[str, type] = {"model": str, "dev_preset": str, "dev_count": int, "dev_memory": str,
                             "transfer_gbps": float, "dev_headroom": float, "mode": str, "saturate_host": bool,
                             "force_partition": bool, "torch_cost_model": bool}
HF_URL_KEYS: dict[str, type] = {"hf_name": str, "hf_set": str, "hf_batch": int, "hf_seq": int}  # with hf: only
# The sidebar widgets' own bounds (None: unbounded on that side).
RANGES: dict[str, tuple[float | None, float | None]] = {"dev_count": (1, 1024), "transfer_gbps": (0.0, None),
                                                        "dev_headroom": (0.0, 90.0),
                                                        "hf_batch": (1, 4096), "hf_seq": (1, 1 << 20)}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class LinkValues:
    """What a link sets (session-state key -> value) and a note for each value it could not."""

    values: dict[str, Any]
    notes: tuple[str, ...]


def _typed(name: str, kind: type, text: str) -> Any:
    """``text`` as ``kind``, the way the widget of that type holds it; ValueError names the rule."""
    if kind is bool:
        low = text.strip().lower()
        if low not in _TRUE + _FALSE:
            raise ValueError(f"{name} must be true or false")
        return low in _TRUE
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{name} must be a whole number") from None
    if kind is float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{name} must be a number") from None
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number")
        return value
    return text


def _clamped(key: str, value: Any, text: str, notes: list[str]) -> Any:
    low, high = RANGES.get(key, (None, None))
    if low is not None and value < low:
        notes.append(f"{key}={text} in the link is below the least, {low:g}: set to {low:g}")
        return type(value)(low)
    if high is not None and value > high:
        notes.append(f"{key}={text} in the link is above the most, {high:g}: set to {high:g}")
        return type(value)(high)
    return value


def _knobs(model: str, params: Mapping[str, str], config_class: Callable[[str], type] | None,
           notes: list[str]) -> dict[str, Any]:
    """The link's ``knob_<model>_<field>`` values typed by the model's config; a value the config
    refuses on its own (a width of 0, a bool that is not one) is dropped with the config's reason."""
    given = {k: v for k, v in params.items() if k.startswith("knob_")}
    if not given or config_class is None:
        return {}
    cls = config_class(model)
    hints = typing.get_type_hints(cls)
    fields = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    typed: dict[str, Any] = {}
    for key, text in sorted(given.items()):
        field = key.removeprefix(f"knob_{model}_") if key.startswith(f"knob_{model}_") else None
        if field not in fields or fields[field] not in (bool, int, float):
            notes.append(f"{key} in the link was ignored: it is not a size knob of {model}")
            continue
        try:
            typed[field] = _typed(field, fields[field], text)
        except ValueError as exc:
            notes.append(f"{key}={text} in the link was ignored: {exc}")
    out: dict[str, Any] = {}
    for field, value in typed.items():
        try:
            cls(**{field: value})  # the config's own checks (e.g. sizes > 0)
        except (ValueError, TypeError) as exc:
            notes.append(f"knob_{model}_{field}={given[f'knob_{model}_{field}']} in the link was ignored: {exc}")
            continue
        out[f"knob_{model}_{field}"] = value
    return out


def read_link(params: Mapping[str, str], models: Sequence[str], modes: Sequence[str], presets: Sequence[str],
              hf_model: str, config_class: Callable[[str], type] | None = None) -> LinkValues:
    """The sidebar values of a link's query ``params``. ``models`` are the sample models' names
    (``hf_model`` the choice for Hugging Face architectures), ``modes`` and ``presets`` the
    selectboxes' options, ``config_class(model)`` a sample model's config dataclass (its fields are
    the size knobs). Nothing raises: what a widget could not hold is clamped or dropped, with a note.
    O(number of parameters)."""
    notes: list[str] = []
    model = params.get("model")
    if model is None:
        return LinkValues({}, ())
    hf = model == hf_model
    if model not in models and not hf:
        return LinkValues({}, (f"model={model} in the link was ignored: choose one of {', '.join(models)}",))
    kinds = {**URL_KEYS, **(HF_URL_KEYS if hf else {})}
    choices: dict[str, Sequence[str]] = {"mode": modes, "dev_preset": presets}
    values: dict[str, Any] = {}
    for key, text in params.items():
        if key.startswith("knob_"):
            continue
        if key not in kinds:
            notes.append(f"{key} in the link was ignored: it is not a setting a link carries")
            continue
        try:
            value = _typed(key, kinds[key], text)
            if key in choices and value not in choices[key]:
                raise ValueError(f"{key} must be one of {', '.join(choices[key])}")
            if key == "dev_memory":
                parse_bytes(value)  # the sidebar's own reader; a PartitionError (a ValueError) names the rule
        except ValueError as exc:
            notes.append(f"{key}={text} in the link was ignored: {exc}")
            continue
        values[key] = _clamped(key, value, text, notes) if key in RANGES else value
    if not hf:
        values.update(_knobs(model, params, config_class, notes))
    return LinkValues(values, tuple(notes))
