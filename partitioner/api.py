"""The front door: :func:`partition` validates input, picks the mode and returns a Plan.

Mirrors ``Partitioner.partition_graph`` of ``torch.fx.experimental.accelerator_partitioner``:
``aot_based`` first; then the single-partition rule when the whole model fits one device (unless
``force_partition``); an error when it fits all devices together nowhere; otherwise the mode;
then ``saturate_host``.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from .costs import node_latencies
from .devices import Device, format_bytes
from .errors import DeviceSpecError, InfeasibleError, InvalidPlanError, PartitionError
from .graph import Graph
from .modes import MODES, get_mode
from .modes.base import Assignment, Problem, largest_node_check
from .modes.saturate_host import saturate
from .plan import CostModel, Plan, build_plan

__all__ = ["partition", "evaluate_plan", "check_devices", "resolve_transfer_rate"]

logger = logging.getLogger(__name__)


def check_devices(devices: Sequence[Device]) -> list[Device]:
    """Validate a device list at the boundary: non-empty, Device objects, unique ids and names."""
    devices = list(devices)
    if not devices:
        raise DeviceSpecError("no devices given; describe at least one, e.g. parse_devices('2x16GiB')")
    for d in devices:
        if not isinstance(d, Device):
            raise DeviceSpecError(f"expected partitioner.Device objects, got {type(d).__name__}")
    ids = [d.logical_id for d in devices]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise DeviceSpecError(f"logical device ids must be unique; {dupes} repeat")
    return devices


def resolve_transfer_rate(devices: Sequence[Device], rate: float | None) -> float | None:
    """An explicit rate wins; otherwise the slowest link among devices that give one (or None:
    transfers cost nothing)."""
    if rate is not None:
        if not (isinstance(rate, (int, float)) and rate > 0):
            raise PartitionError(
                f"transfer_rate_bytes_per_s must be a positive number (got {rate!r}); "
                "e.g. 25e9 for 25 GB/s, or None to ignore transfers"
            )
        return float(rate)
    links = [d.link_bandwidth_bytes_per_s for d in devices if d.link_bandwidth_bytes_per_s]
    return float(min(links)) if links else None


def _problem(graph: Graph, devices: Sequence[Device], rate: float | None,
             node_latency: Mapping[str, Sequence[float]] | None, options: dict[str, Any]) -> Problem:
    if not isinstance(graph, Graph):
        raise PartitionError(
            f"partition() needs a partitioner.Graph (got {type(graph).__name__}); "
            "call partitioner.trace(model, example_inputs) first"
        )
    devices = check_devices(devices)
    latencies = node_latencies(graph, devices, node_latency)
    cost = CostModel(graph, latencies, resolve_transfer_rate(devices, rate))
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
) -> Plan:
    """Partition ``graph`` over ``devices`` with ``mode``; returns a valid :class:`Plan`.

    ``node_latency`` maps node names to (memory seconds, compute seconds); nodes it leaves out
    get a roofline estimate. ``force_partition`` skips the single-partition rule so the
    algorithms can be seen on models that fit one device. ``search_budget`` caps the cost-model
    evaluations of ``cost_aware`` and ``kl_based``. Raises :class:`PartitionError` (a
    ``ValueError``) naming the node or device and the fix when no valid plan exists.
    """
    get_mode(mode)
    options: dict[str, Any] = {"saturate_host": bool(saturate_host)}
    if force_partition:
        options["force_partition"] = True
    if search_budget is not None:
        options["search_budget"] = int(search_budget)
    if node_latency:
        options["node_latency"] = "given"
    if mode == "aot_based":
        options["node_to_partition"] = dict(node_to_partition or {})
        options["partition_to_devices"] = {
            int(k): list(v) for k, v in (partition_to_devices or {}).items()
        }
    problem = _problem(graph, devices, transfer_rate_bytes_per_s, node_latency, options)
    devices = problem.devices
    total = graph.total_size_bytes
    biggest = max(devices, key=lambda d: (d.memory_bytes, -d.logical_id))
    capacity = sum(d.memory_bytes for d in devices)
    if mode == "aot_based":
        assignment = MODES[mode](problem)
    elif total <= biggest.memory_bytes and not force_partition:
        logger.info("whole model (%d B) fits device %s: one partition", total, biggest.name)
        options["single_partition"] = True
        assignment = Assignment(
            [0 if nd.is_op else -1 for nd in graph.nodes], [[biggest.logical_id]]
        )
    elif total > capacity:
        raise InfeasibleError(
            f"the model needs {format_bytes(total)} ({total} B) but all {len(devices)} devices "
            f"together have {format_bytes(capacity)} ({capacity} B); add devices or memory"
        )
    else:
        largest_node_check(graph, devices)
        assignment = MODES[mode](problem)
    if saturate_host:
        assignment = saturate(problem, assignment)
    plan = build_plan(graph, problem.cost, assignment.part, assignment.devices_of, devices, mode, options)
    problems = plan.violations()
    if problems:
        if mode == "aot_based":
            raise InvalidPlanError(problems)
        raise InfeasibleError(
            f"mode {mode!r} found no plan within the devices' memory:\n  - "
            + "\n  - ".join(problems)
            + "\nadd memory or devices, or try another mode"
        )
    return plan


def evaluate_plan(
    graph: Graph,
    devices: Sequence[Device],
    node_to_partition: Mapping[str, int],
    partition_to_devices: Mapping[int, Sequence[int]],
    transfer_rate_bytes_per_s: float | None = None,
    node_latency: Mapping[str, Sequence[float]] | None = None,
    mode: str = "aot_based",
) -> Plan:
    """Score a given mapping without insisting it is valid (for editing a plan by hand).

    Unlike :func:`partition` it never raises for memory over capacity or a cycle: the returned
    plan records them and :meth:`Plan.violations` lists them. Unknown nodes still raise.
    """
    options = {
        "node_to_partition": dict(node_to_partition),
        "partition_to_devices": {int(k): list(v) for k, v in partition_to_devices.items()},
    }
    problem = _problem(graph, devices, transfer_rate_bytes_per_s, node_latency, options)
    assignment = MODES["aot_based"](problem)
    return build_plan(graph, problem.cost, assignment.part, assignment.devices_of,
                      problem.devices, mode, {"edited": True})
