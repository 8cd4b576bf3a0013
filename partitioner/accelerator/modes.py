"""The partition modes: one module per algorithm, and a registry front door.

Each mode is ``partition(problem) -> Assignment``; :func:`partitioner.partition` validates the
input, applies the single-partition rule, calls the mode and turns the assignment into a Plan.
"""

from __future__ import annotations

from typing import Callable

from partitioner.accelerator import (
    aot_based,
    cost_aware,
    kl_based,
    largest_first,
    optimal,
    size_based,
    sparse_nn,
)
from partitioner.accelerator._base import Assignment, Problem
from partitioner.errors import PartitionError

__all__ = ["MODES", "DEFAULT_MODE", "get_mode", "DESCRIPTIONS"]

_MODULES = {
    "size_based": size_based,
    "largest_first": largest_first,
    "sparse_nn": sparse_nn,
    "cost_aware": cost_aware,
    "kl_based": kl_based,
    "aot_based": aot_based,
    "optimal": optimal,
}

MODES: dict[str, Callable[[Problem], Assignment]] = {name: module.partition for name, module in _MODULES.items()}

DEFAULT_MODE = "size_based"

DESCRIPTIONS: dict[str, str] = {
    name: (module.__doc__ or "").strip().split("\n\n")[0] for name, module in _MODULES.items()
}


def get_mode(name: str) -> Callable[[Problem], Assignment]:
    try:
        return MODES[name]
    except KeyError:
        raise PartitionError(f"unknown partition mode {name!r}; valid modes are {', '.join(MODES)}") from None
