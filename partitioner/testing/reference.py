"""Run torch's own ``torch.fx.experimental.accelerator_partitioner`` on one of our graphs.

For differential tests and benchmarks: the same graph, devices, node latencies and transfer
rate go to the reference, and its partitions come back as a :class:`Plan` scored by our cost
model, so both plans are compared by one yardstick. The reference also reports its own latency
(``get_latency_of_partitioned_graph``), returned beside the plan.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch.fx as fx

from partitioner.accelerator.api import evaluate_plan, resolve_transfer_rate
from partitioner.cost.model import node_latencies
from partitioner.devices import Device
from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.plan.records import Plan

__all__ = ["ReferenceResult", "reference_partition"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReferenceResult:
    plan: Plan  # the reference's partitions, scored by our cost model (``cost_model``)
    reported_latency_s: float  # the reference's own critical-path latency
    split_module: fx.GraphModule  # the reference's module_with_submodules


def reference_partition(
    graph: Graph,
    devices: Sequence[Device],
    mode: str,
    transfer_rate_bytes_per_s: float | None = None,
    node_latency: Mapping[str, Sequence[float]] | None = None,
    saturate_host: bool = False,
    node_to_partition: Mapping[str, int] | None = None,
    partition_to_devices: Mapping[int, Sequence[int]] | None = None,
    cost_model: str = "physical",
) -> ReferenceResult:
    """Partition ``graph`` with torch's reference partitioner. Raises :class:`PartitionError`
    with the reference's message when it fails (it raises ``RuntimeError`` for infeasible input).
    """
    from torch.fx.experimental.accelerator_partitioner import Partitioner
    from torch.fx.experimental.partitioner_utils import (
        Device as RefDevice,
    )
    from torch.fx.experimental.partitioner_utils import (
        NodeLatency,
        PartitionerConfig,
        PartitionMode,
        get_latency_of_partitioned_graph,
        get_partition_to_latency_mapping,
    )
    from torch.fx.passes.graph_manipulation import get_size_of_all_nodes

    if graph.graph_module is None or graph.example_inputs is None:
        raise PartitionError("the reference partitioner needs a traced graph (partitioner.trace)")
    gm = copy.deepcopy(graph.graph_module)
    get_size_of_all_nodes(gm, list(graph.example_inputs))
    rate = resolve_transfer_rate(devices, transfer_rate_bytes_per_s)
    latencies = node_latencies(graph, devices, node_latency)
    by_name = {n.name: n for n in gm.graph.nodes}
    latency_map = {by_name[graph.nodes[v].name]: NodeLatency(*latencies[v]) for v in graph.op_indices}
    config = PartitionerConfig(
        devices=[RefDevice(d.name, d.memory_bytes, d.logical_id) for d in devices],
        mode=PartitionMode[mode],
        transfer_rate_bytes_per_sec=rate if rate else float("inf"),
        node_to_latency_mapping=latency_map,
        node_to_partition_mapping={by_name[k]: int(v) for k, v in (node_to_partition or {}).items()},
        partition_to_logical_device_mapping={int(k): list(v) for k, v in (partition_to_devices or {}).items()},
        saturate_host=saturate_host,
    )
    partitioner = Partitioner()
    try:
        result = partitioner.partition_graph(gm, gm, config)
    except (RuntimeError, KeyError, AssertionError, ValueError) as exc:
        raise PartitionError(f"reference partitioner failed: {exc}") from exc
    parts = partitioner.partitions
    reported = get_latency_of_partitioned_graph(
        parts, get_partition_to_latency_mapping(parts, latency_map), config.transfer_rate_bytes_per_sec
    )
    mapping = {
        n.name: p.partition_id for p in parts for n in p.nodes if n.op not in ("placeholder", "get_attr", "output")
    }
    plan = evaluate_plan(
        graph,
        devices,
        mapping,
        {p.partition_id: list(p.logical_device_ids) for p in parts},
        transfer_rate_bytes_per_s,
        node_latency,
        mode=f"reference:{mode}",
        cost_model=cost_model,
    )
    return ReferenceResult(plan, float(reported), result.module_with_submodules)
