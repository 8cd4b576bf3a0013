"""Building plans: an assignment of nodes to partitions and devices turned into a :class:`Plan`
(:func:`build_plan`), and a plan scored again on a graph, cost model or transfer rate
(:func:`rescore`). The one place that derives a plan's figures from the cost model
(:mod:`partitioner.cost.model`); :mod:`partitioner.plan.records` holds the records themselves.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

from partitioner.cost.measured import runs_serially
from partitioner.cost.model import CostModel, Evaluation, node_latencies, transfer_latency_s
from partitioner.devices import Device
from partitioner.graph import Graph
from partitioner.plan.records import OPTIMALITY_TOLERANCE, Edge, Partition, Plan, Provenance

__all__ = ["build_plan", "rescore"]


def rescore(
    plan: Plan, graph: Graph, cost_model: str | None = None, transfer_rate_bytes_per_s: float | None = None
) -> Plan:
    """The same partitions and devices as ``plan`` scored on ``graph`` under ``cost_model`` (default:
    the plan's) and ``transfer_rate_bytes_per_s`` (default: the plan's). Never raises for a plan
    that does not fit: the result records it. O(N + E)."""
    options = plan.options.replace(
        cost_model=cost_model or plan.cost_model,
        transfer_rate_bytes_per_s=transfer_rate_bytes_per_s or plan.transfer_rate_bytes_per_s,
    )
    part = [-1] * len(graph)
    for name, pid in plan.node_to_partition().items():
        if name in graph.index and graph.nodes[graph.index[name]].is_op:
            part[graph.index[name]] = pid
    devices_of = [list(p.device_ids) for p in sorted(plan.partitions, key=lambda p: p.id)]
    devices = list(plan.devices)
    cost = CostModel(
        graph,
        node_latencies(graph, devices, options.node_latency_dict),
        options.transfer_rate_bytes_per_s,
        options.cost_model,
        transfer_latency_s(devices),
        runs_serially(devices),
    )
    provenance = dataclasses.replace(plan.provenance, options=options)
    # The solver's bound holds under both cost models (NOTE: [Relaxation bound]), not at another rate.
    same_rate = options.transfer_rate_bytes_per_s == plan.options.transfer_rate_bytes_per_s
    return build_plan(
        graph,
        cost,
        part,
        devices_of,
        plan.devices,
        plan.mode,
        provenance,
        keep_ids=True,
        lower_bound_s=plan.lower_bound_s if same_rate else 0.0,
    )


def _numbered(
    cost: CostModel, part: Sequence[int], order: Sequence[int], devices: Mapping[int, tuple[int, ...]]
) -> Evaluation:
    """The evaluation of ``part`` with partition ``order[i]`` numbered i."""
    renumber = {old: new for new, old in enumerate(order)}
    return cost.evaluate([renumber[p] if p >= 0 else -1 for p in part], [devices[p] for p in order])


def build_plan(
    graph: Graph,
    cost: CostModel,
    part: Sequence[int],
    devices_of: Sequence[Sequence[int]],
    devices: Sequence[Device],
    mode: str,
    provenance: Provenance | None = None,
    keep_ids: bool = False,
    lower_bound_s: float = 0.0,
) -> Plan:
    """Turn an assignment into a :class:`Plan`.

    ``lower_bound_s`` is a bound proven elsewhere (the optimal mode's solver); the plan's bound is
    the larger of it and the cost model's own (NOTE: [Lower bound]), and the plan is
    ``proven_optimal`` when its latency is within :data:`OPTIMALITY_TOLERANCE` of that bound.

    Partitions are renumbered by their first node in topological order, so equal assignments
    give equal plans whatever ids the mode used, except where that order is slower (a device
    runs its partitions in id order among those ready): then the mode's order is kept. With
    ``keep_ids`` (a plan edited by hand) they keep their order and only gaps close, so a
    partition keeps its name across edits. Never
    raises for an invalid layout: the plan records what it is, and :meth:`Plan.violations` says
    what is wrong.
    """
    used, norm, ev = _ordered(cost, part, devices_of, keep_ids)
    new_devices = [norm[p] for p in used]
    bound = max(cost.lower_bound_s(), float(lower_bound_s))
    partitions = _partitions(graph, ev, new_devices)
    edges = tuple(
        Edge(a, b, nbytes, cost.comm_s(nbytes, new_devices[a], new_devices[b]))
        for (a, b), nbytes in sorted(ev.edges.items())
    )
    return Plan(
        mode=mode,
        partitions=partitions,
        devices=tuple(devices),
        edges=edges,
        latency_s=ev.latency_s,
        critical_path=tuple(ev.critical_path),
        transfer_rate_bytes_per_s=cost.rate,
        device_usage=tuple(cost.device_memory(ev.members, new_devices).items()),
        provenance=provenance or Provenance(),
        model=graph.name,
        graph_fingerprint=graph.fingerprint(),
        lower_bound_s=bound,
        proven_optimal=math.isfinite(ev.latency_s) and ev.latency_s <= bound * (1 + OPTIMALITY_TOLERANCE),
    )


def _ordered(
    cost: CostModel, part: Sequence[int], devices_of: Sequence[Sequence[int]], keep_ids: bool
) -> tuple[list[int], dict[int, tuple[int, ...]], Evaluation]:
    """(the mode's partition ids in their new order, each one's sorted devices, the evaluation
    under that numbering): by first node unless that is slower, or as given with ``keep_ids``."""
    num = len(devices_of)
    first = [len(part)] * num
    for v, p in enumerate(part):
        if p >= 0 and v < first[p]:
            first[p] = v
    own = [p for p in range(num) if first[p] < len(part)]
    used = own if keep_ids else sorted(own, key=lambda p: first[p])
    norm = {p: tuple(sorted(set(int(d) for d in devices_of[p]))) for p in own}
    ev = _numbered(cost, part, used, norm)
    if used != own:  # a device runs its ready partitions in id order: renumber only if no slower
        kept = _numbered(cost, part, own, norm)
        if kept.latency_s < ev.latency_s * (1 - 1e-12):
            used, ev = own, kept
    return used, norm, ev


def _partitions(graph: Graph, ev: Evaluation, devices: Sequence[tuple[int, ...]]) -> tuple[Partition, ...]:
    """The :class:`Partition` records of an evaluation, partition p on ``devices[p]``."""
    names = [nd.name for nd in graph.nodes]
    parents: list[set[int]] = [set() for _ in devices]
    children: list[set[int]] = [set() for _ in devices]
    for a, b in ev.edges:
        children[a].add(b)
        parents[b].add(a)
    return tuple(
        Partition(
            id=p,
            node_names=tuple(names[v] for v in ev.members[p]),
            device_ids=devices[p],
            memory_bytes=ev.memory_bytes[p],
            memory_latency_s=ev.latency[p][1],
            compute_latency_s=ev.latency[p][2],
            latency_s=ev.latency[p][0],
            bfs_level=ev.bfs_level[p],
            parents=tuple(sorted(parents[p])),
            children=tuple(sorted(children[p])),
            start_s=ev.start_s[p],
            finish_s=ev.finish_s[p],
        )
        for p in range(len(devices))
    )
