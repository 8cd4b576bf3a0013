"""What a shared link set, and a note for each of its keys that no widget took. Pure: the app's
``explorer.state`` applies the result.

NOTE: [Bound keys] Every widget a link carries, the sidebar's and the pages', is held in the URL by
Streamlit's own binding (``bind="query-params"``, with ``persist_state="session"`` so a page switch
keeps it): Streamlit reads it from a link (dropping a value the widget cannot hold: not an option,
not of its type, past its bounds), writes it back as it changes, and keeps it out of the URL at its
default. Nothing here lists a widget. A number field with a range (:mod:`explorer.fields`) takes any
number and says beside itself and above the page when one is out of its range. After the page drew
its widgets, :func:`bound_notes` names the link's keys no widget holds: dropped by the binding, a
button's or a chart's key, a key of another page (by its prefix, :data:`PAGE_PREFIXES`) or one no
widget reads; the app then takes them out of the URL. None is put in session state: a button's key
set from a link (``cl_min_cut_run=1``) makes Streamlit refuse the page
(StreamlitValueAssignmentNotAllowedError). Only :data:`HAND_KEYS` are carried here, since no binding
can hold them: the Learn player sets ``learn_step`` while its slider is drawn by a fragment, the
algorithm box shows a label (``format_func``) that the binding would put in the URL in place of the
algorithm's name, and ``sh_spec_from`` is no widget. A value is said in a note cut to
:data:`SHOWN_CHARS` characters; a hand-carried value longer than :data:`MAX_LINK_TEXT` is dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = [
    "LinkValues",
    "read_page_link",
    "page_keys",
    "HAND_KEYS",
    "PAGE_PREFIXES",
    "bound_notes",
    "MAX_LINK_TEXT",
    "SHOWN_CHARS",
    "shown",
]

MAX_LINK_TEXT = 500  # characters of one hand-carried value
SHOWN_CHARS = 60  # of a value or a key, in a note

# The page a key belongs to, by its prefix (NOTE: [Bound keys]); a key with none is the sidebar's.
PAGE_PREFIXES: dict[str, str] = {
    "explore": "explore_",
    "learn": "learn_",
    "pipeline": "pp_",
    "training": "tm_",
    "sharding": "sh_",
    "cluster": "cl_",
}
# Not bound (NOTE: [Bound keys]).
HAND_KEYS: dict[str, type] = {"learn_algorithm": str, "learn_step": int, "sh_spec_from": str}
SIDEBAR = "sidebar"  # the owner of a key without a page's prefix: drawn on every page


@dataclass(frozen=True)
class LinkValues:
    """What a link sets (session-state key -> value) and a note for each value it could not."""

    values: dict[str, Any]
    notes: tuple[str, ...]


def _typed(name: str, kind: type, text: str) -> Any:
    """``text`` as ``kind``, the way a widget of that type holds it; ValueError names the rule."""
    if kind is bool:
        low = text.strip().lower()
        if low not in ("true", "false"):
            raise ValueError(f"{name} must be true or false")
        return low == "true"
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"{name} must be a {'whole ' if kind is int else ''}number") from None
    return text


def shown(text: Any, limit: int = SHOWN_CHARS) -> str:
    """``text`` as a note says it: cut to ``limit`` characters, with its length when cut."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _ignored(key: str, text: str | None, why: str) -> str:
    said = shown(key) if text is None else f"{shown(key)}={shown(text)}"
    return f"{said} in the link was ignored: {why}"


def _page_of(key: str) -> str:
    return next((page for page, prefix in PAGE_PREFIXES.items() if key.startswith(prefix)), SIDEBAR)


def page_keys(page: str, state: Mapping[str, Any]) -> dict[str, str]:
    """The hand-carried keys (:data:`HAND_KEYS`) of ``page`` (a key of :data:`PAGE_PREFIXES`) in
    ``state`` (session state), as text: the rest of a view is Streamlit's to write."""
    kinds = {k: kind for k, kind in HAND_KEYS.items() if _page_of(k) == page}
    return {k: str(state[k]) for k in sorted(kinds) if isinstance(state.get(k), kinds[k])}


def read_page_link(params: Mapping[str, str], choices: Mapping[str, Sequence[Any]] | None = None) -> LinkValues:
    """The hand-carried values of a link's query ``params`` (:data:`HAND_KEYS`): typed, a choice
    checked against ``choices[key]`` (the widget's options), dropped with a note when it is not
    one. Every other key is left to Streamlit's binding and :func:`bound_notes`. O(len(params))."""
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
        values[key] = value
    return LinkValues(values, tuple(notes))


def bound_notes(
    link: Mapping[str, str], state: Mapping[str, Any], page: str, left: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A note for each key of a link (not in :data:`HAND_KEYS`) that no widget holds after the
    sidebar and ``page`` drew their widgets: ``link`` the link's parameters, ``state`` session state
    then, ``left`` the URL's parameters then (Streamlit's binding takes out or corrects a value its
    widget cannot hold, and leaves alone a key no widget is bound to). A key of another page, a key
    no widget drawn is bound to (a button's, a chart's, a field not shown, none at all) and a value
    the binding dropped (not an option, not of its type) are each named (NOTE: [Bound keys]).
    Returns key -> note. O(len(link))."""
    notes = {}
    left = left or {}
    for key, text in link.items():
        if key in HAND_KEYS:
            continue
        value = state.get(key) if _page_of(key) in (page, SIDEBAR) else None
        try:
            held = isinstance(value, (bool, int, float, str)) and _typed(key, type(value), text) == value
        except ValueError:
            held = False
        if held:
            continue
        if value is None or left.get(key) == text:
            notes[key] = _ignored(key, None, "no widget of the page takes it (only its settings go in a link)")
        else:
            why = f"out of its widget's range, not one of its options or not of its type (it shows {shown(value)})"
            notes[key] = _ignored(key, text, why)
    return notes
