"""A shard spec as tensor parallelism: module styles, the collectives they imply, a suggestion.

A spec (``{parameter name: "n,1"}``, autodist's partition lists, see :mod:`.sharding`) on the weight
of an ``nn.Linear`` or ``nn.Embedding`` is one of DTensor's parallel styles:

- Linear ``weight "n,1"`` (output features split): ``ColwiseParallel``, its bias split alike;
  ``weight "1,n"`` (input features split): ``RowwiseParallel``, its bias replicated.
- Embedding ``weight "n,1"`` (rows of the table split): ``RowwiseParallel``; ``"1,n"``:
  ``ColwiseParallel``.

:func:`tp_plan` walks the traced graph once and decides each style's layouts as a person would
write them for ``parallelize_module``, and so the collectives on the forward (and backward): a
column-parallel output that only feeds, through pointwise ops, row-parallel layers stays sharded
(no communication), then the row-parallel output is summed (one all-reduce); a column-parallel
output read by anything else is gathered (an all-gather); a row-split embedding sums its partial
lookups (an all-reduce). Each collective has its bytes and its time on a ring at the link rate.
:func:`suggest` proposes a spec for the common patterns (MLP pairs column then row, embeddings by
row) that makes the model fit with the least added communication. No torch here beyond reading
module types from the traced module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from partitioner.devices import Device
from partitioner.errors import ShardingError
from partitioner.graph import Graph
from partitioner.sharding.specs import (
    device_memory,
    format_partition_list,
    parameter_shapes,
    shard_axis,
    validate_partition_list,
)

__all__ = ["Collective", "TPPlan", "tp_plan", "suggest", "POINTWISE"]

# Ops a sharded activation passes through unchanged (elementwise on one tensor).
POINTWISE = ("relu", "gelu", "silu", "tanh", "sigmoid", "dropout", "identity", "newgelu", "gelu_new")


@dataclass(frozen=True)
class Collective:
    kind: str  # "all_reduce" or "all_gather"
    node: str  # the traced node whose tensor is communicated
    module: str  # the module whose style implies it
    nbytes: int  # the full tensor's bytes
    time_s: float  # on a ring of ``world_size`` ranks at the link rate
    backward: bool = False
    reason: str = ""


@dataclass(frozen=True)
class TPPlan:
    """Each sharded module's style and layouts, and the collectives they imply."""

    world_size: int
    styles: dict[str, dict[str, str]]  # module path -> {"style", "input", "output"}
    spec: dict[str, str]  # the full spec: the user's, with column-parallel biases added
    collectives: tuple[Collective, ...] = field(default_factory=tuple)

    def counts(self, backward: bool | None = False) -> dict[str, int]:
        """Collectives by kind: forward only (default), backward only (True), or both (None)."""
        out: dict[str, int] = {}
        for c in self.collectives:
            if backward is None or c.backward == backward:
                out[c.kind] = out.get(c.kind, 0) + 1
        return out

    @property
    def comm_time_s(self) -> float:
        return sum(c.time_s for c in self.collectives)

    @property
    def comm_bytes(self) -> int:
        return sum(c.nbytes for c in self.collectives)


def _ring_s(kind: str, nbytes: int, n: int, rate: float | None) -> float:
    if not rate or n < 2:
        return 0.0
    factor = 2 * (n - 1) / n if kind == "all_reduce" else (n - 1) / n
    return factor * nbytes / rate


def _module_kinds(graph: Graph) -> dict[str, str]:
    """Module path -> "linear" / "embedding" for the model's Linear and Embedding layers, by the
    classes the trace recorded of the original model (an exported graph has no modules of its
    own; see :class:`partitioner.graph.ModelInfo`), else the traced module's."""
    classes = graph.model_info.module_classes
    if not classes:
        gm = graph.graph_module
        if gm is None:
            raise ShardingError(f"graph {graph.name!r} has no traced module; use partitioner.trace")
        classes = {path: tuple(c.__name__ for c in type(m).__mro__) for path, m in gm.named_modules()}
    kinds = {}
    for path, names in classes.items():
        if "Linear" in names:
            kinds[path] = "linear"
        elif "Embedding" in names or "EmbeddingBag" in names:
            kinds[path] = "embedding"
    return kinds


def _module_calls(graph: Graph, kinds: Mapping[str, str]) -> dict[str, int]:
    """Module path -> the node that applies it: a ``call_module`` node (symbolic_trace), or in an
    exported graph the ``linear``/``embedding`` op whose module path it is (the first, for a
    module called twice). O(N)."""
    found: dict[str, int] = {}
    for v, nd in enumerate(graph.nodes):
        if nd.op == "call_module":
            found.setdefault(nd.target, v)
        elif nd.op == "call_function" and nd.module_path in kinds:
            base = nd.target.split("::")[-1].split(".")[0]
            if base in ("linear", "embedding"):
                found.setdefault(nd.module_path, v)
    return found


