"""A Hugging Face model's own tensor-parallel plan (``config.base_model_tp_plan``) as a shard spec,
and the blocks it shards by heads.

transformers declares, per model, which layers run ``"colwise"`` and ``"rowwise"`` (Llama: q, k,
v, gate and up by columns, o and down by rows). :func:`from_model_plan` writes that plan as our
spec (autodist's partition lists); :func:`sharded_blocks` finds the blocks (attention, MLP) whose
every layer is sharded as the model's plan says, where the column-parallel outputs stay sharded
through the block (each rank computes its own heads) and the row-parallel layer sums them: one
all-reduce per block, as Megatron-LM does. Torch-free.

# NOTE: [Attention sharded by heads]
# Under DTensor's ColwiseParallel (use_local_output=True, the default) q/k/v return each rank's
# local columns; transformers' attention views them as (*input_shape, -1, head_dim) and reads the
# key-value group size (heads / kv heads, unchanged by sharding), so each rank runs its own
# heads and RowwiseParallel on o takes the local result as Shard(-1): checked on 2 gloo ranks for
# tiny Llama, Qwen2, Mistral, Mixtral (transformers 5.x, torch 2.13) with outputs equal to one
# process and one all-reduce per block; the config's head counts need no change. The split is
# by heads only when heads and key-value heads each divide by the ranks. A model that writes its
# head count into the view (``unflatten(-1, (n_head, head_dim))``, as our sample transformer
# does) fails on local tensors, so blocks are taken as sharded by heads only where the model's
# own plan declares them; elsewhere a column-parallel output that does not reach a row-parallel
# layer through elementwise ops is gathered. GPT-2 has no plan and fuses q, k and v in one
# Conv1D (c_attn), split into three after it: its columns cannot be split by heads.
"""

from __future__ import annotations

from typing import Mapping

from partitioner.errors import ShardingError
from partitioner.graph import Graph
from partitioner.sharding._modules import (
    OUT_AXIS,
    Call,
    heads_after,
    linear_children,
    model_plan_styles,
    module_kinds,
)
from partitioner.sharding.specs import format_partition_list, parameter_shapes

__all__ = ["from_model_plan", "sharded_blocks"]


def from_model_plan(graph: Graph, world_size: int) -> dict[str, str]:
    """The spec the model's own ``base_model_tp_plan`` implies over ``world_size`` devices: each
    colwise layer's weight split along its output features (its bias alike), each rowwise one
    along its input features; layers the plan names that are not Linear or Embedding (experts'
    packed weights) stay replicated. Raises :class:`ShardingError` when the model has no plan.
    O(modules x plan entries)."""
    if world_size < 2:
        raise ShardingError(f"sharding needs at least two devices (got {world_size})")
    styles = model_plan_styles(graph)
    if not styles:
        raise ShardingError(
            f"model {graph.name!r} declares no tensor-parallel plan of its Linear or Embedding "
            "layers (transformers' config.base_model_tp_plan; GPT-2 and non-Hugging Face models "
            "have none); write a spec or ask for a suggestion"
        )
    kinds = module_kinds(graph)
    params = parameter_shapes(graph)
    spec: dict[str, str] = {}
    for module, style in styles.items():
        weight = params.get(f"{module}.weight")
        if weight is None or len(weight[0]) != 2:
            continue
        out_axis = OUT_AXIS[kinds[module]]
        axis = out_axis if style == "colwise" else 1 - out_axis
        counts = [1, 1]
        counts[axis] = world_size
        spec[f"{module}.weight"] = format_partition_list(counts)
        if style == "colwise" and kinds[module] != "embedding" and f"{module}.bias" in params:
            spec[f"{module}.bias"] = str(world_size)
    return spec


def sharded_blocks(
    graph: Graph, styles: Mapping[str, str], calls: Mapping[str, Call], world_size: int
) -> dict[str, tuple[str, ...]]:
    """Block path -> its layers, for each block the model's plan declares whose every Linear is
    styled as that plan says (one column-parallel layer at least, one row-parallel). Raises
    :class:`ShardingError` when such a block's heads or key-value heads do not divide by
    ``world_size``. O(modules + N)."""
    declared = model_plan_styles(graph)
    if not declared:
        return {}
    kinds = module_kinds(graph)
    params = parameter_shapes(graph)
    out: dict[str, tuple[str, ...]] = {}
    parents = sorted({m.rpartition(".")[0] for m in styles if m in declared})
    for parent in parents:
        children = linear_children(kinds, parent)
        if not children or any(c not in declared or styles.get(c) != declared[c] for c in children):
            continue
        if {styles[c] for c in children} != {"colwise", "rowwise"}:
            continue
        heads: dict[str, int] = {}
        for c in children:
            weight = params.get(f"{c}.weight")
            if styles[c] != "colwise" or c not in calls or weight is None:
                continue
            found = heads_after(graph, calls[c].out, weight[0][OUT_AXIS[kinds[c]]])
            if found is not None:
                heads[c.rpartition(".")[2]] = found
        bad = {name: h for name, h in heads.items() if h % world_size}
        if bad:
            shown = ", ".join(f"{name} {h}" for name, h in sorted(heads.items()))
            raise ShardingError(
                f"{parent}: tensor parallelism splits attention by heads, so the heads of every projection "
                f"(query heads and key-value heads) must divide by the {world_size} devices (got {shown}); "
                f"use a device count that divides them all, or leave {parent}'s projections replicated"
            )
        out[parent] = tuple(children)
    return out
