"""Partition Explorer's library: trace a model, cost it, partition it, split it.

Pure Python and torch; nothing here imports a UI library.

    import partitioner
    graph = partitioner.trace(model, example_inputs)
    plan = partitioner.partition(graph, partitioner.parse_devices("4x16GiB"), mode="cost_aware")
    split_module = partitioner.split(plan, graph)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from partitioner.accelerator.api import evaluate_plan, partition
from partitioner.accelerator.check import check_plan
from partitioner.accelerator.modes import DEFAULT_MODE, DESCRIPTIONS, MODES
from partitioner.cost.model import node_latencies, roofline_latencies
from partitioner.devices import Device, parse_devices
from partitioner.errors import (
    DeviceSpecError,
    InfeasibleError,
    InvalidPlanError,
    PartitionError,
    RunError,
    ShardingError,
    TraceError,
)
from partitioner.graph import Graph, Node
from partitioner.hardware import HARDWARE as PRESETS  # the device presets: the one hardware table
from partitioner.options import PartitionOptions
from partitioner.plan import SCHEMA_VERSION, Edge, Partition, Plan, PlanFormatError, rescore
from partitioner.plan.validate import Violation
from partitioner.units import format_bytes, format_seconds, parse_bytes

if TYPE_CHECKING:  # pragma: no cover - for type checkers; at run time these load on first use
    from partitioner.runtime.execute import run
    from partitioner.runtime.splitting import split
    from partitioner.tracing.tracer import trace

# Torch sits at the edges (trace in; split modules and real runs out): those names load on
# first use, so `import partitioner` and the algorithms do not pay for importing torch.
_LAZY = {"trace": ("tracing", "trace"), "split": ("runtime.splitting", "split"), "run": ("runtime.execute", "run")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module_name}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "trace",
    "partition",
    "evaluate_plan",
    "split",
    "run",
    "check_plan",
    "rescore",
    "PartitionOptions",
    "Violation",
    "Graph",
    "Node",
    "Device",
    "PRESETS",
    "parse_bytes",
    "parse_devices",
    "format_bytes",
    "format_seconds",
    "node_latencies",
    "roofline_latencies",
    "Plan",
    "Partition",
    "Edge",
    "SCHEMA_VERSION",
    "MODES",
    "DEFAULT_MODE",
    "DESCRIPTIONS",
    "PartitionError",
    "TraceError",
    "InfeasibleError",
    "InvalidPlanError",
    "PlanFormatError",
    "DeviceSpecError",
    "RunError",
    "ShardingError",
]

__version__ = "0.1.0"
