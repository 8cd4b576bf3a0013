"""The cost model: node latencies (a roofline estimate or given per node), the CostModel that alone
computes a plan's memory and latency (physical and torch), and its incremental form for the local
searches. Torch-free."""

from __future__ import annotations

from partitioner.cost.model import CostModel, Evaluation, node_latencies, node_seconds, roofline_latencies

__all__ = ["CostModel", "Evaluation", "node_latencies", "node_seconds", "roofline_latencies"]
