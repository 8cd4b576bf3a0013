"""Partition Explorer's library: trace a model, cost it, partition it, split it.

Pure Python and torch; nothing here imports a UI library.

    import partitioner
    graph = partitioner.trace(model, example_inputs)
    plan = partitioner.partition(graph, partitioner.parse_devices("4x16GiB"), mode="cost_aware")
    split_module = partitioner.split(plan, graph)
"""

from __future__ import annotations

from .api import evaluate_plan, partition
from .costs import node_latencies, roofline_latencies
from .devices import PRESETS, Device, parse_devices
from .errors import (
    DeviceSpecError,
    InfeasibleError,
    InvalidPlanError,
    PartitionError,
    RunError,
    ShardingError,
    TraceError,
)
from .graph import Graph, Node
from .modes import DEFAULT_MODE, DESCRIPTIONS, MODES
from .plan import SCHEMA_VERSION, Edge, Partition, Plan, PlanFormatError
from .runtime import split
from .trace import trace
from .units import format_bytes, format_seconds, parse_bytes

__all__ = [
    "trace",
    "partition",
    "evaluate_plan",
    "split",
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
