"""The rules a layout must keep on a model (heads, widths, layers, experts, sequence, batch,
devices), and the shares of a model a device holds. Torch-free."""

from __future__ import annotations

from partitioner.cluster.layout_types import RECOMPUTE, Layout, Workload
from partitioner.cluster.profile import ModelProfile
from partitioner.cluster.saved import SavedActivations
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import virtual_stages

__all__ = ["check_layout", "largest_layer_params", "min_cut_label", "min_cut_shares"]


def _params(p: ModelProfile, lay: Layout) -> tuple[float, float]:
    """(dense, expert) parameters a device holds before ZeRO: everything split over tp x pp, the
    experts also over ep."""
    split = lay.tp * lay.pp
    return (p.param_count - p.expert_param_count) / split, p.expert_param_count / (split * lay.ep)


def largest_layer_params(p: ModelProfile) -> float:
    """The most parameters one op reads (an embedding, a fused projection): what ZeRO-3 gathers at
    once, as DeepSpeed's estimators take it (``largest_layer_params``)."""
    return max(p.node_weight_bytes, default=0) / p.element_bytes


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


def check_layout(p: ModelProfile, lay: Layout, w: Workload | None = None, max_devices: int | None = None) -> None:
    """Raise :class:`PartitionError` for a layout no engine can run on this model: tensor
    parallelism must divide the attention heads (and key-value heads), the hidden width and every
    product's width; pipeline stages the layers (times the chunks a rank holds, interleaved);
    expert parallelism the experts and the data-parallel degree; context parallelism the sequence;
    data parallelism times the microbatch the global batch (training); the devices the cluster's
    ``max_devices``. One message lists every rule broken."""
    broken: list[str] = []
    saved = _saved(p)
    widths = set(saved.widths) if saved else set()
    hidden = saved.hidden if saved else round(p.hidden_bytes_per_token / p.element_bytes) if p.element_bytes else 0
    if hidden:
        widths.add(int(hidden))
    if lay.tp > 1:
        heads = sorted({h for h in ((saved.heads, saved.kv_heads) if saved else ()) if h})
        bad = [f"{h} heads" for h in heads if h % lay.tp] + [f"width {d}" for d in sorted(widths) if d % lay.tp]
        if bad:
            raise_tp = ", ".join(bad[:4])
            broken.append(
                f"tensor parallelism tp{lay.tp} must divide the attention heads and the widths "
                f"({raise_tp}); choose a tp that divides them"
            )
    per_rank = virtual_stages(lay.schedule, lay.virtual)
    chunks = lay.pp * per_rank
    if lay.pp > 1 and p.layers % chunks:
        broken.append(
            f"pipeline stages pp{lay.pp}"
            + (f" x {chunks // lay.pp} chunks" if chunks != lay.pp else "")
            + f" must divide the {p.layers} layers; choose a divisor"
        )
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
    if w is not None:
        if lay.cp > 1 and w.seq_len % lay.cp:
            broken.append(f"context parallelism cp{lay.cp} must divide the sequence ({w.seq_len} tokens)")
        if w.kind == "training" and w.global_batch % (lay.dp * lay.microbatch_size):
            broken.append(
                f"the global batch ({w.global_batch}) must divide over dp{lay.dp} x mb"
                f"{lay.microbatch_size}; choose degrees whose product divides it"
            )
        if w.kind == "inference" and w.global_batch % lay.dp:
            broken.append(f"the sequences served ({w.global_batch}) must divide over dp{lay.dp}")
    if max_devices is not None and lay.devices > max_devices:
        broken.append(
            f"the layout needs {lay.devices} devices and the cluster has {max_devices}; lower its degrees or add nodes"
        )
    if broken:
        raise PartitionError(f"layout {lay.label()!r} cannot run on {p.name or 'this model'}: " + "; ".join(broken))
