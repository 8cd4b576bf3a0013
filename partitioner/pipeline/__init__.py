"""Pipeline parallelism (torch.distributed.pipelining): contiguous stages, schedules simulated
over per-rank action lists, and the split that minimises the simulated step time.

    from partitioner import pipeline
    sim = pipeline.simulate([0.01] * 4, microbatches=8, schedule="gpipe")
    pp = pipeline.plan(graph, devices, stages=4, microbatches=8, schedule="1f1b")
"""

from __future__ import annotations

from .schedules import SCHEDULES, actions
from .simulate import Simulation, simulate, simulate_actions
from .stages import PipelinePlan, plan

__all__ = ["simulate", "simulate_actions", "Simulation", "actions", "SCHEDULES", "plan", "PipelinePlan"]
