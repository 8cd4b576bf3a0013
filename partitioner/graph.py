"""The small index-array graph every algorithm shares: annotated nodes in topological order.

The algorithms never see ``torch.fx.Node`` objects: they read the plain integer-indexed arrays of
:class:`Graph`, which keeps them fast and lets the tests build random DAGs without torch. This
module imports no torch; :mod:`partitioner.trace` builds a Graph from a model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from partitioner.errors import TraceError

__all__ = ["Node", "Graph", "ModelInfo", "OP_KINDS", "toposort", "toposort_children", "find_cycle"]

OP_KINDS = ("call_module", "call_function", "call_method")


@dataclass(frozen=True)
class ModelInfo:
    """What the original ``nn.Module`` says of itself, kept beside the graph because a traced
    (above all an exported) graph loses it: each module's class names (``module_classes``:
    qualified path -> the class and its bases, e.g. ``("LlamaAttention", "Module")``; ``""`` is the
    model), and a Hugging Face model's own tensor-parallel plan (``config.base_model_tp_plan``),
    the blocks Accelerate never splits (``_no_split_modules``) and its tied weights
    (``_tied_weights_keys``: tied name -> source) and, for a mixture of experts, how many experts
    each token goes to. Empty for synthetic graphs."""

    module_classes: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    tp_plan: Mapping[str, str] = dataclasses.field(default_factory=dict)
    no_split_modules: tuple[str, ...] = ()
    tied_weights: Mapping[str, str] = dataclasses.field(default_factory=dict)
    experts_per_token: int = 0  # a mixture of experts' top-k (config.num_experts_per_tok); 0: none

    def is_a(self, path: str, class_name: str) -> bool:
        """Whether the module at ``path`` is a ``class_name`` (or a subclass of it)."""
        return class_name in self.module_classes.get(path, ())


@dataclass(frozen=True)
class Node:
    """One annotated node. ``inputs`` are indices of earlier nodes (the graph is topological)."""

    name: str
    op: str  # placeholder | get_attr | call_module | call_function | call_method | output
    target: str
    inputs: tuple[int, ...] = ()
    module_path: str = ""  # qualified name of the nn.Module the node runs in ("" at top level)
    shape: tuple[int, ...] | None = None  # output shape when the output is one tensor
    dtype: str | None = None
    output_bytes: int = 0  # bytes of every tensor the node outputs
    param_bytes: int = 0  # bytes of the called module's parameters (call_module only)
    flops: int = 0
    is_embedding: bool = False

    @property
    def total_bytes(self) -> int:
        """Reference ``size_bytes.total_size``: output plus the module's parameters."""
        return self.output_bytes + self.param_bytes

    @property
    def is_op(self) -> bool:
        """Op nodes are the ones a plan assigns to partitions."""
        return self.op in OP_KINDS


