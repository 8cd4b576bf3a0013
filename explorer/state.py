"""What the pages share: the current :class:`PlanConfig` (set by the router from the sidebar)
and loaders that fetch the cached graph and plan, showing any error with ``st.error``.

Session state holds only small serialisable things: the config (a frozen dataclass of
tuples), a summary of the current plan, and the hand-edited mapping (``explorer.editing``).
"""

from __future__ import annotations

import streamlit as st

from partitioner import Graph

from . import compute
from .config import PlanConfig

__all__ = ["set_config", "current_config", "load_graph", "load_plan", "current_plan", "PLAN_SUMMARY",
           "model_generation", "bump_model_generation", "open_page", "follow_page_request"]

# Every session-state key the pages share lives here.
CONFIG = "config"  # the sidebar's PlanConfig (None while an input is unreadable)
PLAN_SUMMARY = "plan_summary"  # small facts about the current plan, for the Learn page
MODEL_GENERATION = "model_generation"  # bumped by "Reload the model"
GOTO_PAGE = "goto_page"  # a page another page asked to open on the next run
MODE = "mode"  # the sidebar's mode selectbox


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
    if page:
        st.switch_page(page)


def set_config(config: PlanConfig | None) -> None:
    st.session_state[CONFIG] = config


def current_config() -> PlanConfig | None:
    """The sidebar's config, or None (with a note) while an input there is unreadable."""
    config = st.session_state.get(CONFIG)
    if config is None:
        st.info("Fix the input marked in the sidebar to see a plan; everything else you entered is kept.")
    return config


def load_graph(config: PlanConfig) -> Graph | None:
    try:
        return compute.trace(config.model)
    except Exception as exc:  # shown in words; the sidebar keeps what was entered
        st.error(f"Could not build or trace {config.model.label}: {compute.explain_error(exc)}")
        return None


def load_plan(config: PlanConfig) -> tuple[Graph, compute.PlanResult] | None:
    """The traced graph and the (cached) plan of ``config``; None when tracing failed."""
    graph = load_graph(config)
    if graph is None:
        return None
    with st.spinner(f"Partitioning with {config.mode}..."):
        result = compute.plan(config)
    plan = result.plan
    st.session_state[PLAN_SUMMARY] = None if plan is None else {
        "model": config.model.label,
        "mode": plan.mode,
        "partitions": len(plan.partitions),
        "latency_s": plan.latency_s,
        "devices": len(plan.devices),
        "memory_utilisation": plan.memory_utilisation(),
    }
    return graph, result


def current_plan() -> tuple[PlanConfig, Graph, compute.PlanResult] | None:
    """The sidebar's config with its graph and plan; None (the reason already shown) when the
    config is unreadable or the model does not trace."""
    config = current_config()
    if config is None:
        return None
    loaded = load_plan(config)
    if loaded is None:
        return None
    return (config, *loaded)
