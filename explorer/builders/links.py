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
(StreamlitValueAssignmentNotAllowedError). A choice carries its option's name, never a label: the
binding writes what ``format_func`` shows, so a radio says what its options mean in ``captions``.
Only :data:`HAND_KEYS` are carried here, since no binding can hold them: ``sh_spec_from`` (how the
Sharding page made the spec it shows) is no widget's, and the Learn player sets ``learn_step`` while
its slider's range changes with the algorithm (a bound slider of another range reads the link's step
again). A value is said in a note cut to :data:`SHOWN_CHARS` characters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = [
    "LinkValues",
    "read_page_link",
    "page_keys",
    "HAND_KEYS",
    "PAGE_PREFIXES",
    "bound_notes",
    "SHOWN_CHARS",
    "shown",
]

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
# Not bound (NOTE: [Bound keys]): key -> the values it takes (int: a whole number from 1).
HAND_KEYS: dict[str, tuple[str, ...] | type[int]] = {"learn_step": int, "sh_spec_from": ("model", "suggest")}
MAX_DIGITS = 9  # of a hand-carried number (the player clamps a step past the last)
SIDEBAR = "sidebar"  # the owner of a key without a page's prefix: drawn on every page


@dataclass(frozen=True)
class LinkValues:
    """What a link sets (session-state key -> value) and a note for each value it could not."""

    values: dict[str, Any]
    notes: tuple[str, ...]


def _holds(value: Any, text: str) -> bool:
    """Whether a widget showing ``value`` holds a link's ``text`` (as the binding writes it)."""
    if isinstance(value, bool):
        return text.strip().lower() == str(value).lower()
    if isinstance(value, (int, float)):
        try:
            return float(text) == value
        except (ValueError, OverflowError):
            return False
    return isinstance(value, str) and text == value


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
    return {k: str(state[k]) for k in sorted(HAND_KEYS) if _page_of(k) == page and _takes(k, state.get(k))}


def _takes(key: str, value: Any) -> bool:
    rule = HAND_KEYS[key]
    if isinstance(rule, tuple):
        return value in rule
    return isinstance(value, int) and value >= 1


def read_page_link(params: Mapping[str, str]) -> LinkValues:
    """The hand-carried values of a link's query ``params`` (:data:`HAND_KEYS`), each dropped with a
    note when it is not one of the values its key takes. Every other key is left to Streamlit's
    binding and :func:`bound_notes`. O(len(params))."""
    values: dict[str, Any] = {}
    notes = []
    for key, text in params.items():
        rule = HAND_KEYS.get(key)
        if rule is None:
            continue
        number = not isinstance(rule, tuple) and text.isdecimal() and len(text) <= MAX_DIGITS
        value = int(text) if number else text
        if _takes(key, value):
            values[key] = value
        else:
            takes = f"one of {', '.join(rule)}" if isinstance(rule, tuple) else "a whole number from 1"
            notes.append(_ignored(key, text, f"{key} must be {takes}"))
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
        if _holds(value, text):
            continue
        if value is None or left.get(key) == text:
            notes[key] = _ignored(key, None, "no widget of the page takes it (only its settings go in a link)")
        else:
            why = f"out of its widget's range, not one of its options or not of its type (it shows {shown(value)})"
            notes[key] = _ignored(key, text, why)
    return notes
