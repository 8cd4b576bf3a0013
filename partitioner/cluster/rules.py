"""The rules a layout must keep on a model (heads, widths, layers, experts, sequence, batch,
devices), and the shares of a model a device holds. Torch-free."""

from __future__ import annotations

from partitioner.cluster.layout_types import RECOMPUTE, Layout, Workload, recompute_layers
from partitioner.cluster.model_profile import ModelProfile
from partitioner.cluster.saved import SavedActivations
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import virtual_stages

__all__ = [
    "check_layout",
    "largest_layer_params",
    "min_cut_label",
    "min_cut_shares",
    "stage_layers",
    "stage_share",
]


# NOTE: [Uneven stages]
# Any layer count runs over any pp (Meta's Llama 3 405B: 126 layers over 16 stages, the first and
# last one layer short because they also hold the embedding and the head and loss; torchtitan's
# ``pipeline_parallel_layers_per_stage`` and Megatron-LM's ``--decoder-first/last-pipeline-num-layers``
# split so too; a chunk may hold the embedding or the head alone, so pp x v reaches the layers
# plus 2: Meta's 128 slots). Each of the pp x v chunks holds floor or ceil of layers / (pp x v); the busiest
# rank holds v chunks of the ceiling, and the step follows the busiest rank. The embedding, head
# and loss are spread as the layers are (the balance Meta chose puts them where a layer is
# missing); where pp x v divides the layers the share is exactly 1 / pp.


