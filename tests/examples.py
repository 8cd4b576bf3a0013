"""Test inputs: the reference partitioner's worked example and small random fx models."""

from __future__ import annotations

import random

import torch
import torch.fx as fx

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


def random_fx_module(seed: int, n_ops: int, width: int = 4) -> tuple[fx.GraphModule, tuple[torch.Tensor]]:
    """A random DAG of adds, ReLUs and Linear layers as a GraphModule (all tensors [width])."""
    rng = random.Random(seed)
    root = torch.nn.Module()
    graph = fx.Graph()
    values = [graph.placeholder("x")]
    n_linear = 0
    for i in range(n_ops):
        kind = rng.random()
        a = values[max(0, len(values) - 1 - int(rng.expovariate(0.5)))]
        if kind < 0.45 and len(values) > 1:
            b = rng.choice(values)
            values.append(graph.call_function(torch.add, (a, b)))
        elif kind < 0.7:
            name = f"fc{n_linear}"
            n_linear += 1
            root.add_module(name, torch.nn.Linear(width, width))
            values.append(graph.call_module(name, (a,)))
        else:
            values.append(graph.call_function(torch.relu, (a,)))
    used = {arg for node in graph.nodes for arg in node.all_input_nodes}
    sinks = [v for v in values[1:] if v not in used]
    graph.output(tuple(sinks) if len(sinks) > 1 else sinks[0])
    torch.manual_seed(seed)
    for p in root.parameters():
        torch.nn.init.normal_(p)
    return fx.GraphModule(root, graph), (torch.randn(width),)
