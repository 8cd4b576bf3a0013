"""Run a composed layout for real and put it beside its prediction on this machine's measured
profile, part by part: what a "Run this layout" button calls (:func:`check_layout`).

The run is :func:`partitioner.cluster.run.compose.run_layout` (its ranks are processes of their own,
started by the launcher, with progress); the prediction is
:func:`partitioner.cluster.run.predict.composed_step` on the same traced graph and the same
tensor-parallel pairs. A run times each rank's whole step and, apart, its gradient all-reduce
over dp; so the parts compare as: the dp gradient sync (measured on its own), the rest of the
step (compute, DTensor dispatch, tensor-parallel all-reduces, bubble, pipeline actions and
hand-offs: predicted one by one, measured together) and the step end to end. ``in_worker=True``
runs everything in a fresh worker process with a time limit (its progress reported through the
worker: :func:`partitioner.processes.worker.report`), so a Streamlit server traces and checks nothing
in its own process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from partitioner.cluster.layouts import Layout
from partitioner.cluster.run.records import ComposedRun
from partitioner.cost.runs import Predicted

if TYPE_CHECKING:
    import torch

    from partitioner.device_profile import DeviceProfile
    from partitioner.graph import Graph
    from partitioner.sharding.tensor_parallel import TPPlan

__all__ = ["PartCheck", "LayoutCheck", "check_layout", "SYNC", "REST", "END_TO_END"]

SYNC = "all_reduce gradients dp"
REST = "step less the dp gradient sync"
END_TO_END = "end to end"


@dataclass(frozen=True)
class PartCheck:
    """One part of the step: predicted seconds, and measured seconds where the run times it."""

    name: str
    predicted_s: float
    measured_s: float | None = None  # None: not timed apart (it is inside ``REST``)

    @property
    def error(self) -> float | None:
        """(measured - predicted) / predicted, or None when either is missing."""
        if self.measured_s is None or not self.predicted_s > 0:
            return None
        return (self.measured_s - self.predicted_s) / self.predicted_s


@dataclass(frozen=True)
class LayoutCheck:
    run: ComposedRun  # outputs, gradients, each rank's bytes and median step
    predicted: Predicted  # the composed step's parts on ``profile_name``
    parts: tuple[PartCheck, ...]  # each predicted part, then REST and SYNC (when dp > 1), then END_TO_END
    profile_name: str
    load_average: tuple[float, float, float]  # the machine's load after the run

    @property
    def error(self) -> float | None:
        return self.parts[-1].error

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.run.layout.label(),
            "outputs_equal": self.run.outputs_equal,
            "gradients_equal": self.run.gradients_equal,
            "profile": self.profile_name,
            "load_average": list(self.load_average),
            "measured_step_s": self.run.step_s,
            "predicted_step_s": self.predicted.total_s,
            "parts": [
                {"name": p.name, "predicted_s": p.predicted_s, "measured_s": p.measured_s, "error": p.error}
                for p in self.parts
            ],
        }


def _parts(predicted: Predicted, run: ComposedRun) -> tuple[PartCheck, ...]:
    slowest = max(run.ranks, key=lambda r: r.step_s)
    out = [PartCheck(name, s) for name, s in predicted.parts if name != SYNC]
    sync = predicted.part(SYNC)
    if run.layout.dp > 1 and run.layout.zero <= 1:
        out.append(PartCheck(REST, predicted.total_s - sync, slowest.step_s - slowest.sync_s))
        out.append(PartCheck(SYNC, sync, slowest.sync_s))
    out.append(PartCheck(END_TO_END, predicted.total_s, run.step_s))
    return tuple(out)


def check_layout(
    module: torch.nn.Module,
    example_inputs: Sequence[Any] | torch.Tensor,
    layout: Layout,
    *,
    profile: DeviceProfile | None = None,
    timeout_s: float = 180.0,
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
    in_worker: bool = False,
    tp_plan: TPPlan | None = None,
    example_kwargs: dict[str, Any] | None = None,
    graph: Graph | None = None,
) -> LayoutCheck:
    """Run one training step of ``layout`` on ``layout.devices`` local processes (outputs and
    gradients checked against one process) and predict it on ``profile`` (this machine's cached
    ``local`` profile by default, measured first when there is none). Raises
    :class:`~partitioner.errors.PartitionError` for a layout the run cannot do and
    :class:`~partitioner.errors.RunError` naming the failing rank and its mesh coordinates.
    ``in_worker``: all of it in a fresh worker process, killed after ``timeout_s`` plus a minute.
    ``tp_plan`` and ``example_kwargs`` are :func:`~partitioner.cluster.run.compose.run_layout`'s;
    ``graph``, the module's trace when the caller holds it (else it is traced here)."""
    if in_worker:  # the worker's lines come back through its own channel (processes.worker.report)
        from partitioner.processes.worker import run_in_worker

        args = (module, example_inputs, layout, profile, timeout_s, repeats, None, tp_plan, example_kwargs, graph)
        return run_in_worker(  # type: ignore[no-any-return]
            _check_with, args, timeout_s + 60.0, f"the run of {layout.label()}", progress=progress
        )
    return _check_with(
        module, example_inputs, layout, profile, timeout_s, repeats, progress, tp_plan, example_kwargs, graph
    )


def _check_with(
    module: Any,
    example_inputs: Any,
    layout: Layout,
    profile: DeviceProfile | None,
    timeout_s: float,
    repeats: int,
    progress: Callable[[str], None] | None = None,
    tp_plan: TPPlan | None = None,
    example_kwargs: dict[str, Any] | None = None,
    graph: Graph | None = None,
) -> LayoutCheck:
    import torch

    import partitioner
    from partitioner.calibration.host import local_profile
    from partitioner.cluster.run.compose import run_layout
    from partitioner.cluster.run.predict import composed_step
    from partitioner.cluster.run.tp_plans import linear_pairs_plan
    from partitioner.processes.worker import report

    progress = progress or report  # in a worker, its lines go to the caller's callback; elsewhere nowhere
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    if profile is None:
        progress("reading this machine's profile (measuring it when none is cached)")
        profile = local_profile(progress=progress)
    if tp_plan is not None and layout.tp > 1:
        plan = tuple((path, s["style"]) for path, s in tp_plan.styles.items())
    else:
        plan = linear_pairs_plan(module, layout.tp) if layout.tp > 1 else ()
    if graph is None:
        graph = partitioner.trace(module, inputs, name=type(module).__name__, example_kwargs=example_kwargs)
    predicted = composed_step(graph, layout, plan, profile, int(inputs[0].shape[0]))
    run = run_layout(
        module,
        inputs,
        layout,
        timeout_s=timeout_s,
        repeats=repeats,
        progress=progress,
        tp_plan=tp_plan,
        example_kwargs=example_kwargs,
    )
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return LayoutCheck(run, predicted, _parts(predicted, run), profile.name, tuple(load))  # type: ignore[arg-type]