def _styles(graph: Graph, spec: Mapping[str, str | Sequence[int]], world_size: int
            ) -> tuple[dict[str, str], dict[str, str]]:
    """Module path -> "colwise" / "rowwise", and the full spec."""
    params = parameter_shapes(graph)
    kinds = _module_kinds(graph)
    styles: dict[str, str] = {}
    full: dict[str, str] = {}
    for name, value in spec.items():
        if name not in params:
            shown = ", ".join(list(params)[:5])
            raise ShardingError(f"the spec names parameter {name!r} the model does not have; names are as "
                                f"named_parameters() gives them, e.g. {shown}")
        shape = params[name][0]
        counts = validate_partition_list(value, shape, name)
        axis = shard_axis(counts)
        full[name] = format_partition_list(counts)
        if axis is None:
            continue
        module, _, leaf = name.rpartition(".")
        if counts[axis] != world_size:
            raise ShardingError(f"{name}: {counts[axis]} shards but {world_size} devices run the model together; "
                                f"shard it {world_size} ways")
        kind = kinds.get(module)
        if leaf == "bias" and kind == "linear":
            continue  # follows its weight
        if leaf != "weight" or kind is None or len(shape) != 2:
            raise ShardingError(f"{name}: only the weights of Linear and Embedding layers can be sharded for "
                                "tensor parallelism (DTensor's Colwise/RowwiseParallel); leave it replicated")
        if kind == "linear":
            styles[module] = "colwise" if axis == 0 else "rowwise"
        else:
            styles[module] = "rowwise" if axis == 0 else "colwise"
    for module, style in styles.items():
        bias = f"{module}.bias"
        if kinds[module] == "linear" and bias in params:
            want = str(world_size) if style == "colwise" else "1"
            given = full.get(bias)
            if given is not None and given != want:
                raise ShardingError(f"{bias}: a {style} layer's bias is {'split with' if want != '1' else 'replicated beside'} "
                                    f"its weight; write {want!r} (or leave it out)")
            full[bias] = want
    for name, value in full.items():
        module, _, leaf = name.rpartition(".")
        if leaf == "bias" and value != "1" and module not in styles:
            raise ShardingError(f"{name}: a bias is split only with its layer's weight; shard {module}.weight too")
    return styles, full


def tp_plan(graph: Graph, spec: Mapping[str, str | Sequence[int]], world_size: int,
            transfer_rate_bytes_per_s: float | None = None, training: bool = False) -> TPPlan:
    """The layouts ``parallelize_module`` needs for ``spec`` over ``world_size`` devices and the
    collectives they imply (forward; with ``training``, the backward's too). O(N + E)."""
    styles, full = _styles(graph, spec, world_size)
    kinds = _module_kinds(graph)
    rate = transfer_rate_bytes_per_s
    by_target = _module_calls(graph, kinds)
    called = {v: m for m, v in by_target.items()}
    out: list[Collective] = []
    layouts: dict[str, dict[str, str]] = {}

    def pointwise(v: int) -> bool:
        nd = graph.nodes[v]
        text = f"{nd.target}".lower().rsplit(".", 1)[-1]
        return nd.is_op and len(graph.preds[v]) == 1 and any(p in text for p in POINTWISE)

    def feeds_only_rowwise(v: int) -> bool:
        users = graph.users[v]
        if not users:
            return False
        for u in users:
            nd = graph.nodes[u]
            if styles.get(called.get(u, "")) == "rowwise" and graph.preds[u][:1] == (v,):
                continue
            if pointwise(u) and feeds_only_rowwise(u):
                continue
            return False
        return True

    def add(kind: str, v: int, module: str, backward: bool, reason: str) -> None:
        nbytes = graph.nodes[v].output_bytes
        out.append(Collective(kind, graph.nodes[v].name, module, nbytes, _ring_s(kind, nbytes, world_size, rate),
                              backward, reason))

    sharded_out: set[int] = set()
    for module in sorted(styles, key=lambda m: by_target.get(m, -1)):
        v = by_target.get(module)
        if v is None:
            raise ShardingError(f"module {module!r} is not called as a module in the traced graph; it cannot "
                                "be parallelised")
        style = styles[module]
        source = graph.preds[v][0] if graph.preds[v] else None
        source_is_op = source is not None and graph.nodes[source].is_op
        if style == "colwise":
            keep = feeds_only_rowwise(v)
            layouts[module] = {"style": "colwise", "input": "replicate", "output": "shard" if keep else "replicate"}
            if keep:
                sharded_out.add(v)
            else:
                add("all_gather", v, module, False, "column-parallel output read by a layer that needs it whole")
            if training and source is not None and source_is_op:
                add("all_reduce", source, module, True, "gradient of a column-parallel layer's input is partial")
        else:
            chain = source
            while chain is not None and chain not in sharded_out and pointwise(chain):
                chain = graph.preds[chain][0]
            from_shard = chain in sharded_out
            layouts[module] = {"style": "rowwise", "input": "shard" if from_shard else "replicate",
                               "output": "replicate"}
            add("all_reduce", v, module, False, "row-parallel partial sums are added")
            if training and not from_shard and source is not None and source_is_op and kinds[module] == "linear":
                add("all_gather", source, module, True, "gradient of a row-parallel layer's replicated input")
    return TPPlan(world_size, layouts, full, tuple(out))


