"""Node latencies measured on this machine, to replace the roofline estimate (``--calibrate``).

Each op node of the traced module is timed as it runs in an ``fx.Interpreter`` on the example
inputs, best of ``repeats`` runs after a warm-up; the time is recorded as compute seconds (memory
seconds 0), the ``(mem_s, compute_s)`` pair :func:`partitioner.partition` takes as
``node_latency``. O(repeats * model run).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch
import torch.fx as fx

from partitioner.errors import PartitionError
from partitioner.graph import Graph

__all__ = ["measure_node_latencies"]


class _Timer(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.seconds: dict[str, float] = {}

    def run_node(self, n: fx.Node) -> Any:
        start = time.perf_counter()
        out = super().run_node(n)
        took = time.perf_counter() - start
        self.seconds[n.name] = min(took, self.seconds.get(n.name, float("inf")))
        return out


def measure_node_latencies(graph: Graph, example_inputs: Sequence[Any], repeats: int = 5) -> dict[str, tuple[float, float]]:
    """``{op node name: (0.0, measured seconds)}`` for every op node of ``graph``."""
    if graph.graph_module is None:
        raise PartitionError(f"graph {graph.name!r} has no traced module to time; use partitioner.trace")
    timer = _Timer(graph.graph_module)
    with torch.no_grad():
        for _ in range(max(1, repeats) + 1):
            timer.run(*example_inputs)
    return {name: (0.0, timer.seconds.get(name, 0.0)) for name in graph.op_names}
