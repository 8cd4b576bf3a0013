"""What the cluster planner reads off a traced graph besides its costs: the example's tokens and
sequence length, the repeated blocks (``layers.N``, ``h.N``, ``blocks.N``), and a mixture of
experts' experts from the parameters' names and shapes. Torch-free."""

from __future__ import annotations

import re

from partitioner.errors import ShardingError
from partitioner.graph import Graph
from partitioner.sharding.specs import parameter_shapes

__all__ = ["example_tokens", "repeated_blocks", "moe_experts"]

_BLOCK = re.compile(r"^(.*?)\.?(\d+)(?:\.|$)")
_EXPERT = re.compile(r"^(.*)\.experts\.(?:(\d+)\.)?")


def example_tokens(graph: Graph) -> tuple[int, int]:
    """(tokens, sequence length) of the traced example: the first input's first two dimensions
    when it is a 2-D batch of ids (or 3-D embeddings), else its first dimension and 1."""
    for node in graph.nodes:
        if node.op == "placeholder" and node.shape:
            shape = node.shape
            ids = (node.dtype or "").startswith(("int", "uint"))
            if (len(shape) == 2 and ids) or len(shape) == 3:
                return max(1, shape[0] * shape[1]), max(1, shape[1])
            return max(1, shape[0]), 1
    return 1, 1


def repeated_blocks(graph: Graph) -> dict[str, list[int]]:
    """The most repeated block container's blocks: block path -> op node indices."""
    best: dict[str, dict[str, list[int]]] = {}
    for v in graph.op_indices:
        m = _BLOCK.match(graph.nodes[v].module_path)
        if m:
            best.setdefault(m.group(1), {}).setdefault(f"{m.group(1)}.{m.group(2)}", []).append(v)
    if not best:
        return {}
    return max(best.values(), key=len)


def moe_experts(graph: Graph) -> tuple[int, int, int]:
    """(expert parameters, experts per MoE layer, MoE layers) from the parameters' names and shapes:
    ``...experts.N.w1.weight`` (one module an expert) or ``...experts.gate_up_proj`` packed
    (experts, out, in). (0, 0, 0) for a dense model or a graph without its module. O(parameters)."""
    try:
        params = parameter_shapes(graph)
    except ShardingError:
        return 0, 0, 0
    count, layers, per_layer = 0, set(), {}  # type: tuple[int, set[str], dict[str, set[int]]]
    for name, (shape, _, _) in params.items():
        m = _EXPERT.match(name)
        if not m:
            continue
        n = 1
        for d in shape:
            n *= d
        count += n
        layers.add(m.group(1))
        found = per_layer.setdefault(m.group(1), set())
        if m.group(2) is not None:
            found.add(int(m.group(2)))
        elif len(shape) == 3:
            found.update(range(shape[0]))
    experts = max((len(v) for v in per_layer.values()), default=0)
    return (count, experts, len(layers)) if experts > 1 else (0, 0, 0)
