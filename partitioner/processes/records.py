"""What one rank of a real run sends back across the process boundary: :class:`RankStep`, the one
record every run's rank entry returns (a pipeline plan's run, a tensor-parallel run, a composed
layout's run with or without pipeline stages), so the parent reads typed fields, never a
``dict`` by string keys. Torch-free: tensors travel in its fields as the launcher pickles them.

A rank's failure is not a field here: the launcher raises :class:`~partitioner.errors.RunError`
with the failed rank in ``rank``, and the parent names that rank's place from the number (its
stage, its mesh coordinates), never by reading the message's text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["RankStep"]


@dataclass(frozen=True)
class RankStep:
    """One rank's report of its timed steps; the fields a run does not measure keep their defaults."""

    rank: int
    step_s: float = 0.0  # its median timed step or forward (NOTE: [One statistic] in partitioner.processes.timing)
    outputs: tuple[Any, ...] | None = None  # the model's output tensors (CPU) where this rank holds them
    grads: Mapping[str, Any] | None = None  # parameter name -> full gradient (CPU) where this rank reports them
    loss: float | None = None  # the loss of its last step, where it computes one
    coords: tuple[int, ...] = ()  # its place on the run's mesh: (pp, dp, tp) or (dp, tp); () on a flat group
    parameter_bytes: int = 0  # the local shards of the parameters it holds after the step
    gradient_bytes: int = 0  # and of their gradients
    sync_s: float = 0.0  # the median gradient all-reduce over dp of its timed steps
    stage_forward_s: Mapping[int, float] = field(default_factory=dict)  # stage -> mean forward per microbatch
    forward_collectives: Mapping[str, int] = field(default_factory=dict)  # kind -> calls counted in the forward
    backward_collectives: Mapping[str, int] | None = None  # and in the backward, where it ran one
    local_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # parameter -> its local shard's shape

    @property
    def memory_bytes(self) -> int:
        return self.parameter_bytes + self.gradient_bytes
