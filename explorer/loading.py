"""What a page loads: the sidebar's config (:mod:`explorer.state`), its traced graph and its
plan, each from the app's caches (:mod:`explorer.compute`); what cannot be loaded is said on the
page (``st.info``, ``st.error``) and the loader returns None; and above every page, what the answer
is for when it is not what the sidebar shows (:func:`show_size_warning`)."""

from __future__ import annotations

import streamlit as st

from explorer import compute
from explorer.builders.config import PlanConfig
from explorer.builders.inputs import size_warning
from explorer.builders.text import md
from explorer.state import CONFIG
from partitioner import Graph

__all__ = ["current_config", "load_graph", "page_inputs", "load_plan", "current_plan", "show_size_warning"]


def current_config() -> PlanConfig | None:
    """The sidebar's config, or None (with a note) while an input there is unreadable."""
    config = st.session_state.get(CONFIG)
    if config is None:
        st.info("Fix the input marked in the sidebar to see a plan; everything else you entered is kept.")
    return config


def load_graph(config: PlanConfig) -> Graph | None:
    """The traced model. Its waiting line is drawn in a container of its own, there on every run: a
    line drawn only while a trace runs would move the page's widgets down a place on that run, and a
    widget bound to the URL that moves is drawn anew, after which Streamlit's browser side no longer
    writes its changes into the URL."""
    try:
        with st.container():
            return compute.trace(config.model)
    except Exception as exc:  # shown in words; the sidebar keeps what was entered
        st.error(md(f"Could not build or trace {config.model.label}: {compute.explain_error(exc)}"))
        return None


def page_inputs() -> tuple[PlanConfig, Graph] | None:
    """The sidebar's config and its traced model, or None once a note says what is missing."""
    config = current_config()
    if config is None:
        return None
    graph = load_graph(config)
    return None if graph is None else (config, graph)


def load_plan(config: PlanConfig) -> tuple[Graph, compute.PlanResult] | None:
    """The traced graph and the (cached) plan of ``config``; None when tracing failed."""
    graph = load_graph(config)
    if graph is None:
        return None
    with st.spinner(f"Partitioning with {config.mode}..."):
        result = compute.plan(config)
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


def show_size_warning() -> None:
    """Above every page: a warning when the model is a preset with its size overridden ("llama-3-70b
    with 2 of 80 layers"), since every figure then answers for the smaller model; and each sidebar
    value this run did not apply (out of its range: :mod:`explorer.fields`), since the answer below
    is still for the previous one."""
    from explorer.fields import range_notes

    for note in range_notes():
        st.warning(note, icon=":material/block:")
    config = st.session_state.get(CONFIG)
    if config is None or config.model.user:
        return
    text = size_warning(config.model.name, dict(config.model.overrides))
    if text:
        st.warning(md(text), icon=":material/warning:")
