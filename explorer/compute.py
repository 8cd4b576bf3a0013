"""The app's cached work: trace a model (``st.cache_resource``, keyed by the model choice and its
reload generation) and make plans (``st.cache_data``, keyed by the graph's fingerprint, the
devices, the mode and the :class:`~partitioner.options.PartitionOptions`). The Compare page reads
the same plan cache as Explore, one mode at a time.

Failures are returned as text rather than raised, so a failing plan is cached like a good one
(no re-run on every widget change) and the page shows the message with ``st.error``.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import streamlit as st

import partitioner
import sample_models
from explorer.builders.config import ModelChoice, PlanConfig
from explorer.builders.text import md
from partitioner import Graph, Plan, pipeline
from partitioner.accelerator import steps
from partitioner.accelerator.api import Progress, partition_with
from partitioner.accelerator.compare import ModeResult
from partitioner.tracing import cache as trace_cache
from partitioner.units import GiB, format_seconds
from sample_models import LoaderError

__all__ = ["trace", "plan", "compare", "PlanResult", "explain_error", "pipeline_plan", "PipelineResult"]


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


# NOTE: [Graph cache] Traced graphs keep their modules (a split is checked against the weights),
# so the cache shared by every session is bounded by the bytes those weights and inputs take,
# not by a count: a few large models evict the oldest ones rather than exhaust the server.
MAX_CACHE_BYTES = 2 * GiB
_GRAPHS: OrderedDict[ModelChoice, tuple[Graph, int]] = OrderedDict()
_LOCK = threading.Lock()
# NOTE: [One trace at a time] torch.fx's symbolic tracer patches module-level functions (and
# torch.export installs global modes) while it traces, and every session is a thread of this one
# process: two traces at once race on that patching, fail, and can leave it broken for every later
# trace until a restart. So traces run one at a time under this lock; a session that waited finds
# the other's result in the cache (the lookup is repeated inside the lock).
_TRACE_LOCK = trace_cache.TRACE_LOCK  # also taken when a graph read from the disk cache traces its module


def _cached(choice: ModelChoice) -> Graph | None:
    with _LOCK:
        if choice in _GRAPHS:
            _GRAPHS.move_to_end(choice)
            return _GRAPHS[choice][0]
    return None


def _graph_bytes(graph: Graph) -> int:
    weights = sum(
        t.numel() * t.element_size()  # a graph read from the disk cache holds no module until asked
        for t in (graph.graph_module.state_dict().values() if trace_cache.module_loaded(graph) else ())
    )
    return int(weights) + sum(nd.output_bytes for nd in graph.nodes if nd.op == "placeholder")


def trace(choice: ModelChoice) -> Graph:
    """The traced, annotated graph of a sample model (with its size overrides) or a person's
    factory, from a cache shared by all sessions (NOTE: [Graph cache]). A new
    ``choice.generation`` ("Reload the model") imports the factory's module again. Raises
    PartitionError, LoaderError or ValueError."""
    cached = _cached(choice)
    if cached is not None:
        return cached
    waiting = (
        "Building the model from its config and tracing it: seconds where its layers are identical (a "
        "few traced, repeated to its depth), else about 5 s per thousand operations; kept on disk after"
        if sample_models.is_hf(choice.name)
        else "Tracing the model"
    )

    def build() -> Graph:
        loaded = sample_models.load(choice.name, dict(choice.overrides), reload=choice.generation > 0)
        return sample_models.trace_loaded(choice.name, dict(choice.overrides), loaded, choice.label)

    def traced() -> Graph:
        # NOTE: [One trace at a time]; the disk cache is shared with the command line (partitioner.tracing.cache)
        with _TRACE_LOCK:
            cached = _cached(choice)
            if cached is not None:
                return cached
            graph = trace_cache.cached_trace(
                None if choice.user else trace_cache.model_key(choice.name, dict(choice.overrides)), build
            )
            size = _graph_bytes(graph)
            with _LOCK:  # cached before the next trace starts, so a session that waited finds it
                _GRAPHS[choice] = (graph, size)
                while len(_GRAPHS) > 1 and sum(b for _, b in _GRAPHS.values()) > MAX_CACHE_BYTES:
                    _GRAPHS.popitem(last=False)
            return graph

    return _waited(choice, traced, waiting)


# NOTE: [A trace runs beside the page] A trace runs in a thread of its own while the page's script
# waits for it and redraws one line a second (what it does, the time so far). Streamlit stops or
# reruns a script by raising from its next drawing call, so Stop, or a changed widget, ends the wait
# within a second; the trace goes on to its end and lands in the cache, where the next run (the same
# session's or another's) finds it, instead of being cut off inside torch.fx's patching (NOTE: [One
# trace at a time]). A run that comes back while the trace is still going waits for the same thread.
# Daemon threads: a server told to stop does not wait for them (NOTE: [Stopping while a script runs]
# in explorer.shutdown).
@dataclass
class _Tracing:
    started: float
    done: threading.Event
    graph: Graph | None = None
    error: BaseException | None = None


_TRACING: dict[ModelChoice, _Tracing] = {}


def _waited(choice: ModelChoice, traced: Callable[[], Graph], waiting: str) -> Graph:
    """``traced()``'s graph, computed in the trace thread of ``choice`` (started here unless one
    runs), while a line says ``waiting`` and the seconds so far (NOTE: [A trace runs beside the page])."""
    with _LOCK:
        job = _TRACING.get(choice)
        if job is None:
            job = _TRACING[choice] = _Tracing(time.monotonic(), threading.Event())
            threading.Thread(target=_run, args=(choice, job, traced), name="trace", daemon=True).start()
    line = st.empty()
    try:
        while not job.done.wait(0.25 if time.monotonic() - job.started < 0.25 else 1.0):
            so_far = format_seconds(time.monotonic() - job.started)
            line.info(
                f"{waiting}. {so_far} so far (Stop ends the wait; the trace finishes and is kept).",  # our words
                icon=":material/hourglass_top:",
            )
    finally:
        line.empty()
    if job.error is not None:
        raise job.error
    assert job.graph is not None
    return job.graph


def _run(choice: ModelChoice, job: _Tracing, traced: Callable[[], Graph]) -> None:
    try:
        job.graph = traced()
    except BaseException as exc:  # noqa: BLE001 - handed to the page that waits, which shows it
        job.error = exc
    finally:
        with _LOCK:
            _TRACING.pop(choice, None)
        job.done.set()


def cached_graph_bytes() -> int:
    """Bytes the graph cache holds now (for the benchmark and the tests)."""
    with _LOCK:
        return sum(b for _, b in _GRAPHS.values())


@dataclass(frozen=True)
class PlanResult:
    plan: Plan | None
    error: str | None
    seconds: float  # time the mode took


@st.cache_data(show_spinner=False, max_entries=256)
def _plan(config: PlanConfig, fingerprint: str) -> PlanResult:
    """The plan; a long run (the optimal mode's solver) says each phase it enters and how long it
    may take, in a line drawn here and emptied at the end (a cached plan replays it to empty)."""
    graph = trace(config.model)
    start = time.perf_counter()
    line = st.empty()

    def said(at: Progress) -> None:
        bound = f" (at most {format_seconds(at.at_most_s)}, its time limit)" if at.at_most_s else ""
        line.caption(f"{md(at.message)}{bound}; {format_seconds(time.perf_counter() - start)} so far")

    try:
        result = partition_with(graph, config.device_list(), config.mode, config.options, progress=said)
    except Exception as exc:  # shown to the person; a bug in a mode must not crash the page
        return PlanResult(None, explain_error(exc), time.perf_counter() - start)
    finally:
        line.empty()
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


@st.cache_data(show_spinner=False, max_entries=16)
def _accelerate(config: PlanConfig, fingerprint: str) -> ModeResult:
    from partitioner.interop.device_map import accelerate_result

    module, _, _ = sample_models.load(config.model.name, dict(config.model.overrides))
    options = config.options
    return accelerate_result(
        module,
        trace(config.model),
        config.device_list(),
        cost_model=options.cost_model,
        transfer_rate_bytes_per_s=options.transfer_rate_bytes_per_s,
        node_latency=options.node_latency_dict,
    )


def accelerate(config: PlanConfig) -> ModeResult | None:
    """The row of Accelerate's ``infer_auto_device_map`` for an hf: model (None for other models,
    or without accelerate), scored on our cost model; cached per model and devices."""
    if not sample_models.is_hf(config.model.name) or importlib.util.find_spec("accelerate") is None:
        return None
    return _accelerate(config.with_mode("accelerate"), trace(config.model).fingerprint())


@dataclass(frozen=True)
class PipelineResult:
    plan: "pipeline.PipelinePlan | None"
    stage_plan: Plan | None  # the stages as a Plan, for the DAG view
    error: str | None
    seconds: float


@st.cache_data(show_spinner=False, max_entries=128)
def _pipeline_plan(
    config: PlanConfig,
    fingerprint: str,
    ranks: int,
    stages: int,
    microbatches: int,
    schedule: str,
    training: str | None,
) -> PipelineResult:
    graph = trace(config.model)
    devices = config.device_list()[:ranks]
    start = time.perf_counter()
    try:
        pp = pipeline.plan(
            graph,
            devices,
            stages=stages,
            microbatches=microbatches,
            schedule=schedule,
            training=training,
            transfer_rate_bytes_per_s=config.transfer_rate_bytes_per_s,
            node_latency=config.node_latency_map(),
        )
        seconds = time.perf_counter() - start
        stage_plan = pp.as_plan(graph, devices, config.transfer_rate_bytes_per_s)
    except Exception as exc:  # shown to the person, like a mode's failure
        return PipelineResult(None, None, explain_error(exc), time.perf_counter() - start)
    return PipelineResult(pp, stage_plan, None, seconds)


def pipeline_plan(
    config: PlanConfig, ranks: int, stages: int, microbatches: int, schedule: str, training: str | None
) -> PipelineResult:
    """The pipeline split of the config's model on its first ``ranks`` devices; errors as text."""
    return _pipeline_plan(config, trace(config.model).fingerprint(), ranks, stages, microbatches, schedule, training)


@st.cache_resource(show_spinner=False, max_entries=8)
def _decision_trace(config: PlanConfig, fingerprint: str, algorithm: str) -> "steps.DecisionTrace | str":
    try:
        return steps.record(trace(config.model), config.device_list(), algorithm, options=config.options)
    except Exception as exc:  # shown in words on the Learn page
        return explain_error(exc)


def decision_trace(config: PlanConfig, algorithm: str) -> "steps.DecisionTrace | str":
    """``algorithm``'s decisions on the config's model and devices (:func:`partitioner.accelerator.steps.record`),
    kept per model, devices and algorithm; the error text where it finds no plan."""
    return _decision_trace(config, trace(config.model).fingerprint(), algorithm)
