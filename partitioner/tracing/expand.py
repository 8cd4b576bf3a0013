"""Repeat the traced layers of a model cut to a few layers (:mod:`partitioner.tracing.blocks`) into
the graph of more layers, node for node the graph a trace of those layers gives (NOTE: [Tracing a
repeated block once] in :mod:`partitioner.tracing.repeated`). Torch-free: reads and writes
:class:`~partitioner.graph.Graph` nodes only.

# NOTE: [Expanding a traced block]
A trace of a stack of layers lays each layer's nodes out together, layer after layer, in one or
more regions (torch.export puts every weight first, so a Llama's layers make a region of weights
and a region of operations); the nodes around the regions (embedding, rotary tables, the final
norm and head) belong to no layer. A node's layer is read from its module path
(``model.layers.3.self_attn.q_proj``: layer 3 of ``model.layers``). Expanding a trace of the kept
layers K to a selection T (every layer, or a longer cut) writes each region's layers in T's order,
each as a copy of its template's nodes (:meth:`Stack.template`), and
- renames what holds the layer's place: module paths and weight targets (``model.layers.3.`` ->
  ``model.layers.40.``) and names made from them (``model_layers_3_...``); every other name is a
  running count per base name (``linear``, ``linear_1``, ... ``pow_1``, ``pow_2`` as fx avoids
  Python's builtins), counted again over the longer graph, after the trace was checked to name
  its nodes that way;
- reconnects edges: a read of a layer of the same run is relative (the layer before stays the
  layer before: a residual stream), at the same place in that layer's template (whose nodes must
  then be the same ops in the same order); a read of a layer of another run is absolute (T5's
  first block computes the position bias every later block reads); a read by a node of no layer
  is absolute (the final norm reads the last layer, kept as itself);
- keeps every figure (shape, dtype, bytes, parameters, FLOPs) of the template's node.
Anything the trace lays out otherwise (layers' nodes interleaved, names that are not counts) raises
:class:`ExpandError`, and the caller traces the whole model.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Sequence

from partitioner.errors import TraceError
from partitioner.graph import Graph, Node
from partitioner.tracing.blocks import Stack
from partitioner.tracing.flops import unpriced

__all__ = ["expand", "ExpandError", "first_difference"]

_COUNTED = re.compile(r"^(.+)_(\d+)$")


class ExpandError(ValueError):
    """The trace is not laid out as NOTE: [Expanding a traced block] expects."""


def _owner(path: str, stacks: Sequence[Stack]) -> tuple[int, int] | None:
    for s, stack in enumerate(stacks):
        prefix = stack.path + "."
        if path.startswith(prefix):
            head = path[len(prefix) :].split(".", 1)[0]
            if head.isdigit():
                return s, int(head)
    return None


def _moved(path: str, stack: str, old: int, new: int) -> str:
    here = f"{stack}.{old}"
    if path == here:
        return f"{stack}.{new}"
    return f"{stack}.{new}.{path[len(here) + 1 :]}" if path.startswith(here + ".") else path


def _split(name: str) -> tuple[str, int]:
    found = _COUNTED.match(name)
    return (found.group(1), int(found.group(2))) if found else (name, 0)


class _Layout:
    """The shallow trace cut into non-layer nodes and regions of per-layer segments."""

    def __init__(self, graph: Graph, stacks: Sequence[Stack]) -> None:
        self.order: list[int | tuple[int, int]] = []  # a non-layer node, or (region, its stack)
        self.segments: list[dict[int, list[int]]] = []  # region -> kept position -> node indices
        self.where: dict[int, tuple[int, int, int]] = {}  # node -> (region, kept position, offset)
        open_region: tuple[int, int] | None = None  # (region, stack)
        last = -1
        for i, node in enumerate(graph.nodes):
            owner = _owner(node.module_path, stacks)
            if owner is None:
                open_region = None
                self.order.append(i)
                continue
            s, j = owner
            if j >= len(stacks[s].keep):
                raise ExpandError(
                    f"node {node.name} is in layer {j} of {stacks[s].path}, which has {len(stacks[s].keep)}"
                )
            # a region runs while its layers' numbers grow: weights of every layer, then the
            # buffers of some (DeepSeek's MoE layers' expert-bias), then the operations
            if open_region is None or open_region[1] != s or j < last:
                open_region = (len(self.segments), s)
                self.segments.append({})
                self.order.append(open_region)
            last = j
            segment = self.segments[open_region[0]].setdefault(j, [])
            self.where[i] = (open_region[0], j, len(segment))
            segment.append(i)


def _check_counted(graph: Graph, counted: set[int]) -> dict[str, int]:
    """Each counted name's base and the number its first node carries (0 or 1), after checking
    that every base's names are a running count in node order."""
    first: dict[str, int] = {}
    seen: dict[str, int] = {}
    for i in sorted(counted):
        base, n = _split(graph.nodes[i].name)
        start = first.setdefault(base, n)
        if n != start + seen.get(base, 0) or start > 1:
            raise ExpandError(f"node name {graph.nodes[i].name} is not a running count of {base!r}")
        seen[base] = seen.get(base, 0) + 1
    return first


