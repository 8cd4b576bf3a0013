"""How large a plan may be, checked on its parsed JSON before it is built and drawn: a valid plan
holds no more partitions and node entries than the model has operations (each operation in one
partition), so a file past those counts is refused at once with the counts and the fix. Without
a model, fixed caps stand in. Torch-free."""

from __future__ import annotations

import json
from typing import Any, Mapping

from partitioner.graph import Graph
from partitioner.plan.records import Plan, PlanFormatError

__all__ = ["check_plan_size", "plan_from_json", "MAX_PLAN_ENTRIES"]

# Without a model: partitions, node entries or devices past this are no plan anyone made here (the
# sample and hf: models trace to at most this many operations); with a model, its operations.
MAX_PLAN_ENTRIES = 20_000


def check_plan_size(data: Any, graph: Graph | None = None) -> None:
    """Raise :class:`PlanFormatError` when the plan JSON ``data`` holds more partitions or node
    entries than ``graph`` has operations (:data:`MAX_PLAN_ENTRIES` without a graph), or more
    devices than :data:`MAX_PLAN_ENTRIES`. Other shapes pass: ``Plan.from_dict`` reports them.
    O(partitions)."""
    if not isinstance(data, Mapping):
        return
    parts = data.get("partitions")
    parts = parts if isinstance(parts, list) else []
    most = MAX_PLAN_ENTRIES if graph is None else max(1, len(graph.op_names))
    whose = "" if graph is None else f"; {graph.name or 'the model'} has {most:,} operations, each in one partition"
    if len(parts) > most:
        raise PlanFormatError(
            f"a plan holds at most {most:,} partitions{whose} (this one has {len(parts):,}); "
            "load a plan made for this model, or make one with partition-explorer plan"
        )
    entries = sum(
        len(p["node_names"]) for p in parts if isinstance(p, Mapping) and isinstance(p.get("node_names"), list)
    )
    if entries > most:
        raise PlanFormatError(
            f"a plan names at most {most:,} nodes{whose} (this one names {entries:,}); "
            "load a plan made for this model, or make one with partition-explorer plan"
        )
    devices = data.get("devices")
    if isinstance(devices, list) and len(devices) > MAX_PLAN_ENTRIES:
        raise PlanFormatError(
            f"a plan has at most {MAX_PLAN_ENTRIES:,} devices (this one has {len(devices):,}); "
            "load a plan made with partition-explorer"
        )


def plan_from_json(text: str | bytes, graph: Graph | None = None) -> Plan:
    """``Plan.from_json`` with :func:`check_plan_size` against ``graph`` between the parse and the
    build: what the app's uploads and pastes read."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # malformed: from_json says so in its own words
        return Plan.from_json(text)
    check_plan_size(data, graph)
    return Plan.from_dict(data)
