"""Activation rematerialisation (functorch's ``min_cut_rematerialization_partition``): what
training saves for the backward and what it recomputes, under a memory budget
(:mod:`._joint`, torch, run in a worker process), and the training memory of each device of a
plan (:mod:`.memory`, torch-free).

    from partitioner import remat
    r = remat.analyze(model, example_inputs, budget=0.5)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from partitioner.remat.memory import LOSSES, RematResult, TrainingMemory, largest_fitting_budget, training_memory

if TYPE_CHECKING:  # pragma: no cover
    from partitioner.remat._joint import analyze, sweep


def __getattr__(name: str) -> Any:
    # The joint trace needs torch: load it on first use.
    if name in ("analyze", "sweep", "VIEW_OPS"):
        from partitioner.remat import _joint

        return getattr(_joint, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RematResult", "TrainingMemory", "analyze", "sweep", "training_memory", "largest_fitting_budget", "LOSSES"]
