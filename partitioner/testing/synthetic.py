"""Synthetic graphs for tests and benchmarks: plain index graphs without torch, and random
torch.fx modules of adds, ReLUs and Linear layers that the reference partitioner also accepts."""

from __future__ import annotations

import random
from typing import Iterable, Sequence

import torch
import torch.fx as fx

from ..graph import Graph, Node

__all__ = ["synthetic_graph", "random_fx_module"]


def synthetic_graph(edges: Iterable[tuple[int, int]], sizes: Sequence[int], name: str = "synthetic") -> Graph:
    """A torch-free graph of op nodes ``op0..op{n-1}`` (plus one input) for tests and benchmarks.

    ``edges`` go from lower to higher index; node i outputs ``sizes[i]`` bytes.
    """
    n = len(sizes)
    edges = list(edges)
    inputs: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        if not 0 <= a < b < n:
            raise ValueError(f"edge ({a}, {b}) must go from a lower to a higher index below {n}")
        inputs[b].append(a + 1)
    nodes = [Node(name="x", op="placeholder", target="x", output_bytes=4)]
    for i in range(n):
        ins = tuple(inputs[i]) or (0,)
        nodes.append(Node(name=f"op{i}", op="call_function", target="synthetic", inputs=ins,
                          output_bytes=int(sizes[i])))
    has_user = {a for a, _ in edges}
    sinks = [i + 1 for i in range(n) if i not in has_user]
    nodes.append(Node(name="output", op="output", target="output", inputs=tuple(sinks)))
    return Graph(nodes, name=name)


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