def stage_layers(p: ModelProfile, lay: Layout) -> float:
    """Layers on the busiest pipeline rank (NOTE: [Uneven stages]): ceil(layers / (pp v)) x v, v the
    chunks a rank holds under its schedule. O(1)."""
    if lay.pp <= 1:
        return float(p.layers)
    v = virtual_stages(lay.schedule, lay.virtual)
    return float(-(-p.layers // (lay.pp * v)) * v)


def stage_share(p: ModelProfile, lay: Layout) -> float:
    """The busiest pipeline rank's share of the model: its layers over all (1 / pp when pp x v
    divides them). O(1)."""
    return stage_layers(p, lay) / max(1, p.layers)


def _params(p: ModelProfile, lay: Layout) -> tuple[float, float]:
    """(dense, expert) parameters the busiest device holds before ZeRO: its stage's share of the
    model (NOTE: [Uneven stages]) split over tp, the experts also over ep."""
    share = stage_share(p, lay) / lay.tp
    return (p.param_count - p.expert_param_count) * share, p.expert_param_count * share / lay.ep


def largest_layer_params(p: ModelProfile) -> float:
    """The most parameters one op reads (an embedding, a fused projection): what ZeRO-3 gathers at
    once, as DeepSpeed's estimators take it (``largest_layer_params``). Cached on the profile."""
    key = ("largest layer",)
    if key not in p._cache:
        p._cache[key] = max(p.node_weight_bytes, default=0) / p.element_bytes
    return float(p._cache[key])


def min_cut_label(budget: float) -> str:
    return f"min-cut-{budget:g}"


def min_cut_shares(p: ModelProfile, recompute: str) -> tuple[float, float]:
    """(activations kept, forward FLOPs recomputed) as shares, for a ``min-cut-B`` choice."""
    for budget, kept, redo in p.min_cut:
        if min_cut_label(budget) == recompute:
            return kept, redo
    known = ", ".join([*RECOMPUTE, *(min_cut_label(b) for b, _, _ in p.min_cut)])
    raise PartitionError(
        f"recomputation {recompute!r} is not one of this profile's ({known}); min-cut budgets "
        "come from cluster.with_min_cut (the CLI's --min-cut-budgets)"
    )


def _saved(p: ModelProfile) -> SavedActivations | None:
    return getattr(p, "saved", None)


def _tp_rule(p: ModelProfile, tp: int) -> str:
    """What ``tp``-way tensor parallelism breaks on the model (the heads and widths it does not
    divide), "" when nothing. Cached on the profile."""
    key = ("tensor-parallel rule", tp)
    if key not in p._cache:
        saved = _saved(p)
        widths = set(saved.widths) if saved else set()
        hidden = saved.hidden if saved else round(p.hidden_bytes_per_token / p.element_bytes) if p.element_bytes else 0
        if hidden:
            widths.add(int(hidden))
        heads = sorted({h for h in ((saved.heads, saved.kv_heads) if saved else ()) if h})
        bad = [f"{h} heads" for h in heads if h % tp] + [f"width {d}" for d in sorted(widths) if d % tp]
        p._cache[key] = (
            f"tensor parallelism tp{tp} must divide the attention heads and the widths ({', '.join(bad[:4])}); "
            "choose a tp that divides them"
            if bad
            else ""
        )
    return str(p._cache[key])


def check_layout(p: ModelProfile, lay: Layout, w: Workload | None = None, max_devices: int | None = None) -> None:
    """Raise :class:`PartitionError` for a layout no engine can run on this model: tensor
    parallelism must divide the attention heads (and key-value heads), the hidden width and every
    product's width; each pipeline chunk needs a layer (stages may be uneven: NOTE: [Uneven
    stages]); expert parallelism the experts and the data-parallel degree; context parallelism the sequence;
    data parallelism times the microbatch the global batch (training); the devices the cluster's
    ``max_devices``. One message lists every rule broken."""
    broken = [*_model_rules(p, lay), *_group_rules(p, lay, w), *_workload_rules(lay, w)]
    if max_devices is not None and lay.devices > max_devices:
        broken.append(
            f"the layout needs {lay.devices} devices and the cluster has {max_devices}; lower its degrees or add nodes"
        )
    if broken:
        raise PartitionError(f"layout {lay.label()!r} cannot run on {p.name or 'this model'}: " + "; ".join(broken))


def _model_rules(p: ModelProfile, lay: Layout) -> list[str]:
    """The rules the model's shape sets: tensor parallelism its heads and widths, pipeline chunks
    its layers, recomputation the min-cut budgets measured and the layers a rank holds."""
    broken: list[str] = []
    if lay.tp > 1 and _tp_rule(p, lay.tp):
        broken.append(_tp_rule(p, lay.tp))
    per_rank = virtual_stages(lay.schedule, lay.virtual)
    chunks = lay.pp * per_rank
    # uneven stages run (NOTE: [Uneven stages]); a chunk holds a layer, or the embedding or the head alone
    if lay.pp > 1 and chunks > p.layers + 2:
        broken.append(
            f"pipeline stages pp{lay.pp}"
            + (f" x {chunks // lay.pp} chunks" if chunks != lay.pp else "")
            + f" need a layer each (or the embedding or the head) and the model has {p.layers} layers; "
            "choose fewer stages or chunks"
        )
    if lay.recompute.startswith("min-cut-") and lay.recompute not in {min_cut_label(b) for b, _, _ in p.min_cut}:
        measured = ", ".join(f"{b:g}" for b, _, _ in p.min_cut) or "none"
        broken.append(
            f"recompute-{lay.recompute} reads functorch's min-cut at that budget and this profile measured "
            f"{measured}; measure it first (cluster.with_min_cut, the CLI's --min-cut-budgets)"
        )
    redo = recompute_layers(lay.recompute)
    if redo and redo > stage_layers(p, lay):
        broken.append(
            f"recomputing {redo} layers a pipeline rank needs that many on it ({stage_layers(p, lay):g}); "
            "choose fewer layers or recompute-full"
        )
    return broken


def _group_rules(p: ModelProfile, lay: Layout, w: Workload | None) -> list[str]:
    """The rules between the layout's own settings: pipeline stages need a schedule (training),
    HSDP's sharding group and offloading ZeRO, expert parallelism the experts and dp."""
    broken: list[str] = []
    if lay.pp > 1 and lay.schedule == "none" and w is not None and w.kind == "training":
        broken.append(f"pipeline stages pp{lay.pp} need a schedule (gpipe, 1f1b, interleaved_1f1b or zero_bubble)")
    if lay.shard and (not lay.zero or (lay.dp * lay.cp) % lay.shard or lay.shard % lay.cp):
        broken.append(
            f"a ZeRO sharding group of {lay.shard} (HSDP) needs ZeRO 1-3 and must divide the "
            f"data-parallel ranks (dp{lay.dp} x cp{lay.cp}) in whole context-parallel groups"
        )
    if lay.offload and not lay.zero:
        broken.append("offloading the optimizer (ZeRO-Offload) needs ZeRO 1-3: add zero1, zero2 or zero3")
    if lay.ep > 1 and (not p.experts or p.experts % lay.ep or lay.dp % lay.ep):
        experts = p.experts or "none: a dense model"
        broken.append(
            f"expert parallelism ep{lay.ep} must divide the experts ({experts}) and the "
            f"data-parallel degree ({lay.dp}); choose ep among their common divisors"
        )
    return broken


def _workload_rules(lay: Layout, w: Workload | None) -> list[str]:
    """The rules the workload sets: context parallelism divides its sequence, data parallelism
    (times the microbatch, training) its batch."""
    if w is None:
        return []
    broken: list[str] = []
    if lay.cp > 1 and w.seq_len % lay.cp:
        broken.append(f"context parallelism cp{lay.cp} must divide the sequence ({w.seq_len} tokens)")
    if w.kind == "training" and w.global_batch % (lay.dp * lay.microbatch_size):
        broken.append(
            f"the global batch ({w.global_batch}) must divide over dp{lay.dp} x mb"
            f"{lay.microbatch_size}; choose degrees whose product divides it"
        )
    if w.kind == "inference" and w.global_batch % lay.dp:
        broken.append(f"the sequences served ({w.global_batch}) must divide over dp{lay.dp}")
    return broken
