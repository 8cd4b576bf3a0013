"""A plan checked against a model, devices and budgets: every violation collected
(:mod:`partitioner.plan.validate`'s kinds plus the latency and memory budgets), the plan re-scored
where it can be. The command line's ``check`` and the app's Review page call :func:`check_plan`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from partitioner.accelerator.api import check_devices, evaluate_plan
from partitioner.cost.model import node_latencies
from partitioner.devices import Device
from partitioner.graph import Graph
from partitioner.plan.records import Plan
from partitioner.plan.validate import GRAPH_CHANGED, LATENCY_BUDGET, MEMORY_BUDGET, Violation
from partitioner.units import format_bytes, format_seconds

__all__ = ["CheckResult", "check_plan"]


@dataclass(frozen=True)
class CheckResult:
    """What :func:`check_plan` found: every violation, notes that do not fail the check, and the
    plan as re-evaluated on the model and devices (None when it could not be)."""

    violations: tuple[Violation, ...]
    notes: tuple[str, ...]
    evaluated: Plan | None

    @property
    def ok(self) -> bool:
        return not self.violations


def check_plan(
    plan: Plan,
    graph: Graph,
    devices: Sequence[Device],
    transfer_rate_bytes_per_s: float | None = None,
    node_latency: Mapping[str, Sequence[float]] | None = None,
    max_latency_s: float | None = None,
    max_memory_utilisation: float | None = None,
    strict: bool = False,
    cost_model: str | None = None,
) -> CheckResult:
    """Validate ``plan`` against ``graph`` and ``devices``; collects every violation.

    Kinds: see :mod:`partitioner.plan.validate`, plus the budgets. The transfer rate defaults to the
    one the plan was made with. A changed graph fingerprint is a note, or a violation with
    ``strict``. O(N + E) plus one plan evaluation. Raises :class:`PartitionError` for bad input
    (a ``node_latency`` naming nodes the model lacks), not for a plan that does not fit.
    """
    devices = check_devices(devices)
    if node_latency:
        node_latencies(graph, devices, node_latency)  # bad input raises PartitionError (exit 2)
    if transfer_rate_bytes_per_s is None:
        transfer_rate_bytes_per_s = plan.transfer_rate_bytes_per_s
    if node_latency is None and plan.options.node_latency is not None:
        node_latency = plan.options.node_latency_dict  # the plan's own figures
    notes: list[str] = []
    problems = plan.violations(graph, devices, check_fingerprint=False, cost_model=cost_model)
    _graph_changed(plan, graph, strict, problems, notes)
    budgets = [
        name
        for name, v in (("max_latency_s", max_latency_s), ("max_memory_utilisation", max_memory_utilisation))
        if v is not None
    ]
    if not _scorable(plan, graph, devices):
        if budgets:
            notes.append(
                f"budgets ({', '.join(budgets)}) not checked: the plan must cover the model's "
                "nodes and name known devices first"
            )
        return CheckResult(tuple(problems), tuple(notes), None)
    evaluated = evaluate_plan(
        graph,
        devices,
        plan.node_to_partition(),
        plan.partition_to_devices(),
        transfer_rate_bytes_per_s,
        node_latency,
        mode=plan.mode,
        edited=plan.provenance.edited,
        cost_model=cost_model or plan.cost_model,
        keep_ids=True,
    )
    problems += _over_budgets(evaluated, devices, max_latency_s, max_memory_utilisation)
    return CheckResult(tuple(problems), tuple(notes), evaluated)


def _graph_changed(plan: Plan, graph: Graph, strict: bool, problems: list[Violation], notes: list[str]) -> None:
    """A plan made for another graph: a violation first with ``strict``, else a note."""
    if not plan.graph_fingerprint or plan.graph_fingerprint == graph.fingerprint():
        return
    changed = (
        f"the model's graph changed since the plan was made (fingerprint "
        f"{plan.graph_fingerprint} in the plan, {graph.fingerprint()} now)"
    )
    if strict:
        fix = "; re-plan, or check with strict=False to accept a plan that still fits"
        problems.insert(0, Violation(GRAPH_CHANGED, changed + fix))
    else:
        notes.append(changed + "; checking the plan against the model as it is now")


def _scorable(plan: Plan, graph: Graph, devices: Sequence[Device]) -> bool:
    """Whether the plan places every op once on known devices: what a score needs."""
    names = [n for p in plan.partitions for n in p.node_names]
    known = {d.logical_id for d in devices}
    return (
        set(names) == set(graph.op_names)
        and len(names) == len(set(names))
        and all(p.device_ids and set(p.device_ids) <= known for p in plan.partitions)
    )


def _over_budgets(
    evaluated: Plan,
    devices: Sequence[Device],
    max_latency_s: float | None,
    max_memory_utilisation: float | None,
) -> list[Violation]:
    """The budgets ``evaluated`` exceeds, each naming by how much and the fix."""
    problems = []
    latency = evaluated.latency_s
    if max_latency_s is not None and math.isfinite(latency) and latency > max_latency_s:
        problems.append(
            Violation(
                LATENCY_BUDGET,
                f"end-to-end latency {format_seconds(latency)} ({latency:.6g} s) exceeds the budget "
                f"max_latency_s = {max_latency_s:g} s by {latency / max_latency_s - 1:.1%}; compare "
                "the modes, add devices, or raise the budget",
            )
        )
    if max_memory_utilisation is None:
        return problems
    used = evaluated.device_memory_bytes()
    over = [
        d for d in devices if d.memory_bytes and used.get(d.logical_id, 0) > max_memory_utilisation * d.memory_bytes
    ]
    if over:
        shown = "; ".join(
            f"{d.name} (id {d.logical_id}) {used[d.logical_id] / d.memory_bytes:.1%}: "
            f"{format_bytes(used[d.logical_id])} of {format_bytes(d.memory_bytes)}"
            for d in over
        )
        problems.append(
            Violation(
                MEMORY_BUDGET,
                f"peak memory utilisation {evaluated.memory_utilisation():.1%} exceeds the budget "
                f"max_memory_utilisation = {max_memory_utilisation:g} ({max_memory_utilisation:.1%}) "
                f"on device(s) {shown}; spread the model over more devices, add memory, or raise "
                "the budget",
                device=over[0].logical_id,
            )
        )
    return problems
