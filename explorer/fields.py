"""Number fields that say when a value is not applied (issue 56).

Streamlit's ``number_input`` with ``min_value``/``max_value`` refuses an out-of-range value in the
browser: the field turns red with a hover-only "!", nothing reaches the server, and the page goes
on showing the previous answer without a word. :func:`bounded_number` takes any number instead,
checks the range here, and for a value it cannot take keeps the last one it could, with a note
beside the field and above the page (:func:`explorer.loading.show_size_warning` shows
:func:`range_notes`) naming the rule, the value and what the answer is for."""

from __future__ import annotations

from typing import Any

import streamlit as st

from explorer.builders.text import number

__all__ = ["BOUND", "bounded_number", "range_notes", "clear_range_notes", "out_of_range_note"]

# A field a link carries, kept across pages (NOTE: [Bound keys] in explorer.builders.links).
BOUND: dict[str, Any] = {"bind": "query-params", "persist_state": "session"}

_NOTES = "range_notes"  # this run's notes, for the top of the page


def out_of_range_note(label: str, value: float | None, low: float, high: float, kept: float) -> str:
    """ "Batch size must be from 1 to 4,096 (got 0): not applied; the answer is for 1."."""
    got = "nothing" if value is None else number(value)
    return (
        f"{label} must be from {number(low)} to {number(high)} (got {got}): not applied; "
        f"the answer is for {number(kept)}."
    )


def bounded_number(box: Any, label: str, low: float, high: float, *, key: str, fallback: float, **kwargs: Any) -> Any:
    """``box.number_input(label, key=key, **kwargs)`` without bounds in the browser: a value in
    [``low``, ``high``] is returned (and remembered); another is not applied, said beside the field
    and above the page, and the last value that was (``fallback`` before any), brought into the
    range (a range that shrank, such as fewer devices, moves it), is returned."""
    value = box.number_input(label, key=key, **kwargs)
    good = f"_{key}_applied"
    if value is not None and low <= value <= high:
        st.session_state[good] = value
        return value
    kept = min(max(st.session_state.get(good, fallback), low), high)
    got = "nothing" if value is None else number(value)
    box.warning(f"Not applied: from {number(low)} to {number(high)} (got {got}).", icon=":material/block:")
    st.session_state.setdefault(_NOTES, []).append(out_of_range_note(label, value, low, high, kept))
    return kept


def range_notes() -> list[str]:
    """The notes of this run's fields that were not applied."""
    return list(st.session_state.get(_NOTES, []))


def clear_range_notes() -> None:
    """At the start of a run, before the fields are drawn."""
    st.session_state[_NOTES] = []
