"""The app's cached work: trace a model (``st.cache_resource``), make plans and comparisons
(``st.cache_data``, keyed by the hashable :class:`~explorer.config.PlanConfig`).

Failures are returned as text rather than raised, so a failing plan is cached like a good one
(no re-run on every widget change) and the page shows the message with ``st.error``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import streamlit as st

import partitioner
import sample_models
from partitioner import Graph, Plan
from partitioner.compare import ModeResult, compare_modes
from sample_models.loader import LoaderError, load_factory

from .config import ModelChoice, PlanConfig

__all__ = ["trace", "plan", "compare", "PlanResult", "explain_error"]


def explain_error(exc: BaseException) -> str:
    """The message a person sees; library and loader errors already name the fix."""
    if isinstance(exc, (partitioner.PartitionError, LoaderError)):
        return str(exc)
    if isinstance(exc, ValueError):  # a sample model rejecting a size knob
        return f"{exc}. Change the size knobs in the sidebar."
    return (
        f"unexpected {type(exc).__name__}: {exc}. This is a bug in Partition Explorer; "
        "please report it with the model, devices and mode you chose."
    )


@st.cache_resource(show_spinner="Tracing the model...", max_entries=24)
def trace(choice: ModelChoice) -> Graph:
    """The traced, annotated graph of a sample model (with its size overrides) or of a
    person's factory. Raises PartitionError, LoaderError or ValueError."""
    if choice.user:
        module, inputs = load_factory(choice.name)
        name = choice.name.rpartition(":")[2]
    else:
        module, inputs = sample_models.build(choice.name, **dict(choice.overrides))
        name = choice.name
    return partitioner.trace(module, inputs, name=name)


@dataclass(frozen=True)
class PlanResult:
    plan: Plan | None
    error: str | None
    seconds: float  # time the mode took


@st.cache_data(show_spinner=False, max_entries=128)
def plan(config: PlanConfig) -> PlanResult:
    """Partition the traced model of ``config``; errors come back as text."""
    graph = trace(config.model)
    start = time.perf_counter()
    try:
        result = partitioner.partition(graph, config.device_list(), mode=config.mode,
                                       **config.partition_kwargs())
    except Exception as exc:  # shown to the person; a bug in a mode must not crash the page
        return PlanResult(None, explain_error(exc), time.perf_counter() - start)
    return PlanResult(result, None, time.perf_counter() - start)


@st.cache_data(show_spinner=False, max_entries=128)
def compare(config: PlanConfig) -> ModeResult:
    """``config.mode``'s row of the comparison (the page runs modes one by one, so it can
    show progress and reuse each mode's cached row)."""
    graph = trace(config.model)
    return compare_modes(graph, config.device_list(), [config.mode], **config.partition_kwargs())[0]
