"""Torch in: trace a model (torch.fx, falling back to torch.export), make in-place ops out-of-place,
and annotate every node with its shape, bytes and FLOPs on fake tensors, as a :class:`Graph`; a
model of repeated blocks traced a few blocks and repeated to its depth (:func:`trace_repeated`,
NOTE: [Tracing a repeated block once])."""

from __future__ import annotations

from partitioner.tracing.repeated import RepeatOutcome, trace_repeated
from partitioner.tracing.tracer import trace

__all__ = ["trace", "trace_repeated", "RepeatOutcome"]
