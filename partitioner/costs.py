"""Node latencies for the cost model: a roofline estimate from device specs, or given per node.

A node costs a pair (memory seconds, compute seconds), like the reference's ``NodeLatency``
(``torch.fx.experimental.partitioner_utils``); its latency is the larger of the two.
"""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

from .devices import DEFAULT_SPEEDS, Device
from .errors import PartitionError
from .graph import Graph

__all__ = ["NodeLatency", "roofline_latencies", "node_latencies"]

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
    device's figures, so plans are never optimistic. Non-op nodes cost nothing. O(N + E).
    """
    bandwidth = _slowest(devices, "memory_bandwidth_bytes_per_s")
    peak = _slowest(devices, "peak_flops")
    out = graph.output_bytes
    latencies: list[NodeLatency] = []
    for i, node in enumerate(graph.nodes):
        if not node.is_op:
            latencies.append((0.0, 0.0))
            continue
        moved = node.output_bytes + node.param_bytes + sum(out[j] for j in graph.preds[i])
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
        try:
            mem_s, compute_s = (float(v) for v in pair)
        except (TypeError, ValueError):
            raise PartitionError(
                f"node_latency[{name!r}] must be a pair (memory seconds, compute seconds), got {pair!r}"
            ) from None
        if mem_s < 0 or compute_s < 0:
            raise PartitionError(f"node_latency[{name!r}] must be non-negative, got {pair!r}")
        latencies[graph.index[name]] = (mem_s, compute_s)
    missing = len(graph.op_indices) - len(node_latency)
    if missing > 0:
        logger.info("node_latency covers %d op nodes; %d keep their roofline estimate",
                    len(node_latency), missing)
    return latencies