def expand(graph: Graph, stacks: Sequence[Stack], targets: Sequence[Sequence[int]]) -> Graph:
    """``graph`` (traced with each stack cut to its :attr:`Stack.keep`) repeated to the layers
    ``targets`` names (one sorted sequence a stack, holding the kept layers; ``range(length)`` for
    the whole model), as NOTE: [Expanding a traced block]. The result holds no module. Raises
    :class:`ExpandError` when the trace is laid out otherwise. O(N) for N nodes of the result."""
    expansion = _Expansion(graph, stacks, targets)
    names = _Names(graph, expansion.layout, stacks, expansion.region_stack)
    return _result(graph, stacks, expansion.copies(names))


class _Expansion:
    """The shallow trace's nodes in the longer graph's order, each with the kept layer it copies
    and where each copy reads its inputs."""

    def __init__(self, graph: Graph, stacks: Sequence[Stack], targets: Sequence[Sequence[int]]) -> None:
        self.layout = _Layout(graph, stacks)
        self.nodes, self.stacks, self.targets = graph.nodes, stacks, targets
        self.positions = [{layer: q for q, layer in enumerate(t)} for t in targets]
        for stack, t in zip(stacks, targets):
            if not set(stack.keep) <= set(t):
                raise ExpandError(f"the target layers of {stack.path} leave out kept layers")
        self.region_stack = {item[0]: item[1] for item in self.layout.order if isinstance(item, tuple)}
        # each target position's template (as a kept position) and run, a stack at a time
        kept_at = [{layer: j for j, layer in enumerate(s.keep)} for s in stacks]
        self.template = [
            [kept_at[i][s.template(layer)] for layer in t] for i, (s, t) in enumerate(zip(stacks, targets))
        ]
        self.run = [[s.run_of(layer) for layer in t] for s, t in zip(stacks, targets)]
        self.forms = self._forms()
        # emitted nodes: (shallow index, stack or -1, target position), in the longer graph's order
        self.emitted: list[tuple[int, int, int]] = []
        self.index: dict[tuple[int, int, int], int] = {}  # (region, target position, offset) -> new index
        self.single: dict[int, int] = {}  # non-layer shallow node -> new index
        self._lay_out()

    def _forms(self) -> dict[tuple[int, int], tuple[tuple[str, str, str], ...]]:
        """The form of each kept layer's segment, to map a place in one layer to the same in another."""
        nodes = self.nodes
        forms: dict[tuple[int, int], tuple[tuple[str, str, str], ...]] = {}
        for r, segs in enumerate(self.layout.segments):
            stack = self.stacks[self.region_stack[r]]
            for j, seg in segs.items():
                forms[(r, j)] = tuple(
                    (
                        nodes[i].op,
                        _moved(nodes[i].target, stack.path, j, 0),
                        _moved(nodes[i].module_path, stack.path, j, 0),
                    )
                    for i in seg
                )
        return forms

    def _lay_out(self) -> None:
        for item in self.layout.order:
            if isinstance(item, int):
                self.single[item] = len(self.emitted)
                self.emitted.append((item, -1, -1))
                continue
            r, s = item
            for q, j in enumerate(self.template[s]):
                for o, i in enumerate(self.layout.segments[r].get(j, ())):
                    self.index[(r, q, o)] = len(self.emitted)
                    self.emitted.append((i, s, q))

    def source(self, u: int, reader_stack: int, q: int) -> int:
        """The new index of what the emitted copy (at target position ``q``) of a node reads
        where the shallow node read ``u``."""
        if u not in self.layout.where:
            return self.single[u]
        r, j_read, o = self.layout.where[u]
        s = self.region_stack[r]
        stack = self.stacks[s]
        read_layer = stack.keep[j_read]
        if reader_stack != s or stack.run_of(read_layer) != self.run[s][q]:
            # a node of no layer, of another stack or of another run reads the kept layer itself
            return self.index[(r, self.positions[s][read_layer], o)]
        q_read = q - (self.template[s][q] - j_read)  # relative: the layer that many places before
        if q_read < 0:
            raise ExpandError(f"layer {self.targets[s][q]} of {stack.path} would read before the first layer")
        j_to = self.template[s][q_read]
        if j_to != j_read and self.forms.get((r, j_to)) != self.forms[(r, j_read)]:
            raise ExpandError(
                f"layers {stack.keep[j_read]} and {stack.keep[j_to]} of {stack.path} differ in their nodes"
            )
        return self.index[(r, q_read, o)]

    def copies(self, names: _Names) -> list[Node]:
        """Every emitted node: its template's figures, its place's name, paths and inputs."""
        out: list[Node] = []
        for i, s, q in self.emitted:
            node = self.nodes[i]
            inputs = tuple(self.source(u, s, q) for u in node.inputs)
            target, path = node.target, node.module_path
            if s >= 0:
                j = self.layout.where[i][1]
                stack = self.stacks[s]
                path = _moved(node.module_path, stack.path, j, q)
                if node.op in ("get_attr", "call_module"):
                    target = _moved(node.target, stack.path, j, q)
            out.append(
                Node(
                    names.name(i, s, q),
                    node.op,
                    target,
                    inputs,
                    path,
                    node.shape,
                    node.dtype,
                    node.output_bytes,
                    node.param_bytes,
                    node.flops,
                    node.is_embedding,
                )
            )
        return out


