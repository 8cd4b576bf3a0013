"""The front door: :func:`partition` validates input, picks the mode and returns a Plan;
:func:`evaluate_plan` scores a given mapping (:func:`partitioner.accelerator.check.check_plan`
checks a plan against a model, devices and budgets).

Mirrors ``Partitioner.partition_graph`` of ``torch.fx.experimental.accelerator_partitioner``:
``aot_based`` first; then the single-partition rule when the whole model fits one device (unless
``force_partition``); an error when it fits all devices together nowhere; otherwise the mode;
then ``saturate_host``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import math
from typing import Any, Callable, Iterator, Mapping, Sequence

from partitioner.accelerator._base import Assignment, Problem, Progress, largest_node_check, node_alone_bytes
from partitioner.accelerator.modes import MODES, get_mode
from partitioner.accelerator.saturate_host import saturate
from partitioner.cost.measured import runs_serially
from partitioner.cost.model import CostModel, node_latencies, transfer_latency_s
from partitioner.devices import MAX_DEVICES, Device
from partitioner.errors import DeviceSpecError, InfeasibleError, InvalidPlanError, PartitionError
from partitioner.graph import Graph
from partitioner.options import PartitionOptions
from partitioner.plan.build import build_plan
from partitioner.plan.records import Plan, Provenance
from partitioner.units import format_bytes

__all__ = [
    "partition",
    "partition_with",
    "evaluate_plan",
    "check_devices",
    "resolve_transfer_rate",
    "Progress",
]

logger = logging.getLogger(__name__)


def check_devices(devices: Sequence[Device]) -> list[Device]:
    """Validate a device list at the boundary: non-empty, Device objects, unique ids. O(D)."""
    devices = list(devices)
    if not devices:
        raise DeviceSpecError("no devices given; describe at least one, e.g. parse_devices('2x16GiB')")
    if len(devices) > MAX_DEVICES:
        raise DeviceSpecError(
            f"at most {MAX_DEVICES} devices can be planned for (got {len(devices)}); describe a "
            "smaller cluster, or plan one node's devices and replicate the plan"
        )
    seen: set[int] = set()
    dupes: set[int] = set()
    for d in devices:
        if not isinstance(d, Device):
            raise DeviceSpecError(f"expected partitioner.Device objects, got {type(d).__name__}")
        (dupes if d.logical_id in seen else seen).add(d.logical_id)
    if dupes:
        raise DeviceSpecError(f"logical device ids must be unique; {sorted(dupes)} repeat")
    return devices


def resolve_transfer_rate(devices: Sequence[Device], rate: float | None) -> float | None:
    """An explicit rate wins; otherwise the slowest link among devices that give one (or None:
    transfers cost nothing)."""
    if rate is not None:
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0 or math.isnan(rate):
            raise PartitionError(
                f"transfer_rate_bytes_per_s must be a positive number (got {rate!r}); "
                "e.g. 25e9 for 25 GB/s, or None to ignore transfers"
            )
        return float(rate)
    links = [d.link_bandwidth_bytes_per_s for d in devices if d.link_bandwidth_bytes_per_s]
    return float(min(links)) if links else None


def build_problem(graph: Graph, devices: Sequence[Device], options: PartitionOptions) -> Problem:
    if not isinstance(graph, Graph):
        raise PartitionError(
            f"partition() needs a partitioner.Graph (got {type(graph).__name__}); "
            "call partitioner.trace(model, example_inputs) first"
        )
    devices = check_devices(devices)
    latencies = node_latencies(graph, devices, options.node_latency_dict)
    cost = CostModel(
        graph,
        latencies,
        resolve_transfer_rate(devices, options.transfer_rate_bytes_per_s),
        options.cost_model,
        transfer_latency_s(devices),
        runs_serially(devices),
    )
    return Problem(graph, devices, cost, options)


def partition(
    graph: Graph,
    devices: Sequence[Device],
    mode: str = "size_based",
    transfer_rate_bytes_per_s: float | None = None,
    node_latency: Mapping[str, Sequence[float]] | None = None,
    saturate_host: bool = False,
    node_to_partition: Mapping[str, int] | None = None,
    partition_to_devices: Mapping[int, Sequence[int]] | None = None,
    force_partition: bool = False,
    search_budget: int | None = None,
    cost_model: str = "physical",
    time_limit_s: float | None = None,
    progress: Callable[[Progress], Any] | None = None,
) -> Plan:
    """Partition ``graph`` over ``devices`` with ``mode``; returns a valid :class:`Plan`.

    ``node_latency`` maps node names to (memory seconds, compute seconds); nodes it leaves out
    get a roofline estimate. ``force_partition`` skips the single-partition rule so the
    algorithms can be seen on models that fit one device. ``search_budget`` caps the cost-model
    evaluations of ``cost_aware`` and ``kl_based``. ``cost_model`` is ``"physical"`` (a device
    runs one partition at a time; shared tensors stored once) or ``"torch"`` (exactly
    ``torch.fx.experimental.partitioner_utils``): every mode optimises and checks memory under
    it. ``time_limit_s`` bounds the ``optimal`` mode's solver (default 10 s). Every plan carries
    ``lower_bound_s``, a proven lower bound on the latency of any plan, and ``proven_optimal``.
    ``progress`` is called with a :class:`~partitioner.accelerator._base.Progress` as a long run
    enters each phase (the ``optimal`` mode: heuristics, branch and bound, CP-SAT, each with the
    most seconds it may take, then done); the phases are logged at INFO level either way.
    Raises :class:`PartitionError` (a ``ValueError``) naming the node or device and the fix
    when no valid plan exists.
    """
    options = PartitionOptions.build(
        cost_model=cost_model,
        transfer_rate_bytes_per_s=transfer_rate_bytes_per_s,
        node_latency=node_latency,
        saturate_host=saturate_host,
        force_partition=force_partition,
        search_budget=search_budget,
        time_limit_s=time_limit_s,
        node_to_partition=node_to_partition if mode == "aot_based" else None,
        partition_to_devices=partition_to_devices if mode == "aot_based" else None,
    )
    return partition_with(graph, devices, mode, options, progress)


def _run_mode(problem: Problem, mode: str) -> Assignment:
    try:
        return MODES[mode](problem)
    except InfeasibleError as exc:
        raise InfeasibleError(f"mode {mode!r} found no plan: {exc}") from None


def _forced(problem: Problem, mode: str, plain: Assignment) -> tuple[Assignment, int | None]:
    """NOTE: [Forced partitioning] The model fits one device, but the person asked to see the
    mode at work: the mode runs on devices limited to a share of the model (half, then more
    where half leaves no plan), so it spreads the model over at least two of them."""
    graph = problem.graph
    total = graph.total_size_bytes
    floor = max(node_alone_bytes(graph, v) for v in graph.op_indices)
    for share in (0.5, 0.6, 0.75, 0.9):
        cap = max(floor, int(total * share) + 1)
        capped = [dataclasses.replace(d, memory_bytes=min(d.memory_bytes, cap)) for d in problem.devices]
        try:
            found = MODES[mode](dataclasses.replace(problem, devices=capped))
        except InfeasibleError:
            continue
        if len({d for p in set(found.part) if p >= 0 for d in found.devices_of[p]}) >= 2:
            return found, cap
    return plain, None


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block, as it was after. NOTE: [Collector paused]
    A traced model leaves about twenty objects a node to the collector (fx nodes, their
    arguments and metadata: a million at 50,000 nodes), young, so the first collections after a
    trace walk them all: 0.6 s of a 1.1 s size_based plan at 50,000 nodes, the first after the
    trace, and up to 2.2 s measured. A plan's own objects are lists, tuples and dataclasses that
    reference counting frees (no cycles: ``gc.collect()`` after a plan finds none of its objects),
    so a collection during a plan frees nothing of its own; with it paused, Python collects at its
    next allocation after the plan, as it would have. Nested or already-disabled: left as found."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def partition_with(
    graph: Graph,
    devices: Sequence[Device],
    mode: str,
    options: PartitionOptions,
    progress: Callable[[Progress], Any] | None = None,
) -> Plan:
    """:func:`partition` with its options as one :class:`PartitionOptions` record (what the app,
    the command line and :func:`partitioner.accelerator.compare.compare_modes` pass); ``progress``
    as in :func:`partition`. Runs with the cyclic collector paused (NOTE: [Collector paused])."""
    get_mode(mode)
    with collector_paused():
        return _partition_with(graph, devices, mode, options, progress)


def _partition_with(
    graph: Graph,
    devices: Sequence[Device],
    mode: str,
    options: PartitionOptions,
    progress: Callable[[Progress], Any] | None,
) -> Plan:
    problem = build_problem(graph, devices, options)
    problem.progress = progress
    assignment, single, forced = _assign(problem, mode)
    if options.saturate_host:
        assignment = saturate(problem, assignment)
    plan = _build(problem, mode, assignment, single, forced)
    _check_found(plan, mode)
    return plan


def _assign(problem: Problem, mode: str) -> tuple[Assignment, bool, int | None]:
    """The mode's assignment, whether it is the single-partition rule's, and the memory cap of
    NOTE: [Forced partitioning] when one was applied; raises when all devices together are short."""
    graph, devices = problem.graph, problem.devices
    total = graph.total_size_bytes
    biggest = max(devices, key=lambda d: (d.memory_bytes, -d.logical_id))
    capacity = sum(d.memory_bytes for d in devices)
    if mode == "aot_based":
        return MODES[mode](problem), False, None
    if total <= biggest.memory_bytes and not problem.options.force_partition:
        logger.info("whole model (%d B) fits device %s: one partition", total, biggest.name)
        return Assignment([0 if nd.is_op else -1 for nd in graph.nodes], [[biggest.logical_id]]), True, None
    if total > capacity:
        raise InfeasibleError(
            f"the model needs {format_bytes(total)} but all {len(devices)} devices together have "
            f"{format_bytes(capacity)} ({format_bytes(total - capacity)} short); add devices or memory"
        )
    largest_node_check(graph, devices)
    assignment = _run_mode(problem, mode)
    forced: int | None = None
    if total <= biggest.memory_bytes and len(devices) > 1:
        assignment, forced = _forced(problem, mode, assignment)
        if forced is not None:  # a solver's bound on capped devices says nothing of these
            assignment = dataclasses.replace(assignment, lower_bound_s=0.0)
    return assignment, False, forced


def _build(problem: Problem, mode: str, assignment: Assignment, single: bool, forced: int | None) -> Plan:
    """The plan of ``assignment``, recording how it was made."""
    provenance = Provenance(
        problem.options.replace(aot=None),
        single_partition=single,
        forced_cap_bytes=forced,
        solver=assignment.note,
        solver_bound=assignment.lower_bound_s > problem.cost.lower_bound_s(),
    )
    return build_plan(
        problem.graph,
        problem.cost,
        assignment.part,
        assignment.devices_of,
        problem.devices,
        mode,
        provenance,
        keep_ids=assignment.ordered,
        lower_bound_s=assignment.lower_bound_s,
    )


def _check_found(plan: Plan, mode: str) -> None:
    """Raises, listing every violation, when the plan breaks a rule (memory over capacity)."""
    problems = plan.violations()
    if problems:
        if mode == "aot_based":
            raise InvalidPlanError(problems)
        raise InfeasibleError(
            f"mode {mode!r} found no plan within the devices' memory:\n  - "
            + "\n  - ".join(v.message for v in problems)
            + "\nadd memory or devices, or try another mode"
        )


def evaluate_plan(
    graph: Graph,
    devices: Sequence[Device],
    node_to_partition: Mapping[str, int],
    partition_to_devices: Mapping[int, Sequence[int]],
    transfer_rate_bytes_per_s: float | None = None,
    node_latency: Mapping[str, Sequence[float]] | None = None,
    mode: str = "aot_based",
    edited: bool = False,
    cost_model: str = "physical",
    keep_ids: bool = False,
) -> Plan:
    """Score a given mapping without insisting it is valid (for editing a plan by hand).

    Unlike :func:`partition` it never raises for memory over capacity or a cycle: the returned
    plan records them and :meth:`Plan.violations` lists them. Unknown nodes still raise.
    ``mode`` is the mode the mapping came from and ``edited`` whether a person changed it;
    ``keep_ids`` keeps the mapping's partition ids (in order, gaps closed) instead of numbering
    partitions by their first node.
    """
    options = PartitionOptions.build(
        transfer_rate_bytes_per_s=transfer_rate_bytes_per_s,
        node_latency=node_latency,
        node_to_partition=node_to_partition,
        partition_to_devices=partition_to_devices,
        cost_model=cost_model,
    )
    problem = build_problem(graph, devices, options)
    assignment = MODES["aot_based"](problem)
    provenance = Provenance(options.replace(aot=None), edited=edited)
    return build_plan(
        graph,
        problem.cost,
        assignment.part,
        assignment.devices_of,
        problem.devices,
        mode,
        provenance,
        keep_ids=keep_ids,
    )
