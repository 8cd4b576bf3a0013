"""The app's cached work: trace a model (``st.cache_resource``, keyed by the model choice and its
reload generation) and make plans (``st.cache_data``, keyed by the graph's fingerprint, the
devices, the mode and the :class:`~partitioner.options.PartitionOptions`). The Compare page reads
the same plan cache as Explore, one mode at a time.

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
from partitioner.api import partition_with
from partitioner.compare import ModeResult
from sample_models.loader import LoaderError

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


@st.cache_resource(show_spinner="Tracing the model...", max_entries=8)
def trace(choice: ModelChoice) -> Graph:
    """The traced, annotated graph of a sample model (with its size overrides), an ``hf:`` model
    or a person's factory. A new ``choice.generation`` ("Reload the model") imports the factory's
    module again. Raises PartitionError, LoaderError or ValueError."""
    module, inputs, kwargs = sample_models.load(choice.name, dict(choice.overrides),
                                                reload=choice.generation > 0)
    extra = {"example_kwargs": kwargs} if kwargs else {}
    return partitioner.trace(module, inputs, name=choice.label, **extra)


@dataclass(frozen=True)
class PlanResult:
    plan: Plan | None
    error: str | None
    seconds: float  # time the mode took


@st.cache_data(show_spinner=False, max_entries=256)
def _plan(config: PlanConfig, fingerprint: str) -> PlanResult:
    graph = trace(config.model)
    start = time.perf_counter()
    try:
        result = partition_with(graph, config.device_list(), config.mode, config.options)
    except Exception as exc:  # shown to the person; a bug in a mode must not crash the page
        return PlanResult(None, explain_error(exc), time.perf_counter() - start)
    return PlanResult(result, None, time.perf_counter() - start)


def plan(config: PlanConfig) -> PlanResult:
    """Partition the traced model of ``config``; errors come back as text. Cached by the graph's
    fingerprint as well as the config, so a changed model never shows a stale plan."""
    return _plan(config, trace(config.model).fingerprint())


def compare(config: PlanConfig) -> ModeResult:
    """``config.mode``'s row of the comparison, from the same cache as :func:`plan`."""
    r = plan(config)
    p = r.plan
    if p is None:
        return ModeResult(config.mode, None, None, None, r.seconds, r.error, None)
    return ModeResult(config.mode, p.latency_s, len(p.partitions), p.memory_utilisation(), r.seconds, None, p)
