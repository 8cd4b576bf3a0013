"""Test inputs: the reference partitioner's worked example and small random fx models."""

from __future__ import annotations

import torch

import partitioner


class WorkedExample(torch.nn.Module):
    """The cost-aware example of torch's own partitioner tests (devices of 125 B, rate 2 B/s)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("b", torch.rand(4))
        self.register_buffer("c", torch.rand(4))
        self.register_buffer("d", torch.rand(4))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        add_1 = a + self.b
        add_2 = add_1 + self.c
        linear_1 = self.linear(add_1)
        add_3 = add_2 + self.d
        add_4 = add_2 + linear_1
        add_5 = add_3 + add_4
        return add_5


def reference_latencies(graph: partitioner.Graph) -> dict[str, tuple[float, float]]:
    """The node latencies torch's partitioner tests use: memory = total bytes, compute =
    1 for parameter-free nodes, else output bytes."""
    return {
        nd.name: (float(nd.total_bytes), 1.0 if nd.param_bytes == 0 else float(nd.output_bytes))
        for nd in graph.nodes
        if nd.is_op
    }
