"""Hand edits of a plan's mapping: move a node, place a partition on other devices.

An edit is a plain dict (JSON-ready, small enough for ``st.session_state``)::

    {"node_to_partition": {node name: partition id},
     "partition_to_devices": {partition id as str: [logical device ids]},
     "source": "what it started from", "graph_fingerprint": "..."}

Functions return new dicts and never raise for a layout that breaks a rule: the app scores the
edit with :func:`partitioner.evaluate_plan` and lists ``Plan.violations`` in words.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import partitioner
from partitioner import Device, Graph, Plan
from partitioner.plan.diff import diff_plans

__all__ = ["edit_from_plan", "move_node", "place_partition", "new_partition_id", "evaluate_edit", "NEW"]

NEW = -1  # the target id meaning "a new partition"

Edit = dict[str, Any]


def edit_from_plan(plan: Plan, source: str) -> Edit:
    return {
        "node_to_partition": plan.node_to_partition(),
        "partition_to_devices": {str(k): list(v) for k, v in plan.partition_to_devices().items()},
        "source": source,
        "graph_fingerprint": plan.graph_fingerprint,
    }


def new_partition_id(edit: Mapping[str, Any]) -> int:
    ids = [int(k) for k in edit["partition_to_devices"]] + list(edit["node_to_partition"].values())
    return max(ids, default=-1) + 1


def _tidy(edit: Edit) -> Edit:
    """Drop partitions that hold no node any more."""
    used = {int(p) for p in edit["node_to_partition"].values()}
    edit["partition_to_devices"] = {
        k: v for k, v in sorted(edit["partition_to_devices"].items(), key=lambda kv: int(kv[0])) if int(k) in used
    }
    return edit


def move_node(edit: Mapping[str, Any], node: str, target: int, devices: Sequence[int] = ()) -> Edit:
    """``node`` moved to partition ``target``, or to a new partition on ``devices`` when
    ``target`` is :data:`NEW`. Raises ``KeyError`` for a node the mapping does not hold."""
    if node not in edit["node_to_partition"]:
        raise KeyError(f"node {node!r} is not in the plan being edited")
    out: Edit = {
        **edit,
        "node_to_partition": dict(edit["node_to_partition"]),
        "partition_to_devices": {k: list(v) for k, v in edit["partition_to_devices"].items()},
    }
    if target == NEW:
        target = new_partition_id(edit)
        out["partition_to_devices"][str(target)] = [int(d) for d in devices]
    elif str(target) not in out["partition_to_devices"]:
        out["partition_to_devices"][str(target)] = [int(d) for d in devices]
    out["node_to_partition"][node] = int(target)
    return _tidy(out)


def place_partition(edit: Mapping[str, Any], partition: int, devices: Sequence[int]) -> Edit:
    """Partition ``partition`` placed on ``devices`` (several devices: a replicated partition)."""
    out: Edit = {**edit, "partition_to_devices": {k: list(v) for k, v in edit["partition_to_devices"].items()}}
    out["partition_to_devices"][str(partition)] = sorted({int(d) for d in devices})
    return out


def evaluate_edit(
    edit: Mapping[str, Any],
    graph: Graph,
    devices: Sequence[Device],
    transfer_rate_bytes_per_s: float | None = None,
    node_latency: Mapping[str, Sequence[float]] | None = None,
    base: Plan | None = None,
) -> Plan:
    """Score the edit against ``graph`` and ``devices`` (never raises for memory over capacity
    or a cycle; raises :class:`partitioner.PartitionError` for nodes or devices the model does
    not have). With ``base`` (the plan the edit started from) the result keeps its mode and cost
    model and is marked edited when it differs from it (renumbering alone is no change)."""
    kwargs: dict[str, Any] = dict(
        transfer_rate_bytes_per_s=transfer_rate_bytes_per_s, node_latency=node_latency, keep_ids=True
    )
    if base is not None:
        kwargs.update(mode=base.mode, cost_model=base.cost_model)
    scored = partitioner.evaluate_plan(
        graph,
        devices,
        edit["node_to_partition"],
        {int(k): v for k, v in edit["partition_to_devices"].items()},
        **kwargs,
    )
    if base is not None and not diff_plans(base, scored).is_empty:
        scored = dataclasses.replace(scored, provenance=dataclasses.replace(scored.provenance, edited=True))
    return scored