def suggest(graph: Graph, devices: Sequence[Device], transfer_rate_bytes_per_s: float | None = None,
            max_entries: int | None = None) -> dict[str, str]:
    """A spec that makes the model fit ``devices`` (tensor parallel over all of them) with the
    least added communication: candidates are MLP pairs (a Linear whose output reaches, through
    pointwise ops, only another Linear: column then row, one all-reduce) and embeddings (by row,
    one all-reduce), taken in order of bytes saved per byte communicated until every device fits.
    Raises :class:`ShardingError` when even all of them leave a device over its memory."""
    n = len(devices)
    if n < 2:
        raise ShardingError("sharding needs at least two devices")
    params = parameter_shapes(graph)
    kinds = _module_kinds(graph)
    by_target = _module_calls(graph, kinds)
    candidates: list[tuple[float, dict[str, str]]] = []
    taken: set[str] = set()

    def weight(module: str) -> tuple[tuple[int, ...], int] | None:
        found = params.get(f"{module}.weight")
        return (found[0], found[1]) if found else None

    for module, v in sorted(by_target.items(), key=lambda kv: kv[1]):
        if module in taken or kinds.get(module) != "linear":
            continue
        follower = _pointwise_follower(graph, v, kinds, {u: m for m, u in by_target.items()})
        if follower is None or follower in taken:
            continue
        first, second = weight(module), weight(follower)
        if first is None or second is None or first[0][0] < n or second[0][1] < n:
            continue
        saved = (math.prod(first[0]) * first[1] + math.prod(second[0]) * second[1]) * (n - 1) // n
        comm = graph.nodes[by_target[follower]].output_bytes or 1
        pair = {f"{module}.weight": format_partition_list([n, 1]), f"{follower}.weight": format_partition_list([1, n])}
        if f"{module}.bias" in params:  # ColwiseParallel splits the bias with the weight
            pair[f"{module}.bias"] = str(n)
        candidates.append((saved / comm, pair))
        taken.update((module, follower))
    for module, kind in kinds.items():
        w = weight(module)
        if kind == "embedding" and w is not None and w[0][0] >= n and module in by_target:
            saved = math.prod(w[0]) * w[1] * (n - 1) // n
            comm = graph.nodes[by_target[module]].output_bytes or 1
            candidates.append((saved / comm, {f"{module}.weight": format_partition_list([n, 1])}))
    candidates.sort(key=lambda c: -c[0])
    spec: dict[str, str] = {}

    def fits(current: dict[str, str]) -> bool:
        used = device_memory(graph, devices, current)
        return all(used[d.logical_id] <= d.memory_bytes for d in devices)

    if fits(spec):
        return spec
    for _, more in candidates[:max_entries]:
        spec.update(more)
        if fits(spec):
            return spec
    used = device_memory(graph, devices, spec)
    worst = max(devices, key=lambda d: used[d.logical_id] - d.memory_bytes)
    raise ShardingError(f"sharding every MLP pair and embedding still leaves {worst.name} needing "
                        f"{used[worst.logical_id]} B of its {worst.memory_bytes} B; add devices or memory, "
                        "or also cut the model into stages (pipeline)")


def _pointwise_follower(graph: Graph, v: int, kinds: Mapping[str, str], called: Mapping[int, str]) -> str | None:
    """The Linear that alone reads ``v``'s output through a chain of pointwise ops, if any."""
    current = v
    while True:
        users = graph.users[current]
        if len(users) != 1:
            return None
        u = users[0]
        nd = graph.nodes[u]
        if kinds.get(called.get(u, "")) == "linear":
            return called[u]
        text = f"{nd.target}".lower().rsplit(".", 1)[-1]
        if not (nd.is_op and any(p in text for p in POINTWISE)):
            return None
        current = u
