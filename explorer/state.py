"""What the pages share: the current :class:`PlanConfig` (set by the router from the sidebar;
:mod:`explorer.loading` fetches its graph and plan), the page asked for, and the link.

Session state holds only small things: the config (a frozen dataclass of tuples) and the
hand-edited mapping (``explorer.builders.editing.Edit``). A link's settings are held by Streamlit's
binding of the widgets to the URL (NOTE: [Bound keys] in ``explorer.builders.links``); the few
values no binding can hold are read and written here, and what the binding did not take is said.
"""

from __future__ import annotations

from typing import Iterable

import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.errors import StreamlitAPIException

from explorer.builders.config import PlanConfig
from explorer.builders.links import HAND_KEYS, bound_notes, page_keys, read_page_link
from explorer.builders.text import md

__all__ = [
    "set_config",
    "model_generation",
    "bump_model_generation",
    "open_page",
    "follow_page_request",
    "set_page",
    "write_url",
    "show_bound_notes",
]

# Every session-state key the pages share lives here.
CONFIG = "config"  # the sidebar's PlanConfig (None while an input is unreadable)
MODEL_GENERATION = "model_generation"  # bumped by "Reload the model"
GOTO_PAGE = "goto_page"  # a page another page asked to open on the next run
MODE = "mode"  # the sidebar's mode selectbox
HF_MODEL = "Hugging Face architecture..."  # the model selectbox's choice for hf: architectures
HF_DEVICES_FOR = "hf_devices_for"  # the hf: model the devices were last set for (sidebar.follow_hf_devices)
HF_DEVICES_NOTE = "hf_devices_note"  # what the sidebar said it set them to
LINK_DEVICES = "(the link's)"  # HF_DEVICES_FOR when a link set the devices: they stand
URL_RESTORED = "url_restored"
LINK_BOUND = "link_bound"  # the link's bound keys, until the page has drawn its widgets
PAGE = "current_page"  # the page this run draws (a key of PAGE_PREFIXES), whose view the URL carries


def restore_from_url() -> None:
    """On a session's first run, set the hand-carried values from the URL's query parameters
    (:func:`explorer.builders.links.read_page_link`: one it cannot read is dropped, and a warning
    says which) and keep the others for :func:`show_bound_notes`, once the widgets bound to them
    are drawn. Never raises."""
    if st.session_state.get(URL_RESTORED):
        return
    st.session_state[URL_RESTORED] = True
    params = st.query_params.to_dict()
    read = read_page_link(params)
    st.session_state[LINK_BOUND] = {k: v for k, v in params.items() if k not in HAND_KEYS}
    st.session_state.update(read.values)
    if read.notes:
        st.warning(_checked(read.notes))
    if params.get("model") == HF_MODEL and any(k.startswith("dev_") for k in params):
        st.session_state[HF_DEVICES_FOR] = LINK_DEVICES  # the link's devices stand; else the model's own


def _checked(notes: Iterable[str]) -> str:
    """The warning that names what a link carried and no widget took."""
    return md("The link's settings were checked: " + "; ".join(notes) + ".")


def set_page(name: str) -> None:
    """Record which page this run draws (its view goes in the URL)."""
    st.session_state[PAGE] = name


def show_bound_notes(box: DeltaGenerator) -> None:
    """After the page the link opened drew its widgets, in ``box`` (a container above the page):
    which of the link's keys no widget holds (:func:`explorer.builders.links.bound_notes`),
    each then taken out of the URL unless a widget is bound to it. Once a link."""
    link = st.session_state.pop(LINK_BOUND, None)
    if not link:
        return
    left = st.query_params.to_dict()
    notes = bound_notes(link, st.session_state.to_dict(), st.session_state.get(PAGE, ""), left)
    for key in [k for k in notes if left.get(k) == link[k]]:
        try:
            del st.query_params[key]  # no widget reads it: not carried on
        except StreamlitAPIException:  # bound to a widget: Streamlit's own
            pass
    if notes:
        box.warning(_checked(notes.values()))


def write_url() -> None:
    """Put the current page's hand-carried values in the URL (NOTE: [Bound keys]); the widgets'
    are Streamlit's binding's to write. Pages call it again after changing them mid-run."""
    params = page_keys(st.session_state.get(PAGE, ""), st.session_state.to_dict())
    current = st.query_params.to_dict()
    for key in [k for k in current if k in HAND_KEYS and k not in params]:
        del st.query_params[key]
    changed = {k: v for k, v in params.items() if current.get(k) != v}
    if changed:
        st.query_params.update(changed)


def model_generation() -> int:
    return int(st.session_state.get(MODEL_GENERATION, 0))


def bump_model_generation() -> None:
    """A person edited their factory: the next trace imports its module again."""
    st.session_state[MODEL_GENERATION] = model_generation() + 1


def open_page(page: str, mode: str | None = None) -> None:
    """Widget callback: open ``page`` (a ``views/*.py`` path) on the next run, with ``mode``
    selected; everything else in the sidebar stays as it is."""
    if mode is not None:
        st.session_state[MODE] = mode
    st.session_state[GOTO_PAGE] = page


def follow_page_request() -> None:
    """Called by the router before the sidebar is drawn: switch to a page another page asked for."""
    page = st.session_state.pop(GOTO_PAGE, None)
    if page:  # the widgets write their own keys back (NOTE: [Bound keys]); clearing them is refused
        st.switch_page(page, query_params={})


def set_config(config: PlanConfig | None) -> None:
    st.session_state[CONFIG] = config
