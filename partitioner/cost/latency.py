"""Node latencies: each op's (memory seconds, compute seconds), from the roofline of the devices'
figures, a measured profile (:mod:`partitioner.cost.measured`), or given per node. The
:class:`~partitioner.cost.model.CostModel` sums them over partitions."""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

from partitioner.cost.measured import device_profile, profile_latencies
from partitioner.devices import DEFAULT_SPEEDS, Device
from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.options import check_latency_pair

__all__ = ["NodeLatency", "roofline_latencies", "node_latencies", "node_seconds"]

logger = logging.getLogger(__name__)

NodeLatency = tuple[float, float]  # (memory seconds, compute seconds)


def _slowest(devices: Sequence[Device], field: str) -> float:
    values = [getattr(d, field) for d in devices if getattr(d, field) is not None]
    return float(min(values)) if values else float(DEFAULT_SPEEDS[field])


def roofline_latencies(graph: Graph, devices: Sequence[Device]) -> list[NodeLatency]:
    """Per node index: (bytes moved / memory bandwidth, FLOPs / peak FLOP/s).

    Bytes moved are the node's inputs, parameters and output. # NOTE: [One speed per plan]
    The reference cost model gives a node one latency whatever device runs it, and every
    algorithm here relies on that. With heterogeneous devices we estimate on the slowest
    device's figures, so plans are never optimistic. Non-op nodes cost nothing. With a measured
    profile (:mod:`partitioner.device_profile`) both roofs are its curves and each op pays its
    dispatch overhead (NOTE: [Op time from a profile]). O(N + E).
    """
    profile = device_profile(devices)
    if profile is not None:
        return profile_latencies(graph, profile)
    bandwidth = _slowest(devices, "memory_bandwidth_bytes_per_s")
    peak = _slowest(devices, "peak_flops")
    latencies: list[NodeLatency] = []
    for i, node in enumerate(graph.nodes):
        if not node.is_op:
            latencies.append((0.0, 0.0))
            continue
        moved = graph.activation_bytes(i) + node.param_bytes
        latencies.append((moved / bandwidth, node.flops / peak))
    return latencies


def node_latencies(
    graph: Graph,
    devices: Sequence[Device],
    node_latency: Mapping[str, Sequence[float]] | None = None,
) -> list[NodeLatency]:
    """Roofline estimates, overridden per node name by ``node_latency`` (``{name: (mem_s, compute_s)}``).

    Names in ``node_latency`` that are not op nodes of the graph are an error (a typo there
    would silently change nothing); op nodes it leaves out keep their roofline estimate.
    """
    latencies = roofline_latencies(graph, devices)
    if not node_latency:
        return latencies
    unknown = sorted(n for n in node_latency if n not in graph.index or not graph.node(n).is_op)
    if unknown:
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise PartitionError(
            f"node_latency names {len(unknown)} node(s) that are not op nodes of the graph: "
            f"{shown}; use node names from the traced graph (e.g. {', '.join(graph.op_names[:3])})"
        )
    for name, pair in node_latency.items():
        mem_s, compute_s = check_latency_pair(name, pair)
        latencies[graph.index[name]] = (mem_s, compute_s)
    missing = len(graph.op_indices) - len(node_latency)
    if missing > 0:
        logger.info("node_latency covers %d op nodes; %d keep their roofline estimate", len(node_latency), missing)
    return latencies


def node_seconds(
    graph: Graph, devices: Sequence[Device], node_latency: Mapping[str, Sequence[float]] | None = None
) -> list[float]:
    """Each node's latency: the larger of its memory and compute time (:attr:`CostModel.node_s`)."""
    return [max(m, c) for m, c in node_latencies(graph, devices, node_latency)]
