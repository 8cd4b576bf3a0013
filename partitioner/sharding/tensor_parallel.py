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
)
from partitioner.sharding.tp_styles import (
    ELEMENTWISE,
    POINTWISE,
    Collective,
    TPPlan,
    kept_sharded,
    op_names,
    ring_s,
    styles_of,
)
from partitioner.units import format_bytes

__all__ = ["Collective", "TPPlan", "tp_plan", "suggest", "from_model_plan", "mlp_pairs", "POINTWISE"]


def tp_plan(
    graph: Graph,
    spec: Mapping[str, str | Sequence[int]],
    world_size: int,
    transfer_rate_bytes_per_s: float | None = None,
    training: bool = False,
) -> TPPlan:
    """The layouts ``parallelize_module`` needs for ``spec`` over ``world_size`` devices and the
    collectives they imply (forward; with ``training``, the backward's too). O(N + E)."""
    styles, full = styles_of(graph, spec, world_size)
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
    kept = kept_sharded(graph, {m: s for m, s in styles.items() if m not in in_block}, calls)
    out: list[Collective] = []
    layouts: dict[str, dict[str, str]] = {}

    def add(kind: str, v: int, module: str, backward: bool, reason: str) -> None:
        nbytes = graph.nodes[v].output_bytes
        out.append(
            Collective(
                kind, graph.nodes[v].name, module, nbytes, ring_s(kind, nbytes, world_size, rate), backward, reason
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
        weights = [w for w in (weight(m) for m in (*cols, follower)) if w is not None]
        if len(weights) < len(cols) + 1:
            continue
        if any(w[0][OUT_AXIS[kinds[c]]] < n for c, w in zip(cols, weights)) or (
            weights[-1][0][1 - OUT_AXIS[kinds[follower]]] < n
        ):
            continue
        saved = sum(math.prod(w[0]) * w[1] for w in weights) * (n - 1) // n
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
    when their outputs can stay sharded all the way (:func:`~partitioner.sharding.tp_styles.kept_sharded`); else None."""
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
            text, base = op_names(graph, u)
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
    kept = kept_sharded(graph, styles, calls)
    return (sorted(cols), follower) if all(calls[c].out in kept for c in cols) else None
