"""Tensor-parallel plans' records (:class:`TPPlan`, :class:`Collective`) and the rules that read a
shard spec as DTensor styles: each sharded layer's style and the full spec (:func:`styles_of`),
the column-parallel outputs that stay sharded up to a row-parallel layer (:func:`kept_sharded`),
and a collective's time on a ring. :mod:`.tensor_parallel` builds plans and suggestions with them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from partitioner.errors import ShardingError
from partitioner.graph import Graph
from partitioner.op_table import names
from partitioner.sharding._modules import OUT_AXIS, Call, module_kinds, tied_elsewhere
from partitioner.sharding.specs import format_partition_list, parameter_shapes, shard_axis, validate_partition_list

__all__ = [
    "POINTWISE",
    "ELEMENTWISE",
    "Collective",
    "TPPlan",
    "ring_s",
    "op_names",
    "styles_of",
    "kept_sharded",
]

# Ops a sharded activation passes through unchanged, on one tensor (NOTE: [Shards through ops] in
# partitioner.op_table); matched within an op's text, so ``gelu`` finds ``NewGELU`` and ``gelu_new``.
POINTWISE = tuple(sorted(names(tp="activation") | names(tp="pointwise")))
# Elementwise ops on tensors that are all sharded alike (a gated MLP's gate * up).
ELEMENTWISE = tuple(sorted(names(tp="elementwise")))


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


def ring_s(kind: str, nbytes: int, n: int, rate: float | None) -> float:
    if not rate or n < 2:
        return 0.0
    factor = 2 * (n - 1) / n if kind == "all_reduce" else (n - 1) / n
    return factor * nbytes / rate


def op_names(graph: Graph, v: int) -> tuple[str, str]:
    """An op's text (for unary pointwise names) and bare name: ``aten::mul.Tensor`` -> mul,
    ``<built-in function mul>`` -> mul, a method ``mul`` -> mul."""
    text = str(graph.nodes[v].target).lower()
    if "::" in text:
        return text, text.split("::")[-1].split(".")[0]
    words = text.strip("<>").split()
    base = words[2] if text.startswith("<built-in") and len(words) > 2 else text.rsplit(".", 1)[-1]
    return text.rsplit(".", 1)[-1], base


def styles_of(
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


def kept_sharded(graph: Graph, styles: Mapping[str, str], calls: Mapping[str, Call]) -> set[int]:
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
            (text, base), preds = op_names(graph, v), graph.preds[v]
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
