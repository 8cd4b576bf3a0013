"""A shared link's query parameters read as the sidebar's widgets would take them: each value
typed and checked against its widget's rule (a number's range, a choice among the options, a
size knob of the model's config), out-of-range numbers clamped and unreadable values dropped,
each with a note that says why. Pure: the app's ``explorer.state`` applies the result.

NOTE: [Bound keys] A page's widgets are held in the URL by Streamlit's own binding
(``bind="query-params"``, with ``persist_state="session"`` so a page switch keeps them): Streamlit
reads them from a link (dropping a value the widget cannot hold: not an option, out of its range),
writes them back as they change, and keeps them out of the URL at their defaults. A key names its
page by its prefix (:data:`PAGE_PREFIXES`); nothing here lists a page's widgets. After the page drew
its widgets, :func:`bound_notes` says which of the link's page keys no widget holds: dropped by the
binding, a button's or a chart's key, or a key no widget of the page reads; the app then takes them
out of the URL. None is put in session state: a button's key set from a link
(``cl_min_cut_run=1``) makes Streamlit refuse the page (StreamlitValueAssignmentNotAllowedError).
Only :data:`HAND_KEYS` are carried here, since no binding can hold them: the Learn player sets
``learn_step`` before its slider is drawn (a bound widget's value cannot be set then), the
algorithm box shows a label (``format_func``) that the binding would put in the URL,
``sh_spec_from`` is no widget, and the engine radios (``explorer.panels.engine_ui``) start at a
default set in session state, which a bound widget would write into every link. The sidebar is not bound: its links are checked beyond what a widget
checks (a memory size parsed, a size knob checked by the model's config, a number out of range
clamped rather than dropped). A value is said in a note cut to :data:`SHOWN_CHARS` characters; a
text value longer than :data:`MAX_LINK_TEXT` is dropped (a preset name is tens of characters)."""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from explorer.builders.stepping import MAX_GROUPS
from explorer.builders.text import number
from partitioner.units import parse_bytes

__all__ = [
    "LinkValues",
    "read_link",
    "read_page_link",
    "page_keys",
    "URL_KEYS",
    "HF_URL_KEYS",
    "HAND_KEYS",
    "PAGE_PREFIXES",
    "RANGES",
    "bound_notes",
    "MAX_LINK_TEXT",
    "SHOWN_CHARS",
    "shown",
]

MAX_LINK_TEXT = 500  # characters of one value a link carries
MAX_SAFE_INTEGER = 2**53 - 1  # a browser's number box holds no larger whole number (JavaScript's)
SHOWN_CHARS = 60  # of a value or a key, in a note

URL_KEYS: dict[str, type] = {
    "model": str,
    "dev_preset": str,
    "dev_engine": str,
    "dev_count": int,
    "dev_memory": str,
    "transfer_gbps": float,
    "dev_headroom": float,
    "mode": str,
    "saturate_host": bool,
    "force_partition": bool,
    "torch_cost_model": bool,
}
HF_URL_KEYS: dict[str, type] = {"hf_name": str, "hf_set": str, "hf_batch": int, "hf_seq": int}  # with hf: only
# The bounds of the fields that take any number and say a value out of range (explorer.fields), the
# sidebar's and the Plan a cluster page's (the command line's too); None: unbounded on that side.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "dev_count": (1, 1024),
    "transfer_gbps": (0.0, None),
    "dev_headroom": (0.0, 90.0),
    "hf_batch": (1, 4096),
    "hf_seq": (1, 1 << 20),
    "learn_step": (1, MAX_GROUPS),  # the player's steps (explorer.builders.stepping.MAX_GROUPS)
    "cl_batch": (1, 1 << 20),
    "cl_serve_batch": (1, 1 << 20),
    "cl_prompt": (1, 1 << 20),
    "cl_seq": (1, 1 << 20),
    "cl_tokens": (1e6, 1e15),
    "cl_max_nodes": (1, 4096),  # Llama 3's 16,384 H100s are 2,048 nodes of 8; the CLI's --max-nodes too
    "cl_host_gib": (1.0, 65536.0),  # host memory a node, GiB (the command line's --host-memory, up to 64 TiB)
}
# The page a key belongs to, by its prefix (NOTE: [Bound keys]).
PAGE_PREFIXES: dict[str, str] = {
    "explore": "explore_",
    "learn": "learn_",
    "pipeline": "pp_",
    "training": "tm_",
    "sharding": "sh_",
    "cluster": "cl_",
}
# Not bound (NOTE: [Bound keys]); the engine radios' default is set in session state (explorer.panels).
HAND_KEYS: dict[str, type] = {
    "learn_algorithm": str,
    "learn_step": int,
    "sh_spec_from": str,
    "cl_engine": str,
    "cl_serve_engine": str,
}
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


