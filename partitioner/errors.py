"""The error hierarchy of the library: one base the app and the CLI catch, a few subclasses.

Messages state the rule, then the values, then the fix (torchgpipe's ``BalanceError`` style).
"""

from __future__ import annotations

from typing import Sequence

__all__ = [
    "PartitionError",
    "TraceError",
    "InfeasibleError",
    "InvalidPlanError",
    "DeviceSpecError",
    "RunError",
    "ShardingError",
]


class PartitionError(ValueError):
    """Base of every error the library raises for bad input or an impossible request."""


class TraceError(PartitionError):
    """The model could not be traced into a graph (symbolic_trace and torch.export both failed)."""


class InfeasibleError(PartitionError):
    """No plan satisfies the constraints (a node or the model does not fit the devices)."""


class InvalidPlanError(PartitionError):
    """A plan breaks a rule; ``violations`` lists every broken rule (typed
    :class:`partitioner.plan.validate.Violation` records, or strings), each printing as its message."""

    def __init__(self, violations: Sequence[object]) -> None:
        self.violations = tuple(violations)
        count = len(self.violations)
        head = f"plan is invalid ({count} violation{'s' if count != 1 else ''}):"
        super().__init__("\n".join([head, *(f"  - {v}" for v in self.violations)]))


class DeviceSpecError(PartitionError):
    """A device description (``"4x16GiB"``, a preset name, a devices file) could not be read."""


class RunError(RuntimeError):
    """A run on real processes (or a worker process) failed, hung or died; the message names the
    rank, the partition or stage, and the cause. Not a :class:`PartitionError`: the input was
    fine, the run was not (the command line exits with its own code for it)."""

    def __init__(self, message: str, rank: int | None = None, partition: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.partition = partition


class ShardingError(PartitionError):
    """A parameter's partition list (autodist's ``"1,4"`` form) is invalid for its shape."""
