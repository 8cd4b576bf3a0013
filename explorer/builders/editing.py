"""Hand edits of a plan's mapping: move a node, place a partition on other devices.

An edit is a frozen :class:`Edit` record (small enough for ``st.session_state``); every function
returns a new one (``dataclasses.replace``) and never raises for a layout that breaks a rule: the
app scores the edit with :func:`partitioner.evaluate_plan` and lists ``Plan.violations`` in words.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import partitioner
from partitioner import Device, Graph, Plan
from partitioner.plan.diff import diff_plans

__all__ = [
    "Edit",
    "History",
    "edit_from_plan",
    "move_node",
    "place_partition",
    "new_partition_id",
    "evaluate_edit",
    "scoring_inputs",
    "remember",
    "undo",
    "NEW",
]

NEW = -1  # the target id meaning "a new partition"


@dataclass(frozen=True)
class Edit:
    """A plan's mapping being edited by hand, and where it came from."""

    nodes: tuple[tuple[str, int], ...]  # (node name, partition id), in the plan's node order
    placements: tuple[tuple[int, tuple[int, ...]], ...]  # (partition id, logical device ids), by id
    source: str  # what it started from, in words ("file plan.json", "the size_based plan of mlp")
    graph_fingerprint: str | None = None  # of the graph the plan was made for
    loaded: Plan | None = None  # the plan a file or paste brought (scored on its own devices and rates)

    @property
    def node_to_partition(self) -> dict[str, int]:
        return dict(self.nodes)

    @property
    def partition_to_devices(self) -> dict[int, tuple[int, ...]]:
        return dict(self.placements)

    def with_mapping(
        self, node_to_partition: Mapping[str, int], partition_to_devices: Mapping[int, Sequence[int]]
    ) -> Edit:
        """This edit holding another mapping; partitions that hold no node are dropped."""
        used = set(node_to_partition.values())
        return dataclasses.replace(
            self,
            nodes=tuple((n, int(p)) for n, p in node_to_partition.items()),
            placements=tuple(
                (int(p), tuple(int(d) for d in devs)) for p, devs in sorted(partition_to_devices.items()) if p in used
            ),
        )


def edit_from_plan(plan: Plan, source: str, loaded: bool = False) -> Edit:
    """The mapping of ``plan``; ``loaded``: the plan came from a file or a paste (kept, with its devices)."""
    return Edit(
        nodes=tuple(plan.node_to_partition().items()),
        placements=tuple(sorted((int(k), tuple(v)) for k, v in plan.partition_to_devices().items())),
        source=source,
        graph_fingerprint=plan.graph_fingerprint,
        loaded=plan if loaded else None,
    )


def new_partition_id(edit: Edit) -> int:
    ids = [p for p, _ in edit.placements] + [p for _, p in edit.nodes]
    return max(ids, default=-1) + 1


def move_node(edit: Edit, node: str, target: int, devices: Sequence[int] = ()) -> Edit:
    """``node`` moved to partition ``target``, or to a new partition on ``devices`` when
    ``target`` is :data:`NEW`. Raises ``KeyError`` for a node the mapping does not hold."""
    where = edit.node_to_partition
    if node not in where:
        raise KeyError(f"node {node!r} is not in the plan being edited")
    placed: dict[int, Sequence[int]] = dict(edit.partition_to_devices)
    if target == NEW:
        target = new_partition_id(edit)
    placed.setdefault(int(target), [int(d) for d in devices])
    where[node] = int(target)
    return edit.with_mapping(where, placed)


def place_partition(edit: Edit, partition: int, devices: Sequence[int]) -> Edit:
    """Partition ``partition`` placed on ``devices`` (several devices: a replicated partition)."""
    placed: dict[int, Sequence[int]] = dict(edit.partition_to_devices)
    placed[int(partition)] = sorted({int(d) for d in devices})
    return edit.with_mapping(edit.node_to_partition, placed)


def evaluate_edit(
    edit: Edit,
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
        edit.node_to_partition,
        {p: list(d) for p, d in edit.placements},
        **kwargs,
    )
    if base is not None and not diff_plans(base, scored).is_empty:
        scored = dataclasses.replace(scored, provenance=dataclasses.replace(scored.provenance, edited=True))
    return scored


def scoring_inputs(
    edit: Edit, current: Plan | None, sidebar_rate: float | None, sidebar_latency: Mapping[str, Sequence[float]] | None
) -> tuple[Plan | None, float | None, Mapping[str, Sequence[float]] | None]:
    """(the plan the edit is compared with, the transfer rate and node latencies it is scored at):
    a loaded plan with its own rate and latencies (the figures ``partition-explorer check`` gives
    for it), else the sidebar's plan with the sidebar's."""
    if edit.loaded is not None:
        return edit.loaded, edit.loaded.transfer_rate_bytes_per_s, edit.loaded.options.node_latency_dict
    return current, sidebar_rate, sidebar_latency


History = tuple[tuple[str, Edit | None], ...]  # (what the change was, the edit before it; None: the current plan)
HISTORY_LIMIT = 50


def remember(history: History, what: str, before: Edit | None) -> History:
    """``history`` with ``before`` kept (``what`` replaces it), the oldest dropped past the limit."""
    return (*history, (what, before))[-HISTORY_LIMIT:]


def undo(history: History) -> tuple[History, Edit | None]:
    """(the history less its last step, the edit to go back to). Raises IndexError when empty."""
    if not history:
        raise IndexError("nothing to undo")
    return history[:-1], history[-1][1]