def shown(text: Any, limit: int = SHOWN_CHARS) -> str:
    """``text`` as a note says it: cut to ``limit`` characters, with its length when cut."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _clamped(key: str, value: Any, text: str, notes: list[str]) -> Any:
    low, high = RANGES.get(key, (None, None))
    if low is not None and value < low:
        notes.append(f"{key}={shown(text)} in the link is below the least, {number(low)}: set to {number(low)}")
        return type(value)(low)
    if high is not None and value > high:
        notes.append(f"{key}={shown(text)} in the link is above the most, {number(high)}: set to {number(high)}")
        return type(value)(high)
    return value


def _ignored(key: str, text: str | None, why: str) -> str:
    said = shown(key) if text is None else f"{shown(key)}={shown(text)}"
    return f"{said} in the link was ignored: {why}"


def _knobs(
    model: str, params: Mapping[str, str], config_class: Callable[[str], type] | None, notes: list[str]
) -> dict[str, Any]:
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
            notes.append(_ignored(key, None, f"it is not a size knob of {model}"))
            continue
        try:
            value = _typed(field, fields[field], text)
            if fields[field] in (int, float) and abs(value) > MAX_SAFE_INTEGER:
                raise ValueError(f"{field} must be at most {MAX_SAFE_INTEGER:,} (what a number box holds)")
            typed[field] = value
        except ValueError as exc:
            notes.append(_ignored(key, text, str(exc)))
    out: dict[str, Any] = {}
    for field, value in typed.items():
        try:
            cls(**{field: value})  # the config's own checks (e.g. sizes > 0)
        except (ValueError, TypeError) as exc:
            notes.append(_ignored(f"knob_{model}_{field}", given[f"knob_{model}_{field}"], str(exc)))
            continue
        out[f"knob_{model}_{field}"] = value
    return out


def read_link(
    params: Mapping[str, str],
    models: Sequence[str],
    modes: Sequence[str],
    presets: Sequence[str],
    hf_model: str,
    config_class: Callable[[str], type] | None = None,
    default_model: str | None = None,
) -> LinkValues:
    """The sidebar values of a link's query ``params``. ``models`` are the sample models' names
    (``hf_model`` the choice for Hugging Face architectures), ``modes`` and ``presets`` the
    selectboxes' options, ``config_class(model)`` a sample model's config dataclass (its fields are
    the size knobs). A link naming no model sets ``default_model`` (the sidebar's current choice),
    when given. Nothing raises: what a widget could not hold is clamped or dropped, with a note.
    O(number of parameters)."""
    notes: list[str] = []
    model = params.get("model", default_model)
    if model is None:
        return LinkValues({}, ())
    hf = model == hf_model
    if model not in models and not hf:
        return LinkValues({}, (_ignored("model", model, f"choose one of {', '.join(models)}"),))
    kinds = {**URL_KEYS, **(HF_URL_KEYS if hf else {})}
    choices: dict[str, Sequence[str]] = {"mode": modes, "dev_preset": presets, "dev_engine": ("eager", "graphs")}
    values: dict[str, Any] = {}
    for key, text in params.items():
        if key.startswith("knob_") or (key not in kinds and any(key.startswith(p) for p in PAGE_PREFIXES.values())):
            continue  # a size knob (read below) or a page's own setting (read_page_link)
        if key not in kinds:
            notes.append(_ignored(key, None, "it is not a setting a link carries"))
            continue
        try:
            if len(text) > MAX_LINK_TEXT:
                raise ValueError(f"a link's value is at most {MAX_LINK_TEXT} characters")
            value = _typed(key, kinds[key], text)
            if key in choices and value not in choices[key]:
                raise ValueError(f"{key} must be one of {', '.join(choices[key])}")
            if key == "dev_memory":
                parse_bytes(value)  # the sidebar's own reader; a PartitionError (a ValueError) names the rule
        except ValueError as exc:
            notes.append(_ignored(key, text, str(exc)))
            continue
        values[key] = _clamped(key, value, text, notes)
    if not hf:
        values.update(_knobs(model, params, config_class, notes))
    return LinkValues(values, tuple(notes))


def _page_of(key: str) -> str | None:
    return next((page for page, prefix in PAGE_PREFIXES.items() if key.startswith(prefix)), None)


def page_keys(page: str, state: Mapping[str, Any]) -> dict[str, str]:
    """The hand-carried keys (:data:`HAND_KEYS`) of ``page`` (a key of :data:`PAGE_PREFIXES`) in
    ``state`` (session state), as text: the rest of a page's view is Streamlit's to write."""
    kinds = {k: kind for k, kind in HAND_KEYS.items() if _page_of(k) == page}
    return {k: str(state[k]) for k in sorted(kinds) if isinstance(state.get(k), kinds[k])}


def read_page_link(params: Mapping[str, str], choices: Mapping[str, Sequence[Any]] | None = None) -> LinkValues:
    """The hand-carried page values of a link's query ``params`` (:data:`HAND_KEYS`): typed, a
    number clamped to its range, a choice checked against ``choices[key]`` (the widget's options),
    dropped with a note when it is not one. Other page keys are left to Streamlit's binding and
    :func:`bound_notes`; the sidebar's to :func:`read_link`. O(number of parameters)."""
    choices = choices or {}
    notes: list[str] = []
    values: dict[str, Any] = {}
    for key, text in params.items():
        if key not in HAND_KEYS:
            continue
        try:
            if len(text) > MAX_LINK_TEXT:
                raise ValueError(f"a link's value is at most {MAX_LINK_TEXT} characters")
            value = _typed(key, HAND_KEYS[key], text)
            options = choices.get(key)
            if options is not None and value not in options:
                raise ValueError(f"{key} must be one of {', '.join(map(str, options))}")
        except ValueError as exc:
            notes.append(_ignored(key, text, str(exc)))
            continue
        values[key] = _clamped(key, value, text, notes)
    return LinkValues(values, tuple(notes))


def bound_notes(
    link: Mapping[str, str], state: Mapping[str, Any], page: str, left: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A note for each page key of a link (a key with a page's prefix, not in :data:`HAND_KEYS`) that
    no widget holds after ``page`` drew its widgets: ``link`` the link's parameters, ``state`` session
    state then, ``left`` the URL's parameters then (Streamlit's binding takes out or corrects a value its
    widget cannot hold, and leaves alone a key no widget is bound to). A key of another page, a key no widget
    drawn is bound to (a button's, a chart's, a field not shown) and a value the binding dropped (not
    an option, out of the widget's range, not of its type) are each named (NOTE: [Bound keys]).
    Returns key -> note. O(len(link))."""
    notes = {}
    left = left or {}
    for key, text in link.items():
        owner = _page_of(key)
        if owner is None or key in HAND_KEYS:
            continue
        value = state.get(key) if owner == page else None
        try:
            held = isinstance(value, (bool, int, float, str)) and _typed(key, type(value), text) == value
        except ValueError:
            held = False
        if held:
            continue
        if owner != page or key not in state or left.get(key) == text:
            notes[key] = _ignored(key, None, "no widget of the page takes it (only its settings go in a link)")
        else:
            why = f"out of its widget's range, not one of its options or not of its type (it shows {shown(value)})"
            notes[key] = _ignored(key, text, why)
    return notes
