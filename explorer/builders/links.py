"""A shared link's query parameters read as the sidebar's widgets would take them: each value
typed and checked against its widget's rule (a number's range, a choice among the options, a
size knob of the model's config), out-of-range numbers clamped and unreadable values dropped,
each with a note that says why. Pure: the app's ``explorer.state`` applies the result.

NOTE: [Bound keys] The page widgets in :data:`BOUND_KEYS` are held in the URL by Streamlit's own
binding (``bind="query-params"``): Streamlit reads them from a link (dropping a value the widget
cannot hold), writes them back as they change, and keeps them out of the URL at their defaults.
Nothing here reads or writes them; :func:`bound_notes` only says which of a link's values the
binding dropped. The sidebar is not bound: its links are checked beyond what a widget checks
(a memory size parsed, a size knob checked by the model's config, a number out of range clamped
rather than dropped). The Plan a cluster and Training memory pages' keys are carried here too, and
the Learn page's (its player sets the step before the slider is drawn; a bound algorithm box would
put its label, not its name, in the URL).

NOTE: [Page keys] A link carries only the keys of :data:`PAGE_URL_KEYS` and the per-accelerator
patterns of ``_PAGE_PATTERNS``: the widgets that take a value. Any other key is dropped with a note
naming it, never put in session state: a button's key set from a link (``cl_min_cut_run=1``)
makes Streamlit refuse the page (StreamlitValueAssignmentNotAllowedError), and a key no widget
reads would ride along in every link after. A widget added to a page is added to the table. A
value is said in a note cut to :data:`SHOWN_CHARS` characters; a text value longer than
:data:`MAX_LINK_TEXT` is dropped (a layout or a preset name is tens of characters)."""

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
    "page_kind",
    "URL_KEYS",
    "HF_URL_KEYS",
    "PAGE_URL_KEYS",
    "PAGE_PREFIXES",
    "RANGES",
    "BOUND_KEYS",
    "bound_notes",
    "MAX_LINK_TEXT",
    "SHOWN_CHARS",
    "shown",
]

MAX_LINK_TEXT = 500  # characters of one value a link carries
MAX_SAFE_INTEGER = 2**53 - 1  # a browser's number box holds no larger whole number (JavaScript's)
SHOWN_CHARS = 60  # of a value or a key, in a note

# Page widgets bound to the URL by Streamlit (NOTE: [Bound keys]).
BOUND_KEYS = (
    "explore_view",
    "explore_overlay",
    "explore_search",
    "pp_ranks",
    "pp_microbatches",
    "pp_schedule",
    "pp_training",
    "sh_training",
)

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
# The sidebar widgets' own bounds (None: unbounded on that side).
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
    "cl_generate": (0, 1 << 16),
    "cl_per_node": (1, 64),
    "cl_max_nodes": (1, 4096),  # Llama 3's 16,384 H100s are 2,048 nodes of 8; the CLI's --max-nodes too
    "cl_headroom": (0.0, 64.0),
    "cl_host_gib": (1.0, 65536.0),  # host memory a node, GiB (the command line's --host-memory, up to 64 TiB)
    "cl_price_": (0.0, 1000.0),  # every accelerator's $ per device-hour (its number box's range)
}
# What each page's own widgets hold (its view), carried by a link to that page: the key's prefix
# names the page; only the keys listed below are carried (NOTE: [Page keys]).
PAGE_PREFIXES: dict[str, str] = {
    "explore": "explore_",
    "learn": "learn_",
    "pipeline": "pp_",
    "training": "tm_",
    "sharding": "sh_",
    "cluster": "cl_",
}
PAGE_URL_KEYS: dict[str, type] = {  # the page keys Streamlit does not bind
    "learn_algorithm": str,  # not bound: the URL would hold its label (format_func), not its name
    "learn_step": int,  # the player sets it before its slider is drawn
    "tm_budget": float,
    "tm_loss": str,
    "tm_optimizer": str,
    "sh_spec_from": str,  # the Sharding spec's origin ("model", "suggest"), made again by the receiver
    "cl_kind": str,
    "cl_engine": str,
    "cl_serve_engine": str,
    "cl_serve_batch": int,
    "cl_prompt": int,
    "cl_batch": int,
    "cl_seq": int,
    "cl_precision": str,
    "cl_optimizer": str,
    "cl_tokens": float,
    "cl_generate": int,
    "cl_accelerator": str,
    "cl_per_node": int,
    "cl_max_nodes": int,
    "cl_inter": str,
    "cl_headroom": float,
    "cl_host_gib": float,
    "cl_write": str,
}
_PAGE_PATTERNS: tuple[tuple[str, type], ...] = (("cl_intra_", str), ("cl_price_", float))
# Plan a cluster keys that are actions or files, never a view: buttons, downloads, charts, run state.
_NOT_CARRIED = (
    "cl_open",
    "cl_run",
    "cl_min_cut",
    "cl_dl_",
    "cl_stage_dag",
    "cl_memory",
    "cl_time",
    "cl_timeline",
    "cl_rank_memory",
    "cl_pareto",
    "cl_run_chart",
)
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


