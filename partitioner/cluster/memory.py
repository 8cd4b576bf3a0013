"""What a training layout holds on its fullest device: the model states (the ZeRO paper's
formulas over the busiest rank's share), the saved activations under its recomputation and
schedule, the loss's logits, and ZeRO-Offload's traffic to the host. Torch-free. (NOTE: [Layout
costs] in :mod:`partitioner.cluster.layouts` says how the parts add up.)

# NOTE: [Activation memory]
What autograd keeps (:mod:`partitioner.cluster.saved`: the traced forward's saved values, per layer
and token, Korthikanti et al. 2022's accounting) for a microbatch's tokens on a device (its
sequence share under context parallelism): the tensor-parallel part over tp, the rest over tp only
with sequence parallelism; selective recomputation drops what grows with the sequence (eager
attention's scores) or, where attention is fused and keeps none, keeps what torchtitan's per-op
policy keeps (NOTE: [Per-op selective recomputation] in :mod:`partitioner.cluster.saved`). A stage holds its layers' share for every
microbatch in flight (the first rank's peak stash, its chunks together: NOTE: [Interleaved stash] in
:mod:`partitioner.pipeline.steps`). Full recomputation keeps each
layer's input for every microbatch in flight and one layer's working set once (the layer being
recomputed); K layers recomputed do so for K of the rank's layers, the rest keep all. Min-cut keeps its measured share. Profiles without their graph fall back to every op
output over tp.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, TypeVar

from partitioner.cluster.hardware import Cluster
from partitioner.cluster.layout_types import Layout, LayoutResult, Workload, recompute_layers
from partitioner.cluster.model_profile import ModelProfile
from partitioner.cluster.rules import _params, _saved, largest_layer_params, min_cut_shares, stage_layers
from partitioner.cost.training import StateBytes, state_bytes
from partitioner.pipeline.schedules import get_schedule, virtual_stages
from partitioner.pipeline.steps import StepSimulator, rank_stash

__all__ = [
    "workload_state",
    "activation_bytes",
    "loss_logits_bytes",
    "offload_seconds",
    "host_bytes",
    "host_over",
    "HOST_LINK_BYTES_PER_S",
    "HOST_BYTES_PER_S",
    "Memo",
    "memory_fits",
    "over_by_states",
    "STATES_MARGIN",
]


def workload_state(w: Workload) -> StateBytes:
    """Bytes a parameter holds under ``w`` (NOTE: [Training state] in
    :mod:`partitioner.cost.training`): the weights alone for inference."""
    return state_bytes(None if w.kind == "inference" else w.optimizer, w.element_bytes)


def _states(p: ModelProfile, w: Workload, lay: Layout) -> dict[str, float]:
    dense, expert = _params(p, lay)
    held = workload_state(w)
    if w.kind == "inference":
        return {"weights": (dense + expert) * held.weights}
    wb, gb, kb = held.weights, held.gradients, held.state
    out = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0}
    # ZeRO shards each parameter over the ranks holding a copy of it: the dp x cp group for dense
    # ones (context-parallel ranks hold the same weights), dp x cp / ep for the experts (the
    # expert-data-parallel group, as DeepSpeed-MoE shards them).
    group = lay.dp * lay.cp
    sharded = lay.shard or group  # HSDP: shard within lay.shard ranks, replicate across the rest
    for psi, dp in ((dense, sharded), (expert, min(sharded, group // lay.ep))):
        shard = {0: (1, 1, 1), 1: (1, 1, dp), 2: (1, dp, dp), 3: (dp, dp, dp)}[lay.zero]
        out["weights"] += wb * psi / shard[0]
        if lay.grad_fp32 and kb:  # DeepSpeed: an fp32 partition beside the 16-bit gradients (ZeRO-3:
            # the 16-bit ones live in the gathered layer only)
            out["gradients"] += 4 * psi / shard[1] + (gb * psi / shard[1] if lay.zero < 3 else 0.0)
        else:
            out["gradients"] += gb * psi / shard[1]
        out["optimizer"] += kb * psi / shard[2]
    if lay.offload:  # ZeRO-Offload: the state and the gradient partition live on the host
        out["optimizer"] = 0.0
        out["gradients"] = 0.0 if lay.zero >= 2 else out["gradients"]
    if lay.zero == 3 and group > 1:  # the layer computed now, gathered whole, and its whole gradient
        out["gathered layer"] = (wb + gb) * largest_layer_params(p) / lay.tp
    return out


def _layer_saved(p: ModelProfile, w: Workload, lay: Layout) -> tuple[float, float, float]:
    """(a layer's saved bytes a token under the layout's recomputation, a layer's input a token,
    the bytes a token outside the layers), on one of tp ranks."""
    scale = max(2, w.element_bytes) / p.element_bytes  # activations stay bf16 under FP8 (torchtitan's float8)
    saved = _saved(p)
    sp = lay.sp or lay.tp == 1
    if saved is None:  # a profile without its graph: every op output, split over tp
        return (
            p.act_bytes_per_token * scale / max(1, p.layers) / lay.tp,
            p.hidden_bytes_per_token * scale / lay.tp,
            0.0,
        )
    act = max(2, w.element_bytes)  # activations stay bf16 under FP8 (torchtitan's float8)
    if lay.recompute == "selective" and not saved.score_elements:  # fused attention: torchtitan's op policy
        layer = saved.op_policy_bytes_per_token(act, lay.tp, sp)
    else:
        layer = saved.layer_bytes_per_token(act, w.seq_len, lay.tp, sp, scores=lay.recompute != "selective")
    return (
        layer,
        saved.input_bytes_per_token(act, lay.tp, sp),
        saved.outside_elements * act / lay.tp,
    )


def loss_logits_bytes(p: ModelProfile, lay: Layout, tokens: float) -> float:
    """The loss's logits on the last stage for ``tokens`` tokens of a microbatch: the head's output
    and its fp32 copy, which Hugging Face's and torchtitan's cross-entropy keep for the backward
    (4 + 2 bytes an element at their peak), over tp where the layout shards the vocabulary
    (Megatron-LM's vocabulary-parallel cross-entropy, torchtitan's loss parallel). O(1)."""
    return tokens * p.vocab * 6.0 / lay.tp if p.vocab else 0.0


def activation_bytes(
    p: ModelProfile, w: Workload, lay: Layout, stash: float, pending_weight: float = 0.0
) -> dict[str, float]:
    """Saved activations on the fullest device (NOTE: [Activation memory]): by kind, in bytes.
    ``stash``: the first rank's microbatches in flight; ``pending_weight``: those awaiting their
    weight-gradient step under a split backward (NOTE: [Weight-gradient stash] in
    :mod:`partitioner.cluster.engine`)."""
    tokens = lay.microbatch_size * w.seq_len / lay.cp  # a microbatch's tokens on one device
    rank_layers = stage_layers(p, lay)
    layer, layer_input, outside = _layer_saved(p, w, lay)
    redo_layers = min(rank_layers, recompute_layers(lay.recompute)) if lay.recompute != "full" else rank_layers
    kept = min_cut_shares(p, lay.recompute)[0] if lay.recompute.startswith("min-cut-") else 1.0
    # per microbatch in flight: the recomputed layers' inputs, the others' saved values
    per_mb = (layer_input * redo_layers + kept * layer * (rank_layers - redo_layers)) * tokens
    out: dict[str, float] = {"activations": per_mb * stash}
    if redo_layers:  # one layer's working set once: the layer being recomputed
        out["recomputed layer"] = layer * tokens
    saved = _saved(p)
    if pending_weight and saved is not None:
        out["weight-gradient stash"] = (
            saved.weight_input_share() * layer * tokens * (rank_layers - redo_layers) * pending_weight
        )
    logits = loss_logits_bytes(p, lay, tokens)
    if lay.pp == 1:
        out["activations"] += outside * tokens
        if logits:
            out["loss logits"] = logits
    elif logits and per_mb + logits > per_mb * stash:  # the last rank, one microbatch in flight, is fuller
        out["activations"] = per_mb
        out["loss logits"] = logits
        out.pop("weight-gradient stash", None)
    return out


HOST_LINK_BYTES_PER_S = 25e9  # a device's PCIe share to the host, each way (PCIe 5 x16 at about 40 % in practice)

HOST_BYTES_PER_S = 12.5e9  # host memory bandwidth a device's optimizer step gets (100 GB/s a socket over 8)


def offload_seconds(p: ModelProfile, w: Workload, lay: Layout) -> float:
    """ZeRO-Offload's step on the host (Ren et al. 2021): the device's gradient partition goes down
    the PCIe link, the host's Adam reads and writes the fp32 state, the updated 16-bit weights come
    back; none of it hidden (DeepSpeed overlaps part of it: an upper bound). The two host figures are
    assumptions (:data:`HOST_LINK_BYTES_PER_S`, :data:`HOST_BYTES_PER_S`), not measurements."""
    if not lay.offload:
        return 0.0
    held = workload_state(w)
    wb, gb, kb = held.weights, held.gradients, held.state
    psi = _offloaded_params(p, lay)
    return psi * (gb + wb) / HOST_LINK_BYTES_PER_S + psi * (2 * kb + gb) / HOST_BYTES_PER_S


def _offloaded_params(p: ModelProfile, lay: Layout) -> float:
    """The parameters whose optimizer step the busiest rank's host runs: its ZeRO shard."""
    dense, expert = _params(p, lay)
    shard = lay.shard or lay.dp * lay.cp
    return dense / shard + expert / max(1, min(shard, lay.dp * lay.cp // lay.ep))


# NOTE: [Host memory under ZeRO-Offload]
# DeepSpeed's CPU offload (``offload_optimizer: cpu``, ZeRO 1-3) keeps each rank's partition of the
# fp32 weights, of the optimizer's state and of the fp32 gradients in the host's (pinned) memory:
# 4 + 8 + 4 = 16 bytes a parameter of the shard with Adam (Ren et al. 2021, sec. 4), the figure of
# DeepSpeed's ``estimate_zero3_model_states_mem_needs`` with ``cpu_offload_params=False`` and
# ``zero_init=True``: 16 x params / nodes a node; ``estimate_zero2_model_states_mem_needs`` says
# max(4 x GPUs, 16) x params, the 4 x GPUs being every process loading the whole fp32 model before
# it partitions (what ``zero.Init`` avoids), a moment at start-up not counted here. A node's host
# holds the shards of the layout's ranks on it (the busiest rank's, each: an upper bound under
# uneven stages). DeepSpeed's estimators multiply by ``additional_buffer_factor`` 1.5 for margin;
# the figure here is the states alone, checked against :attr:`Cluster.host_memory_bytes`.


def host_bytes(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> float:
    """The host memory a node needs for ``lay``'s offloaded optimizer (NOTE: [Host memory under
    ZeRO-Offload]): 0 without offload or for inference. O(1)."""
    if not lay.offload or w.kind == "inference":
        return 0.0
    held = workload_state(w)
    per_param = max(4, held.master) + held.optimizer + 4  # fp32 weights, the state, fp32 gradients
    return _offloaded_params(p, lay) * per_param * min(lay.devices, c.devices_per_node)


def host_over(host: float, c: Cluster) -> bool:
    """Whether a node's host need ``host`` is over its host memory (by more than a sum's rounding)."""
    return host > c.host_memory_bytes * (1 + STATES_MARGIN)


# NOTE: [A search's memo]
# A search evaluates tens of thousands of layouts of one model, workload and cluster; most of the
# work of one depends on a few of its degrees only: the model states on the degrees and ZeRO (not
# the microbatch or the recomputation), the activations on the microbatch, tp, the stages and the
# recomputation (not dp or ZeRO), a stage's compute and communication on tp, the stages, cp, ep,
# the microbatch and the recomputation, the data-parallel reduction and optimizer step on the
# degrees and ZeRO. :func:`search` passes one dict (``memo``) for the search: each part is computed
# once per distinct key, by the same code as without it, so the answers are the same to the bit. A
# part held there is never changed: each result merges the parts into a dict of its own.

Memo = dict[tuple, Any]
_T = TypeVar("_T")


def _memo(memo: Memo | None, key: tuple, make: Callable[[], _T]) -> _T:
    """``make()``, once per ``key`` of ``memo`` (NOTE: [A search's memo]); every time without one."""
    if memo is None:
        return make()
    if key not in memo:
        memo[key] = make()
    return memo[key]  # type: ignore[no-any-return]


def states_key(lay: Layout) -> tuple:
    """What the model states of ``lay`` depend on (and the data-parallel step, which reads them)."""
    return (
        lay.tp,
        lay.pp,
        lay.schedule,
        lay.virtual,
        lay.ep,
        lay.dp,
        lay.cp,
        lay.shard,
        lay.zero,
        lay.grad_fp32,
        lay.offload,
    )


def _states_of(p: ModelProfile, w: Workload, lay: Layout, memo: Memo | None) -> dict[str, float]:
    return _memo(memo, ("states", *states_key(lay)), lambda: _states(p, w, lay))


def _activations_of(
    p: ModelProfile, w: Workload, lay: Layout, stash: float, pending: float, memo: Memo | None, recompute: str = ""
) -> dict[str, float]:
    """:func:`activation_bytes` of ``lay``, or of ``lay`` recomputing ``recompute`` instead (that
    layout made only where the memo has not its activations)."""
    rc = recompute or lay.recompute
    key = ("activations", lay.microbatch_size, lay.cp, lay.tp, lay.sp, lay.pp, lay.schedule, lay.virtual)

    def make() -> dict[str, float]:
        return activation_bytes(
            p, w, dataclasses.replace(lay, recompute=rc) if rc != lay.recompute else lay, stash, pending
        )

    return _memo(memo, (*key, rc, stash, pending), make)


STATES_MARGIN = 1e-9  # over by more than a sum's rounding: relative to the device's memory


def over_by_states(
    p: ModelProfile, w: Workload, c: Cluster, lay: Layout, memo: Memo | None = None, offload: bool = False
) -> bool:
    """Whether a training layout's model states and the headroom alone are over the device, by more
    than :data:`STATES_MARGIN` (its rounding): no activations and no recomputation make it fit, so
    :func:`~partitioner.cluster.layouts.evaluate` would answer it over the memory and partial
    recomputation would find nothing (the states alone are over). ``offload``: of ``lay`` with its
    optimizer offloaded (ZeRO-Offload), the layout made only where the memo has not its states.
    O(1) with a search's memo."""
    key = (*states_key(lay)[:-1], lay.offload or offload)

    def total_bytes() -> float:
        moved = dataclasses.replace(lay, offload=True) if offload and not lay.offload else lay
        return sum(_states_of(p, w, moved, memo).values())

    total = _memo(memo, ("states total", *key), total_bytes)
    return total + c.headroom_bytes > c.accelerator.memory_bytes * (1 + STATES_MARGIN)


def memory_fits(
    p: ModelProfile,
    w: Workload,
    c: Cluster,
    lay: Layout,
    sim: StepSimulator,
    memo: Memo | None = None,
    recompute: str = "",
) -> tuple[dict[str, float], bool]:
    """(memory by kind, whether it fits) of a training layout (or of it recomputing ``recompute``
    instead), as :func:`~partitioner.cluster.layouts.evaluate` without ``time_unfit`` answers them,
    without its time: the closed forms' stash first, then, where that fits, the simulator's
    (:meth:`~partitioner.pipeline.steps.StepSimulator.stash`, the same at any backward ratio). O(1)
    after the schedule's first replay."""
    m = w.global_batch // lay.dp // lay.microbatch_size
    states = _states_of(p, w, lay, memo)  # the recomputation changes none of them
    stash, pending = _memo(memo, ("closed stash", lay.schedule, lay.pp, m, lay.virtual), lambda: _closed_stash(lay, m))
    mem = {**states, **_activations_of(p, w, lay, stash, pending, memo, recompute), "headroom": float(c.headroom_bytes)}
    if sum(mem.values()) > c.accelerator.memory_bytes:  # as _over_memory answers it
        return mem, False
    stash, pending = sim.stash(lay.schedule, lay.pp, m, lay.virtual) if lay.pp > 1 else (1, 0.0)
    mem = {**states, **_activations_of(p, w, lay, stash, pending, memo, recompute), "headroom": float(c.headroom_bytes)}
    host_fits = not lay.offload or not host_over(host_bytes(p, w, c, lay), c)
    return mem, sum(mem.values()) <= c.accelerator.memory_bytes and host_fits


def _over_memory(
    p: ModelProfile, w: Workload, c: Cluster, lay: Layout, states: dict[str, float], m: int, memo: Memo | None = None
) -> LayoutResult | None:
    """The layout answered by its memory alone when it is over the device's (NOTE:
    [Interleaved stash] in :mod:`partitioner.pipeline.steps`: the closed form is the simulator's
    stash at every count torch accepts); None when it fits and its time is wanted."""
    stash, pending = _memo(memo, ("closed stash", lay.schedule, lay.pp, m, lay.virtual), lambda: _closed_stash(lay, m))
    mem = {**states, **_activations_of(p, w, lay, stash, pending, memo), "headroom": float(c.headroom_bytes)}
    if sum(mem.values()) <= c.accelerator.memory_bytes:
        return None
    host = host_bytes(p, w, c, lay)
    return LayoutResult(
        lay,
        False,
        mem,
        math.inf,
        {},
        "memory",
        0.0,
        0.0,
        math.inf,
        m,
        host_bytes=host,
        host_memory_bytes=float(c.host_memory_bytes) if host else 0.0,
    )


def _closed_stash(lay: Layout, m: int) -> tuple[float, float]:
    """(the first rank's peak stash, its microbatches awaiting a weight-gradient step) by the
    closed forms (:func:`partitioner.pipeline.steps.rank_stash`)."""
    if lay.pp <= 1:
        return 1.0, 0.0
    split = get_schedule(lay.schedule).step_form.name == "BOUND"
    pending = 1.0 / virtual_stages(lay.schedule, lay.virtual) if split else 0.0
    return rank_stash(lay.schedule, lay.pp, m, lay.virtual), pending