class Graph:
    """An annotated DAG in topological order, with the traced GraphModule kept for splitting.

    Build one with :func:`trace`, or directly from :class:`Node` objects (tests, synthetic graphs).
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        graph_module: Any = None,
        example_inputs: tuple[Any, ...] | None = None,
        name: str = "",
    ) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.graph_module = graph_module  # the traced torch.fx.GraphModule, None for synthetic graphs
        self.example_inputs = example_inputs
        self.name = name
        self.tied_parameters: tuple[tuple[str, ...], ...] = ()  # names of one tensor, counted once
        self.model_info = ModelInfo()  # what the traced model says of itself (module classes, ...)
        # Node -> (the node that first holds the same weights, their bytes): modules sharing a
        # parameter (tied weights under symbolic_trace) each charge it; the model holds it once.
        self.repeated_weights: dict[int, tuple[int, int]] = {}
        # Matmul-like ops the FLOP counter had no formula for: (target, count); their work is missing.
        self.unpriced_ops: tuple[tuple[str, int], ...] = ()
        # The traced module's parameters as named_parameters() lists them: (name, shape, bytes per
        # element), recorded by the trace so that a graph whose module is traced only on first use
        # (a repeated or cached trace) answers without it; None when not recorded.
        self.named_parameters: tuple[tuple[str, tuple[int, ...], int], ...] | None = None
        self.index: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.name in self.index:
                raise TraceError(f"node name {node.name!r} appears twice; names must be unique")
            for j in node.inputs:
                if not 0 <= j < i:
                    raise TraceError(
                        f"node {node.name!r} reads node #{j}, which is not an earlier node; "
                        "nodes must be listed in topological order"
                    )
            self.index[node.name] = i
        n = len(self.nodes)
        users: list[list[int]] = [[] for _ in range(n)]
        for i, node in enumerate(self.nodes):
            for j in dict.fromkeys(node.inputs):
                users[j].append(i)
        self.users: tuple[tuple[int, ...], ...] = tuple(tuple(u) for u in users)
        self.preds: tuple[tuple[int, ...], ...] = tuple(tuple(dict.fromkeys(node.inputs)) for node in self.nodes)
        self.op_indices: tuple[int, ...] = tuple(i for i, nd in enumerate(self.nodes) if nd.is_op)
        self.output_bytes: tuple[int, ...] = tuple(nd.output_bytes for nd in self.nodes)
        self.total_bytes: tuple[int, ...] = tuple(nd.total_bytes for nd in self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return (
            f"Graph({self.name or 'unnamed'}: {len(self.nodes)} nodes, "
            f"{len(self.op_indices)} ops, {self.total_size_bytes} bytes)"
        )

    @property
    def op_names(self) -> tuple[str, ...]:
        return tuple(self.nodes[i].name for i in self.op_indices)

    @property
    def total_size_bytes(self) -> int:
        """Reference ``total_size_of_graph``: every node's total size except the output node."""
        return sum(nd.total_bytes for nd in self.nodes if nd.op != "output")

    @property
    def parameter_bytes(self) -> int:
        """The model's weights, each once: the parameters of called modules (symbolic_trace) and
        the attributes the graph reads (torch.export lifts every parameter and buffer to one;
        tied weights are one node) that some operation reads (a buffer the forward never reads,
        like a kept copy of rotary frequencies, is no weight a device must hold for it). The one
        count every technique reads. O(N)."""
        return (
            sum(nd.param_bytes for nd in self.nodes)
            - sum(b for _, b in self.repeated_weights.values())
            + sum(nd.output_bytes for v, nd in enumerate(self.nodes) if nd.op == "get_attr" and self.users[v])
        )

    def activation_bytes(self, v: int) -> int:
        """Bytes node ``v`` writes (its output) and reads from other nodes' outputs: what its
        roofline moves besides its own parameters."""
        out = self.output_bytes
        return out[v] + sum(out[u] for u in self.preds[v])

    def weight_bytes_read(self, v: int) -> int:
        """Node ``v``'s own parameters plus the attributes (weights) it reads."""
        nodes = self.nodes
        return nodes[v].param_bytes + sum(self.output_bytes[u] for u in self.preds[v] if nodes[u].op == "get_attr")

    def node(self, name: str) -> Node:
        try:
            return self.nodes[self.index[name]]
        except KeyError:
            raise KeyError(f"no node named {name!r} in graph {self.name!r}") from None

    def with_weight_bytes(self, scale: float) -> "Graph":
        """The same graph with every parameter's bytes times ``scale`` (weights stored in 8 or
        4 bits while activations keep their type: 0.5 or 0.25 of bf16); outputs of ops and the
        traced module are unchanged. O(N)."""
        nodes = [
            dataclasses.replace(
                nd,
                param_bytes=int(nd.param_bytes * scale),
                output_bytes=int(nd.output_bytes * scale) if nd.op == "get_attr" else nd.output_bytes,
            )
            for nd in self.nodes
        ]
        graph = Graph(nodes, self.graph_module, self.example_inputs, name=self.name)
        graph.tied_parameters = self.tied_parameters
        graph.model_info = self.model_info
        graph.repeated_weights = {v: (f, int(b * scale)) for v, (f, b) in self.repeated_weights.items()}
        graph.unpriced_ops = self.unpriced_ops
        graph.named_parameters = self.named_parameters  # the module's own, unscaled
        return graph

    def fingerprint(self) -> str:
        """A short hash of names, ops and edges: plans record it to detect a changed model."""
        h = hashlib.sha256()
        for nd in self.nodes:
            h.update(f"{nd.name}|{nd.op}|{nd.target}|{nd.inputs}|{nd.total_bytes};".encode())
        return h.hexdigest()[:16]


def toposort(num: int, edges: Iterable[tuple[int, int]]) -> list[int] | None:
    """Kahn's algorithm; lowest id first among ready partitions, None when there is a cycle."""
    children: list[list[int]] = [[] for _ in range(num)]
    for a, b in edges:
        children[a].append(b)
    return toposort_children(children)


def toposort_children(children: Sequence[Iterable[int]]) -> list[int] | None:
    """:func:`toposort` of the DAG given as each partition's children."""
    num = len(children)
    indeg = [0] * num
    for cs in children:
        for c in cs:
            indeg[c] += 1
    ready = [p for p in range(num) if indeg[p] == 0]  # ascending: already a heap
    order = []
    while ready:
        p = heapq.heappop(ready)
        order.append(p)
        for c in children[p]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, c)
    return order if len(order) == num else None


def find_cycle(num: int, edges: Mapping[tuple[int, int], int]) -> list[int]:
    """One cycle of partition ids (for error messages), or [] when the DAG is acyclic."""
    children: list[list[int]] = [[] for _ in range(num)]
    for a, b in sorted(edges):
        children[a].append(b)
    state = [0] * num  # 0 new, 1 on stack, 2 done
    stack: list[int] = []
    for root in range(num):
        if state[root]:
            continue
        work = [(root, iter(children[root]))]
        state[root] = 1
        stack.append(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                stack.pop()
                state[node] = 2
            elif state[nxt] == 1:
                return stack[stack.index(nxt) :] + [nxt]
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append(nxt)
                work.append((nxt, iter(children[nxt])))
    return []


# NOTE: [One best-plan rule]
# Two plans whose latencies differ by less than NEAR_TIE (relative) are a near tie, and the one
# with fewer partitions wins it: a plan of 94 partitions that is 0.1 % faster than one of 3 only
# makes review, deployment and transfers harder, and the 0.1 % is within the cost model's error.
# The modes (choosing among their candidates), compare_modes' "best" and the app use this rule.