def _range(key: str) -> tuple[float | None, float | None]:
    if key in RANGES:
        return RANGES[key]
    return next((r for k, r in RANGES.items() if k.endswith("_") and key.startswith(k)), (None, None))


def _clamped(key: str, value: Any, text: str, notes: list[str]) -> Any:
    low, high = _range(key)
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
) -> LinkValues:
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


def page_kind(key: str, value: Any = None) -> type | None:
    """The type a page key holds (None: not a key a link carries, NOTE: [Page keys]). ``value``:
    the session value being written, which must be of that type (a button's state is a bool)."""
    if key in BOUND_KEYS:
        return None
    kind = PAGE_URL_KEYS.get(key) or next((k for prefix, k in _PAGE_PATTERNS if key.startswith(prefix)), None)
    if kind is None or any(key == k or (k.endswith("_") and key.startswith(k)) for k in _NOT_CARRIED):
        return None
    if value is not None and (
        isinstance(value, bool) is not (kind is bool) or not isinstance(value, (int, float, str))
    ):
        return None
    return kind


def page_keys(page: str, state: Mapping[str, Any]) -> dict[str, str]:
    """The query parameters of ``page``'s view (a key of :data:`PAGE_PREFIXES`): its widgets'
    values in ``state`` (session state) as text. O(len(state))."""
    prefix = PAGE_PREFIXES.get(page)
    if prefix is None:
        return {}
    out = {}
    for key, value in state.items():
        if not isinstance(key, str) or not key.startswith(prefix) or value is None:
            continue
        kind = page_kind(key, value)
        if kind is None:
            continue
        out[key] = repr(float(value)) if kind is float else str(value)
    return dict(sorted(out.items()))


def read_page_link(params: Mapping[str, str], choices: Mapping[str, Sequence[Any]] | None = None) -> LinkValues:
    """The page widgets' values of a link's query ``params`` (keys of :data:`PAGE_URL_KEYS`, the
    cluster page's other ``cl_`` keys): typed, a number clamped to its widget's range, a choice
    checked against ``choices[key]`` (the widget's options) and dropped with a note when it is not
    one. Parameters that are neither a page key nor a sidebar one are left to :func:`read_link`.
    O(number of parameters)."""
    choices = choices or {}
    accelerators = choices.get("cl_accelerator")
    notes: list[str] = []
    values: dict[str, Any] = {}
    for key, text in params.items():
        if key in BOUND_KEYS or not any(key.startswith(p) for p in PAGE_PREFIXES.values()):
            continue  # a bound key is Streamlit's to read; a sidebar key read_link's
        kind = page_kind(key)
        pattern = next((p for p, _ in _PAGE_PATTERNS if key.startswith(p)), None)
        if kind is not None and pattern and accelerators is not None and key.removeprefix(pattern) not in accelerators:
            kind = None  # an accelerator the page has no widget for
        if kind is None:
            notes.append(_ignored(key, None, "no widget of the page takes it (only its settings go in a link)"))
            continue
        try:
            if len(text) > MAX_LINK_TEXT:
                raise ValueError(f"a link's value is at most {MAX_LINK_TEXT} characters")
            value = _typed(key, kind, text)
            options = choices.get(key)
            if options is not None and value not in options:
                raise ValueError(f"{key} must be one of {', '.join(map(str, options))}")
        except ValueError as exc:
            notes.append(_ignored(key, text, str(exc)))
            continue
        values[key] = _clamped(key, value, text, notes)
    return LinkValues(values, tuple(notes))


def bound_notes(link: Mapping[str, str], state: Mapping[str, Any]) -> tuple[str, ...]:
    """A note for each value a link gave a bound widget (NOTE: [Bound keys]) that the widget does not
    hold after Streamlit's binding read it (not one of its options, out of its range, not a number):
    ``link`` the link's parameters, ``state`` session state after the page drew its widgets. A key
    whose widget was not drawn says nothing. O(len(BOUND_KEYS))."""
    notes = []
    for key in BOUND_KEYS:
        if key not in link or key not in state:
            continue
        value, text = state[key], link[key]
        try:
            same = value is not None and _typed(key, type(value), text) == value
        except ValueError:
            same = False
        if not same:
            notes.append(_ignored(key, text, f"its widget cannot hold it (it shows {shown(value)})"))
    return tuple(notes)
