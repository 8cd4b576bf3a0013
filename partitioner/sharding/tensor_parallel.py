"""A shard spec as tensor parallelism: module styles, the collectives they imply, a suggestion.

A spec (``{parameter name: "n,1"}``, autodist's partition lists, see :mod:`.sharding`) on the weight
of an ``nn.Linear``, GPT-2's ``Conv1D`` or an ``nn.Embedding`` is one of DTensor's parallel styles:

- Linear ``weight "n,1"`` (output features split): ``ColwiseParallel``, its bias split alike;
  ``weight "1,n"`` (input features split): ``RowwiseParallel``, its bias replicated. A Conv1D's
  weight is (in, out), transposed: ``"1,n"`` is column-parallel, ``"n,1"`` row-parallel (the run
  makes it the equal Linear first).
- Embedding ``weight "n,1"`` (rows of the table split): ``RowwiseParallel``; ``"1,n"``:
  ``ColwiseParallel``.

Parameters map to their modules by qualified name, on symbolic traces (``call_module`` nodes) and
exported graphs (Hugging Face models: op nodes carry the module path) alike (:mod:`._modules`).
:func:`tp_plan` decides each style's layouts as a person would write them for
``parallelize_module``, and so the collectives on the forward (and backward): a column-parallel
output that only reaches row-parallel layers through elementwise ops stays sharded (no
communication), as do the outputs inside a block the model's own plan shards by heads (NOTE:
[Attention sharded by heads] in :mod:`.model_plan`); the row-parallel output is summed (one
all-reduce); a column-parallel output read by anything else is gathered (an all-gather); a
row-split embedding sums its partial lookups (an all-reduce). Each collective has its bytes and its
time on a ring at the link rate. :func:`suggest` starts from the model's own plan
(:func:`from_model_plan`) where it has one and fits, then adds MLP pairs, embeddings and lone layers
until the model fits with the least added communication. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from partitioner.devices import Device
from partitioner.errors import ShardingError
from partitioner.graph import Graph
from partitioner.sharding._modules import OUT_AXIS, Call, module_calls, module_kinds, tied_elsewhere
from partitioner.sharding.model_plan import from_model_plan, sharded_blocks
from partitioner.sharding.specs import (
    device_memory,
    format_partition_list,
    parameter_shapes,
    shard_axis,
    validate_partition_list,
)
from partitioner.units import format_bytes

__all__ = ["Collective", "TPPlan", "tp_plan", "suggest", "from_model_plan", "mlp_pairs", "POINTWISE"]

# Ops a sharded activation passes through unchanged (elementwise on one tensor).
POINTWISE = (
    "relu",
    "gelu",
    "silu",
    "tanh",
    "sigmoid",
    "dropout",
    "identity",
    "newgelu",
    "gelu_new",
    "alias",
    "pow",
    "neg",
    "exp",
    "erf",
    "sqrt",
)
# Elementwise ops on tensors that are all sharded alike (a gated MLP's gate * up).
ELEMENTWISE = ("mul", "add", "sub", "div")


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
    blocks: tuple[str, ...] = ()  # blocks sharded by heads as the model's own plan says
    transposed: tuple[str, ...] = ()  # styled modules whose weight is (in, out): GPT-2's Conv1D

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


def _op_names(graph: Graph, v: int) -> tuple[str, str]:
    """An op's text (for unary pointwise names) and bare name: ``aten::mul.Tensor`` -> mul,
    ``<built-in function mul>`` -> mul, a method ``mul`` -> mul."""
    text = str(graph.nodes[v].target).lower()
    if "::" in text:
        return text, text.split("::")[-1].split(".")[0]
    words = text.strip("<>").split()
    base = words[2] if text.startswith("<built-in") and len(words) > 2 else text.rsplit(".", 1)[-1]
    return text.rsplit(".", 1)[-1], base


def _styles(
    graph: Graph, spec: Mapping[str, str | Sequence[int]], world_size: int
) -> tuple[dict[str, str], dict[str, str]]:
    """Module path -> "colwise" / "rowwise", and the full spec."""
    params = parameter_shapes(graph)
    kinds = module_kinds(graph)
    tied = tied_elsewhere(graph, params)
    styles: dict[str, str] = {}
    full: dict[str, str] = {}
    for name, value in spec.items():
        if name not in params:
            shown = ", ".join(list(params)[:5])
            raise ShardingError(
                f"the spec names parameter {name!r} the model does not have; names are as "
                f"named_parameters() gives them, e.g. {shown}"
            )
        shape = params[name][0]
        counts = validate_partition_list(value, shape, name)
        axis = shard_axis(counts)
        full[name] = format_partition_list(counts)
        if axis is None:
            continue
        module, _, leaf = name.rpartition(".")
        if counts[axis] != world_size:
            raise ShardingError(
                f"{name}: {counts[axis]} shards but {world_size} devices run the model together; "
                f"shard it {world_size} ways"
            )
        kind = kinds.get(module)
        if leaf == "bias" and kind in ("linear", "conv1d"):
            continue  # follows its weight
        if leaf != "weight" or kind is None or len(shape) != 2:
            raise ShardingError(
                f"{name}: only the weights of Linear and Embedding layers (and GPT-2's "
                "Conv1D) can be sharded for tensor parallelism (DTensor's Colwise/RowwiseParallel); leave it replicated"
            )
        if name in tied:
            raise ShardingError(
                f"{name}: it is also {tied[name]} (tied weights): sharding it for one layer leaves "
                "the other reading a whole copy; leave it replicated"
            )
        styles[module] = "colwise" if axis == OUT_AXIS[kind] else "rowwise"
    for module, style in styles.items():
        bias = f"{module}.bias"
        if kinds[module] != "embedding" and bias in params:
            want = str(world_size) if style == "colwise" else "1"
            given = full.get(bias)
            if given is not None and given != want:
                raise ShardingError(
                    f"{bias}: a {style} layer's bias is {'split with' if want != '1' else 'replicated beside'} "
                    f"its weight; write {want!r} (or leave it out)"
                )
            full[bias] = want
    for name, value in full.items():
        module, _, leaf = name.rpartition(".")
        if leaf == "bias" and value != "1" and module not in styles:
            raise ShardingError(f"{name}: a bias is split only with its layer's weight; shard {module}.weight too")
    return styles, full


def _kept_sharded(graph: Graph, styles: Mapping[str, str], calls: Mapping[str, Call]) -> set[int]:
    """The column-parallel outputs that may stay sharded: every path from them runs through
    elementwise ops (whose tensor inputs are all such values) into row-parallel layers' inputs.
    A fixed point over the seeds; O(N) per round, rarely more than two rounds."""
    rowwise_from = {calls[m].entry: calls[m].source for m, s in styles.items() if s == "rowwise" and m in calls}
    seeds = {calls[m].out for m, s in styles.items() if s == "colwise" and m in calls}
    while True:
        region = set(seeds)
        for v in range(min(seeds, default=len(graph.nodes)), len(graph.nodes)):
            if v in region or not graph.nodes[v].is_op or not graph.preds[v]:
                continue
            (text, base), preds = _op_names(graph, v), graph.preds[v]
            if (len(preds) == 1 and any(p in text for p in POINTWISE) or base in ELEMENTWISE) and all(
                p in region for p in preds
            ):
                region.add(v)
        ok: dict[int, bool] = {}
        for v in sorted(region, reverse=True):
            users = graph.users[v]
            ok[v] = bool(users) and all(rowwise_from.get(u, -1) == v or ok.get(u, False) for u in users)
        kept = {s for s in seeds if ok[s]}
        if kept == seeds:
            return {v for v in region if ok[v]}
        seeds = kept


def tp_plan(
    graph: Graph,
    spec: Mapping[str, str | Sequence[int]],
    world_size: int,
    transfer_rate_bytes_per_s: float | None = None,
    training: bool = False,
) -> TPPlan:
    """The layouts ``parallelize_module`` needs for ``spec`` over ``world_size`` devices and the
    collectives they imply (forward; with ``training``, the backward's too). O(N + E)."""
    styles, full = _styles(graph, spec, world_size)
    kinds = module_kinds(graph)
    rate = transfer_rate_bytes_per_s
    calls = module_calls(graph, kinds)
    missing = sorted(m for m in styles if m not in calls)
    if missing:
        raise ShardingError(
            f"module(s) {missing} never run in the traced graph; they cannot be parallelised: "
            "leave their weights replicated"
        )
    blocks = sharded_blocks(graph, styles, calls, world_size)
    in_block = {m for members in blocks.values() for m in members}
    kept = _kept_sharded(graph, {m: s for m, s in styles.items() if m not in in_block}, calls)
    out: list[Collective] = []
    layouts: dict[str, dict[str, str]] = {}

    def add(kind: str, v: int, module: str, backward: bool, reason: str) -> None:
        nbytes = graph.nodes[v].output_bytes
        out.append(
            Collective(
                kind, graph.nodes[v].name, module, nbytes, _ring_s(kind, nbytes, world_size, rate), backward, reason
            )
        )

    for module in sorted(styles, key=lambda m: calls[m].entry):
        call, style, kind = calls[module], styles[module], kinds[module]
        source = call.source
        source_is_op = source is not None and graph.nodes[source].is_op
        if style == "colwise":
            keep = module in in_block or call.out in kept
            layouts[module] = {"style": "colwise", "input": "replicate", "output": "shard" if keep else "replicate"}
            if not keep:
                add("all_gather", call.out, module, False, "column-parallel output read by a layer that needs it whole")
            if training and source_is_op and source is not None:
                add("all_reduce", source, module, True, "gradient of a column-parallel layer's input is partial")
        else:
            from_shard = module in in_block or (source is not None and source in kept)
            layouts[module] = {
                "style": "rowwise",
                "input": "shard" if from_shard else "replicate",
                "output": "replicate",
            }
            add("all_reduce", call.out, module, False, "row-parallel partial sums are added")
            if training and not from_shard and source_is_op and source is not None and kind != "embedding":
                add("all_gather", source, module, True, "gradient of a row-parallel layer's replicated input")
    return TPPlan(
        world_size,
        layouts,
        full,
        tuple(out),
        tuple(sorted(blocks)),
        tuple(sorted(m for m in styles if kinds[m] == "conv1d")),
    )


def suggest(
    graph: Graph,
    devices: Sequence[Device],
    transfer_rate_bytes_per_s: float | None = None,
    max_entries: int | None = None,
) -> dict[str, str]:
    """A spec that makes the model fit ``devices`` (tensor parallel over all of them) with the
    least added communication. The model's own plan (:func:`from_model_plan`: attention by
    heads, MLPs column then row) comes first where it has one and it is valid for this many
    devices; then, in order of bytes saved per byte communicated until every device fits: MLP
    pairs (a layer whose output reaches, through elementwise ops, only another: column then row,
    one all-reduce), embeddings (by row, one all-reduce) and lone layers (by column, output
    gathered). Raises :class:`ShardingError` when even all of them leave a device over its memory.
    O(C x (N + P)) for C candidates."""
    n = len(devices)
    if n < 2:
        raise ShardingError("sharding needs at least two devices")
    params = parameter_shapes(graph)
    kinds = module_kinds(graph)
    calls = module_calls(graph, kinds)
    tied = tied_elsewhere(graph, params)
    spec: dict[str, str] = {}
    why_not_plan = ""
    if graph.model_info.tp_plan:
        try:
            spec = from_model_plan(graph, n)
            tp_plan(graph, spec, n)
        except ShardingError as exc:
            spec, why_not_plan = {}, f" (the model's own plan does not apply: {exc})"

    def fits(current: dict[str, str]) -> bool:
        used = device_memory(graph, devices, current)
        return all(used[d.logical_id] <= d.memory_bytes for d in devices)

    if fits(spec):
        return spec
    taken = {name.rpartition(".")[0] for name in spec}
    for _, more in _candidates(graph, n, params, kinds, calls, tied, taken)[:max_entries]:
        trial = {**spec, **more}
        try:
            tp_plan(graph, trial, n)
        except ShardingError:
            continue
        spec = trial
        if fits(spec):
            return spec
    used = device_memory(graph, devices, spec)
    worst = max(devices, key=lambda d: used[d.logical_id] - d.memory_bytes)
    packed = sorted(name for name, (shape, _, _) in params.items() if ".experts." in name and len(shape) == 3)
    experts = (
        f"; {len(packed)} packed expert weights (e.g. {packed[0]}) are no Linear layers and stay whole on "
        "every device: split them by experts instead (expert parallelism, on the Plan a cluster page)"
        if packed
        else ""
    )
    raise ShardingError(
        f"sharding the model's plan, every MLP pair, embedding and layer that splits still leaves "
        f"{worst.name} needing {format_bytes(used[worst.logical_id])} of its "
        f"{format_bytes(worst.memory_bytes)}{why_not_plan}{experts}; add devices or memory, or also "
        "cut the model into stages (pipeline)"
    )


def mlp_pairs(graph: Graph, n: int) -> dict[str, str]:
    """Every MLP pair of ``graph`` over ``n`` devices (a layer whose output reaches, through
    elementwise ops, only another: column then row, one all-reduce), each checked by
    :func:`tp_plan`; every other parameter replicated. Empty when the model has none. O(C x (N + P))."""
    params = parameter_shapes(graph)
    kinds = module_kinds(graph)
    calls = module_calls(graph, kinds)
    spec: dict[str, str] = {}
    for _, more in _candidates(graph, n, params, kinds, calls, tied_elsewhere(graph, params), set()):
        if len({name.rpartition(".")[0] for name in more}) < 2:  # an embedding or a lone layer
            continue
        try:
            tp_plan(graph, {**spec, **more}, n)
        except ShardingError:
            continue
        spec.update(more)
    return spec


def _candidates(
    graph: Graph,
    n: int,
    params: Mapping[str, tuple[tuple[int, ...], int, str]],
    kinds: Mapping[str, str],
    calls: Mapping[str, Call],
    tied: Mapping[str, str],
    taken: set[str],
) -> list[tuple[float, dict[str, str]]]:
    """(bytes saved per byte communicated, spec) for MLP pairs, embeddings and lone layers."""
    out: list[tuple[float, dict[str, str]]] = []
    entries = {c.entry: m for m, c in calls.items()}

    def weight(module: str) -> tuple[tuple[int, ...], int] | None:
        found = params.get(f"{module}.weight")
        if not found or len(found[0]) != 2 or f"{module}.weight" in tied:
            return None
        return found[0], found[1]

    def split(module: str, style: str) -> dict[str, str]:
        out_axis = OUT_AXIS[kinds[module]]
        counts = [1, 1]
        counts[out_axis if style == "colwise" else 1 - out_axis] = n
        more = {f"{module}.weight": format_partition_list(counts)}
        if style == "colwise" and kinds[module] != "embedding" and f"{module}.bias" in params:
            more[f"{module}.bias"] = str(n)  # ColwiseParallel splits the bias with the weight
        return more

    paired: set[str] = set(taken)
    for module, call in sorted(calls.items(), key=lambda kv: kv[1].entry):
        if module in paired or kinds[module] == "embedding":
            continue
        group = _mlp_group(graph, module, calls, entries)
        if group is None or paired & {*group[0], group[1]}:
            continue
        cols, follower = group
        weights = [weight(m) for m in (*cols, follower)]
        if (
            any(w is None for w in weights)
            or any(weight(c)[0][OUT_AXIS[kinds[c]]] < n for c in cols)
            or (  # type: ignore[index]
                weight(follower)[0][1 - OUT_AXIS[kinds[follower]]] < n
            )
        ):  # type: ignore[index]
            continue
        saved = sum(math.prod(w[0]) * w[1] for w in weights if w is not None) * (n - 1) // n
        more: dict[str, str] = {}
        for c in cols:
            more.update(split(c, "colwise"))
        out.append(
            (saved / (graph.nodes[calls[follower].out].output_bytes or 1), {**more, **split(follower, "rowwise")})
        )
        paired.update((*cols, follower))
    for module, call in calls.items():
        w = weight(module)
        if module in paired or w is None:
            continue
        saved = math.prod(w[0]) * w[1] * (n - 1) // n
        comm = graph.nodes[call.out].output_bytes or 1
        if kinds[module] == "embedding" and w[0][0] >= n:
            out.append((saved / comm, split(module, "rowwise")))
        elif kinds[module] != "embedding" and w[0][OUT_AXIS[kinds[module]]] >= n:
            out.append((saved / comm, split(module, "colwise")))
    out.sort(key=lambda c: -c[0])
    return out


def _mlp_group(
    graph: Graph, first: str, calls: Mapping[str, Call], entries: Mapping[int, str]
) -> tuple[list[str], str] | None:
    """The column-parallel layers (``first`` and those reading the same input whose outputs join
    it, a gated MLP's gate and up) and the one layer they alone reach through elementwise ops,
    when their outputs can stay sharded all the way (:func:`_kept_sharded`); else None."""
    outs = {c.out: m for m, c in calls.items()}
    cols, follower = {first}, None
    stack, seen = [calls[first].out], set()
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        for u in graph.users[x]:
            if u in entries and u != calls[first].entry:
                if follower not in (None, entries[u]):
                    return None
                follower = entries[u]
                continue
            text, base = _op_names(graph, u)
            if not graph.nodes[u].is_op or not (
                len(graph.preds[u]) == 1 and any(p in text for p in POINTWISE) or base in ELEMENTWISE
            ):
                return None
            for p in graph.preds[u]:
                if p not in seen and p in outs and calls[outs[p]].source == calls[first].source:
                    cols.add(outs[p])
                    stack.append(p)
            stack.append(u)
    if follower is None or follower in cols:
        return None
    styles = {**{c: "colwise" for c in cols}, follower: "rowwise"}
    kept = _kept_sharded(graph, styles, calls)
    return (sorted(cols), follower) if all(calls[c].out in kept for c in cols) else None
