"""Typed plan violations and the checks that find them, all collected before reporting
(torchgpipe's ``verify_skippables`` and pipelining's numbered validation rules do the same).

A :class:`Violation` has a ``kind`` (one of :data:`KINDS`), a message that states the rule, the
values and the fix, and the partition and node it concerns. Callers filter by kind, never by
searching the text: :func:`partitioner.split` ignores the device kinds, ``check`` reports all.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Mapping, Protocol, Sequence

from partitioner.cost.model import CostModel
from partitioner.devices import Device
from partitioner.graph import Graph, find_cycle
from partitioner.units import format_bytes

__all__ = [
    "Violation",
    "ViolationKind",
    "KINDS",
    "DEVICE_KINDS",
    "PARTITION_IDS",
    "EMPTY_PARTITION",
    "DUPLICATE_NODE",
    "NO_DEVICE",
    "UNKNOWN_DEVICE",
    "GRAPH_CHANGED",
    "UNKNOWN_NODE",
    "NOT_OP_NODE",
    "MISSING_NODE",
    "MEMORY",
    "CYCLE",
    "LATENCY_BUDGET",
    "MEMORY_BUDGET",
    "plan_violations",
    "PlanLike",
]


class ViolationKind(str, Enum):
    """What rule a violation breaks; a ``str`` (JSON writes the value), so ``kind == "memory"``
    holds and callers filter by kind, never by searching the message."""

    PARTITION_IDS = "partition_ids"  # ids are not 0..P-1
    EMPTY_PARTITION = "empty_partition"  # a partition holds no node
    DUPLICATE_NODE = "duplicate_node"  # a node is in two partitions
    NO_DEVICE = "no_device"  # a partition is placed on no device
    UNKNOWN_DEVICE = "unknown_device"  # a partition is placed on a device that does not exist
    GRAPH_CHANGED = "graph_changed"  # the plan was made for another version of the model
    UNKNOWN_NODE = "unknown_node"  # the plan names a node the model lacks
    NOT_OP_NODE = "not_op_node"  # the plan places an input, attribute or output node
    MISSING_NODE = "missing_node"  # an op node of the model is in no partition
    MEMORY = "memory"  # a device holds more than its memory
    CYCLE = "cycle"  # partitions depend on each other in a cycle
    LATENCY_BUDGET = "latency_budget"  # end-to-end latency over a given budget
    MEMORY_BUDGET = "memory_budget"  # memory utilisation over a given budget

    def __str__(self) -> str:
        return self.value


(
    PARTITION_IDS,
    EMPTY_PARTITION,
    DUPLICATE_NODE,
    NO_DEVICE,
    UNKNOWN_DEVICE,
    GRAPH_CHANGED,
    UNKNOWN_NODE,
    NOT_OP_NODE,
    MISSING_NODE,
    MEMORY,
    CYCLE,
    LATENCY_BUDGET,
    MEMORY_BUDGET,
) = tuple(ViolationKind)
KINDS = tuple(ViolationKind)

# Kinds about where partitions run, not what they compute: a split module ignores them.
DEVICE_KINDS = frozenset({NO_DEVICE, UNKNOWN_DEVICE, MEMORY, MEMORY_BUDGET})


@dataclass(frozen=True)
class Violation:
    """One broken rule of a plan."""

    kind: ViolationKind
    message: str
    partition: int | None = None
    node: str | None = None
    device: int | None = None

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "message": self.message,
            "partition": self.partition,
            "node": self.node,
            "device": self.device,
        }


class _PartitionLike(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def node_names(self) -> Sequence[str]: ...
    @property
    def device_ids(self) -> Sequence[int]: ...


class _EdgeLike(Protocol):
    @property
    def src(self) -> int: ...
    @property
    def dst(self) -> int: ...
    @property
    def bytes(self) -> int: ...


class PlanLike(Protocol):
    """What the checks read of a plan (:class:`partitioner.plan.records.Plan` has it all). The
    rules know the plan only by this shape, so the records import the rules and never the
    other way round (no import circle, typing included)."""

    @property
    def partitions(self) -> Sequence[_PartitionLike]: ...
    @property
    def devices(self) -> Sequence[Device]: ...
    @property
    def edges(self) -> Sequence[_EdgeLike]: ...
    @property
    def device_usage(self) -> Sequence[tuple[int, int]]: ...
    @property
    def graph_fingerprint(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def cost_model(self) -> str: ...


def _names(names: Sequence[str], where: Mapping[str, int] | None = None, limit: int = 10) -> str:
    shown = ", ".join(f"{n!r} (partition {where[n]})" if where else repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def plan_violations(
    plan: PlanLike,
    graph: Graph | None = None,
    devices: Sequence[Device] | None = None,
    check_fingerprint: bool = True,
    cost_model: str | None = None,
) -> list[Violation]:
    """Every broken rule of ``plan``; an empty list means it is valid.

    With ``graph``, membership, memory and data flow are recomputed from it (over the nodes it
    knows). ``devices`` checks the plan against other devices than its own (a ``check`` in CI
    against today's hardware). ``check_fingerprint`` reports a plan made for a different version
    of the model. Memory is counted under ``cost_model`` (default: the plan's). O(N + E).
    """
    found = _id_violations(plan)
    ids_ok = not found
    seen = _first_partition_of(plan, found)
    known = {d.logical_id: d for d in (plan.devices if devices is None else devices)}
    found += _placement_violations(plan, known)
    used: Mapping[int, int] = dict(plan.device_usage)
    edges: Mapping[tuple[int, int], int] = {(e.src, e.dst): e.bytes for e in plan.edges}
    if graph is not None:
        found += _graph_violations(plan, graph, seen, check_fingerprint)
        if ids_ok:
            used, edges = _recount(plan, graph, seen, cost_model or plan.cost_model)
    found += _memory_violations(plan, known, used)
    if ids_ok:
        found += _cycle_violations(len(plan.partitions), edges)
    return found


def _id_violations(plan: PlanLike) -> list[Violation]:
    """Partition ids must be 0..P-1."""
    ids = sorted(p.id for p in plan.partitions)
    if ids == list(range(len(ids))):
        return []
    return [
        Violation(PARTITION_IDS, f"partition ids must be 0..{len(ids) - 1} without gaps (got {ids}); renumber them")
    ]


def _first_partition_of(plan: PlanLike, found: list[Violation]) -> dict[str, int]:
    """Node name -> the first partition holding it; empty partitions and nodes held twice are
    appended to ``found``."""
    seen: dict[str, int] = {}
    for p in plan.partitions:
        if not p.node_names:
            found.append(Violation(EMPTY_PARTITION, f"partition {p.id} holds no node; remove it", p.id))
        for name in p.node_names:
            if name in seen:
                found.append(
                    Violation(
                        DUPLICATE_NODE,
                        f"node {name!r} is in partition {seen[name]} and partition {p.id}; keep it in one",
                        p.id,
                        name,
                    )
                )
            else:
                seen[name] = p.id
    return seen


def _placement_violations(plan: PlanLike, known: Mapping[int, Device]) -> list[Violation]:
    """Every partition is placed on at least one device, and only on devices that exist."""
    found: list[Violation] = []
    for p in plan.partitions:
        if not p.device_ids:
            found.append(Violation(NO_DEVICE, f"partition {p.id} has no device; assign one of {sorted(known)}", p.id))
        for did in p.device_ids:
            if did not in known:
                found.append(
                    Violation(
                        UNKNOWN_DEVICE,
                        f"partition {p.id} is placed on unknown device {did}; known logical ids are {sorted(known)}",
                        p.id,
                        device=did,
                    )
                )
    return found


def _graph_violations(
    plan: PlanLike, graph: Graph, seen: Mapping[str, int], check_fingerprint: bool
) -> list[Violation]:
    """The plan is for this graph: the same fingerprint, only its op nodes, and all of them."""
    found: list[Violation] = []
    if check_fingerprint and plan.graph_fingerprint and plan.graph_fingerprint != graph.fingerprint():
        found.append(
            Violation(
                GRAPH_CHANGED,
                f"plan was made for a different graph (fingerprint {plan.graph_fingerprint}, model "
                f"{plan.model or graph.name!r} now {graph.fingerprint()}); re-plan or check the model version",
            )
        )
    op_names = set(graph.op_names)
    unknown = sorted(n for n in seen if n not in graph.index)
    not_op = sorted(n for n in seen if n in graph.index and n not in op_names)
    for kind, what, names in (
        (UNKNOWN_NODE, "do not exist in the model", unknown),
        (NOT_OP_NODE, "are not op nodes of the model", not_op),
    ):
        if names:
            found.append(
                Violation(
                    kind,
                    f"{len(names)} node(s) in the plan {what}: {_names(names, seen)}; remove them",
                    seen[names[0]],
                    names[0],
                )
            )
    missing = [n for n in graph.op_names if n not in seen]
    if missing:
        found.append(
            Violation(
                MISSING_NODE,
                f"{len(missing)} node(s) of the model are in no partition: {_names(missing)}; "
                "assign each to a partition",
                node=missing[0],
            )
        )
    return found


def _recount(
    plan: PlanLike, graph: Graph, seen: Mapping[str, int], cost_model: str
) -> tuple[Mapping[int, int], Mapping[tuple[int, int], int]]:
    """(bytes per device, bytes per partition edge) recomputed over the nodes the graph knows
    (first placement of a duplicated node wins), so figures are today's, not the plan's record.
    Nodes in no partition add no edge (they are reported as missing, not as a cycle)."""
    op_names = set(graph.op_names)
    part = [-1] * len(graph)
    for name, pid in seen.items():
        if name in op_names:
            part[graph.index[name]] = pid
    model = CostModel(graph, [(0.0, 0.0)] * len(graph), None, cost_model)
    devs = [p.device_ids for p in sorted(plan.partitions, key=lambda q: q.id)]
    ev = model.evaluate(part, devs)
    return model.device_memory(ev.members, devs), ev.edges


def _memory_violations(plan: PlanLike, known: Mapping[int, Device], used: Mapping[int, int]) -> list[Violation]:
    """No device holds more than its memory."""
    holders: dict[int, list[int]] = {}
    for p in plan.partitions:
        for did in p.device_ids:
            holders.setdefault(did, []).append(p.id)
    found: list[Violation] = []
    for did in sorted(used):
        dev = known.get(did)
        if dev is not None and used[did] > dev.memory_bytes:
            found.append(
                Violation(
                    MEMORY,
                    f"device {dev.name} (id {did}) holds partition(s) {holders.get(did, [])} using "
                    f"{format_bytes(used[did])} of its {format_bytes(dev.memory_bytes)} "
                    f"({format_bytes(used[did] - dev.memory_bytes)} over); move nodes to another device or add memory",
                    min(holders[did]) if holders.get(did) else None,
                    device=did,
                )
            )
    return found


def _cycle_violations(count: int, edges: Mapping[tuple[int, int], int]) -> list[Violation]:
    """Data flows one way between partitions."""
    cycle = find_cycle(count, edges)
    if not cycle:
        return []
    return [
        Violation(
            CYCLE,
            "partitions depend on each other in a cycle "
            + " -> ".join(str(c) for c in cycle)
            + "; move nodes so data flows one way between them",
            cycle[0],
        )
    ]
