"""Pipeline parallelism (torch.distributed.pipelining): contiguous stages, schedules simulated
over per-rank action lists, and the split that minimises the simulated step time.

    from partitioner import pipeline
    sim = pipeline.simulate([0.01] * 4, microbatches=8, schedule="gpipe")
    pp = pipeline.plan(graph, devices, stages=4, microbatches=8, schedule="1f1b")
    result = pipeline.run(pp, graph, graph.example_inputs)   # on real processes
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from partitioner.pipeline.schedules import (
    SCHEDULES,
    Action,
    ActionKind,
    MicrobatchError,
    accepted_microbatches,
    actions,
    check_microbatches,
)
from partitioner.pipeline.simulator import Event, Simulation, simulate, simulate_actions
from partitioner.pipeline.stages import PipelinePlan, plan
from partitioner.pipeline.steps import StepSimulator, closed_form, step_simulator

if TYPE_CHECKING:  # pragma: no cover
    from partitioner.pipeline.runner import PipelineRun, run


def __getattr__(name: str) -> Any:
    # The real run needs torch.distributed: load it on first use.
    if name in ("run", "PipelineRun"):
        from partitioner.pipeline import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "step_simulator",
    "StepSimulator",
    "closed_form",
    "simulate",
    "simulate_actions",
    "Simulation",
    "Event",
    "actions",
    "Action",
    "ActionKind",
    "SCHEDULES",
    "check_microbatches",
    "accepted_microbatches",
    "MicrobatchError",
    "plan",
    "PipelinePlan",
    "run",
    "PipelineRun",
]