class _Names:
    """The longer graph's node names: a layer's own names (``model_layers_3_...``) take the copy's
    place, every other name is a running count per base name, counted again over the longer graph."""

    def __init__(self, graph: Graph, layout: _Layout, stacks: Sequence[Stack], region_stack: dict[int, int]) -> None:
        nodes = graph.nodes
        self.nodes, self.layout = nodes, layout
        self.sanitized = [s.path.replace(".", "_") for s in stacks]
        self.layer_named = {
            i
            for i, (r, j, _) in layout.where.items()
            if nodes[i].name.startswith(f"{self.sanitized[region_stack[r]]}_{j}_")
        }
        self.counted = {i for i in range(len(nodes)) if i not in self.layer_named}
        self.starts = _check_counted(graph, self.counted)
        self.seen: dict[str, int] = {}

    def name(self, i: int, s: int, q: int) -> str:
        """The name of the copy of shallow node ``i`` at target position ``q`` of stack ``s``
        (``s`` -1: a node of no layer); called once a copy, in the longer graph's order."""
        name = self.nodes[i].name
        if i in self.counted:
            base, _ = _split(name)
            n = self.starts[base] + self.seen.get(base, 0)
            self.seen[base] = self.seen.get(base, 0) + 1
            return base if n == 0 else f"{base}_{n}"
        j = self.layout.where[i][1]  # a layer's own name
        return f"{self.sanitized[s]}_{q}_" + name[len(f"{self.sanitized[s]}_{j}_") :]


def _result(graph: Graph, stacks: Sequence[Stack], out: list[Node]) -> Graph:
    """The longer graph of ``out``, with the shallow graph's records; refused when a weight is
    shared within or between layers."""
    try:
        result = Graph(out, None, graph.example_inputs, name=graph.name)
    except TraceError as exc:
        raise ExpandError(str(exc)) from None
    if graph.repeated_weights:
        raise ExpandError("modules share weights (symbolic_trace's repeated weights)")
    inside = [n for names in graph.tied_parameters for n in names if _owner(n, stacks) is not None]
    if inside:
        raise ExpandError(f"tied weights inside a layer ({inside[0]})")
    result.tied_parameters = graph.tied_parameters
    result.model_info = graph.model_info
    # unpriced() over each distinct free op once, then counted: the same tuple, without a name
    # match per node
    free = Counter(nd.target for nd in out if nd.op == "call_function" and nd.flops == 0)
    kinds = {t for t, _ in unpriced((t, 0) for t in free)}
    result.unpriced_ops = tuple(sorted(((t, free[t]) for t in kinds), key=lambda kv: (-kv[1], kv[0])))
    return result


def first_difference(a: Graph, b: Graph) -> str:
    """Where two graphs first differ (a node's field, the node count, the tied weights or the
    unpriced ops), or "" when they are node for node the same. O(N)."""
    if len(a) != len(b):
        return f"{len(a)} nodes against {len(b)}"
    for x, y in zip(a.nodes, b.nodes):
        if x != y:
            field = next(f.name for f in dataclasses.fields(Node) if getattr(x, f.name) != getattr(y, f.name))
            return f"node {x.name}: {field} {getattr(x, field)!r} against {getattr(y, field)!r} (node {y.name})"
    for what in ("tied_parameters", "repeated_weights", "unpriced_ops"):
        if getattr(a, what) != getattr(b, what):
            return f"{what} {getattr(a, what)!r} against {getattr(b, what)!r}"
    return ""
