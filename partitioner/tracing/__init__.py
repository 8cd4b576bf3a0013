"""Torch in: trace a model (torch.fx, falling back to torch.export), make in-place ops out-of-place,
and annotate every node with its shape, bytes and FLOPs on fake tensors, as a :class:`Graph`."""

from __future__ import annotations

from partitioner.tracing.tracer import trace

__all__ = ["trace"]
