"""Synthetic graphs for tests and benchmarks: plain index graphs without torch, and random
torch.fx modules of adds, ReLUs and Linear layers that the reference partitioner also accepts."""

from __future__ import annotations

import random
from typing import Iterable, Sequence

import torch
import torch.fx as fx

from partitioner.graph import Graph, Node

__all__ = ["synthetic_graph", "random_fx_module", "blocks_graph"]


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
        nodes.append(
            Node(name=f"op{i}", op="call_function", target="synthetic", inputs=ins, output_bytes=int(sizes[i]))
        )
    has_user = {a for a, _ in edges}
    sinks = [i + 1 for i in range(n) if i not in has_user]
    nodes.append(Node(name="output", op="output", target="output", inputs=tuple(sinks)))
    return Graph(nodes, name=name)


def blocks_graph(blocks: int, per_block: int = 25, name: str = "blocks") -> Graph:
    """A torch-free transformer-shaped graph: ``blocks`` repeated blocks ``blocks.<i>`` of
    ``per_block`` op nodes (a residual chain with an attention-like fan-out of three branches
    in ``blocks.<i>.attn`` and the rest in ``blocks.<i>.mlp``), between an embedding and a head.
    Module paths are set, so the graph collapses by module as a traced model does."""
    out, params = 4096, 65536
    nodes = [Node(name="x", op="placeholder", target="x", output_bytes=out)]
    nodes.append(
        Node("embed", "call_module", "embed", (0,), "embed", output_bytes=out, param_bytes=params * 8, flops=out)
    )
    prev = 1
    for b in range(blocks):
        base = len(nodes)
        branches = [len(nodes) + i for i in range(3)]
        for i in range(3):
            nodes.append(
                Node(
                    f"b{b}_qkv{i}",
                    "call_module",
                    f"blocks.{b}.attn.proj{i}",
                    (prev,),
                    f"blocks.{b}.attn.proj{i}",
                    output_bytes=out,
                    param_bytes=params,
                    flops=64 * out,
                )
            )
        nodes.append(
            Node(
                f"b{b}_attn",
                "call_function",
                "attention",
                tuple(branches),
                f"blocks.{b}.attn",
                output_bytes=out,
                flops=128 * out,
            )
        )
        last = len(nodes) - 1
        for i in range(max(0, per_block - 5)):
            nodes.append(
                Node(
                    f"b{b}_mlp{i}",
                    "call_module",
                    f"blocks.{b}.mlp.fc{i}",
                    (last,),
                    f"blocks.{b}.mlp.fc{i}",
                    output_bytes=out,
                    param_bytes=params,
                    flops=64 * out,
                )
            )
            last = len(nodes) - 1
        nodes.append(
            Node(f"b{b}_add", "call_function", "add", (prev, last), f"blocks.{b}", output_bytes=out, flops=out)
        )
        prev = len(nodes) - 1
        assert len(nodes) - base == max(5, per_block)
    nodes.append(
        Node("head", "call_module", "head", (prev,), "head", output_bytes=out, param_bytes=params * 8, flops=out)
    )
    nodes.append(Node("output", "output", "output", (len(nodes) - 1,)))
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
