"""One layout of a cluster, its memory per device and its time per step.

A layout composes the techniques as Megatron-LM and torchtitan do: ``tp``-way tensor parallelism
inside a node (with or without sequence parallelism), ``cp``-way context parallelism (each
sequence split over ranks, keys and values passed around a ring), ``pp`` pipeline stages (a
schedule from :mod:`partitioner.pipeline`, simulated by the pipeline page's own simulator; an
interleaved schedule ``virtual`` chunks deep, or zero-bubble), ``dp``-way data parallelism with ZeRO stage 0-3
(stage 3 is FSDP's full sharding), ``ep``-way expert parallelism for a mixture of experts (each
MoE layer's experts split over ranks of the data-parallel group), and recomputation (none;
selective: the attention core; full: each layer's input kept and its forward run again in the
backward; or functorch's min-cut at a budget).

# NOTE: [Layout costs]
Memory per device (training): model states by the ZeRO paper (Rajbhandari et al. 2020, sec. 3.1)
over psi = parameters / (tp x pp), sharded over the dp x cp ranks that hold copies: (2 + 2 + K)
psi with stage 0, 4 psi + K psi / dp with 1, 2 psi + (2 + K) psi / dp with 2, (4 + K) psi / dp with
3 (K from :attr:`partitioner.cost.training.StateBytes.state`), and with stage 3 the layer being
computed, gathered whole with its whole gradient (DeepSpeed's ``estimate_zero3_model_states_mem_needs``:
4 x the largest layer in bf16); DeepSpeed's fp32 gradient partition (``grad_fp32``) adds 4 bytes a
parameter over dp (its estimators' 18 psi / N); with HSDP (``shard``) the states shard over that
group only; with ZeRO-Offload (``offload``) the optimizer state (and with ZeRO 2-3 the gradient
partition) lives on the host (:func:`offload_seconds` prices its traffic and step); activations
(NOTE: [Activation memory]); the headroom.
Inference: the weights over tp x pp and the KV cache of the batch's context.
Time per step (training): each stage's forward per microbatch is the graph's time for its share
(NOTE: [Scaling the traced graph]); backward twice the forward plus the recomputed share;
tensor parallelism adds 2 all-reduces of the hidden state per layer in each direction (Megatron-LM)
on the node's link (NOTE: [All-reduce algorithms]); a stage boundary sends the hidden state of a
microbatch; context parallelism passes every layer's keys and values around its ring (their
gradients back: twice); expert parallelism adds two all-to-alls per MoE layer in each direction
(each token's hidden state to its top-k experts and back); the schedule's simulation gives the
step and its bubble; data parallelism reduces the gradients (ring all-reduce, 2 (dp - 1) / dp of
the bytes; ZeRO-3 1.5 times that for its parameter gathers) on the slowest link of its group,
overlapped with the last microbatch's backward (as DDP's buckets are; the experts' gradients over
their dp / ep replicas): only what exceeds that backward is added. Kernel launch overheads are
left out. Assumptions: stages hold equal shares of the layers (the first and last also hold the
embedding and head: an under-estimate of the largest stage).

# NOTE: [Activation memory]
What autograd keeps (:mod:`partitioner.cluster.saved`: the traced forward's saved values, per layer
and token, Korthikanti et al. 2022's accounting) for a microbatch's tokens on a device (its
sequence share under context parallelism): the tensor-parallel part over tp, the rest over tp only
with sequence parallelism; selective recomputation drops what grows with the sequence (eager
attention's scores; fused attention keeps none). A stage holds its layers' share for every
microbatch in flight (the first rank's peak stash, its chunks together: NOTE: [Interleaved stash] in
:mod:`partitioner.pipeline.steps`). Full recomputation keeps each
layer's input for every microbatch in flight and one layer's working set once (the layer being
recomputed). Min-cut keeps its measured share. Profiles without their graph fall back to every op
output over tp.

# NOTE: [All-reduce algorithms]
NCCL chooses its algorithm by message size and group (its tuning model): the ring moves
2 (n - 1) / n of the bytes in 2 (n - 1) steps (bandwidth-optimal, Patarasuk and Yuan 2009); the
double binary tree 2 x the bytes in 2 log2 n steps; inside an NVLink node small messages go
one-shot (every rank reads its n - 1 peers' buffers at once: (n - 1) x the bytes, one step; NVLS,
TensorRT-LLM's and vLLM's custom all-reduce). The planner takes the fastest: the tree or one-shot
for a decoded token's hidden state, the ring for gradients.

"""

from __future__ import annotations

import functools
import math

from partitioner.cluster.comms import (
    Collective,
    _context_exchange_s,
    _data_parallel_rows,
    _expert_exchange_s,
    _tp_allreduce,
    all_to_all_s,
    allreduce_s,
    collectives,
    ring_allreduce_s,
)
from partitioner.cluster.hardware import Cluster
from partitioner.cluster.layout_types import (
    MAX_DEGREE,
    RECOMPUTE,
    SCHEDULE_CHOICES,
    ZERO_STAGES,
    Layout,
    LayoutResult,
    Workload,
)
from partitioner.cluster.profile import ModelProfile
from partitioner.cluster.rules import _params, _saved, check_layout, largest_layer_params, min_cut_label, min_cut_shares
from partitioner.cluster.serving import experts_touched, serve
from partitioner.cost.training import StateBytes, state_bytes
from partitioner.pipeline.steps import StepSimulator, step_simulator

__all__ = [
    "Workload",
    "Layout",
    "LayoutResult",
    "Collective",
    "evaluate",
    "collectives",
    "ring_allreduce_s",
    "allreduce_s",
    "all_to_all_s",
    "check_layout",
    "min_cut_label",
    "min_cut_shares",
    "experts_touched",
    "activation_bytes",
    "offload_seconds",
    "largest_layer_params",
    "RECOMPUTE",
    "ZERO_STAGES",
    "SCHEDULE_CHOICES",
    "MAX_DEGREE",
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


def activation_bytes(p: ModelProfile, w: Workload, lay: Layout, stash: float) -> dict[str, float]:
    """Saved activations on the fullest device (NOTE: [Activation memory]): by kind, in bytes."""
    scale = w.element_bytes / p.element_bytes
    tokens = lay.microbatch_size * w.seq_len / lay.cp  # a microbatch's tokens on one device
    stage_layers = p.layers / lay.pp
    saved = _saved(p)
    if saved is not None:
        layer = saved.layer_bytes_per_token(
            w.element_bytes, w.seq_len, lay.tp, lay.sp or lay.tp == 1, scores=lay.recompute != "selective"
        )
        layer_input = saved.input_bytes_per_token(w.element_bytes, lay.tp, lay.sp or lay.tp == 1)
        outside = saved.outside_elements * w.element_bytes / lay.tp
    else:  # a profile without its graph: every op output, split over tp
        layer = p.act_bytes_per_token * scale / max(1, p.layers) / lay.tp
        layer_input = p.hidden_bytes_per_token * scale / lay.tp
        outside = 0.0
    out: dict[str, float] = {}
    if lay.recompute == "full":  # each layer's input a microbatch in flight; one layer's working set once
        out["activations"] = layer_input * tokens * stage_layers * stash
        out["recomputed layer"] = layer * tokens
    else:
        kept = min_cut_shares(p, lay.recompute)[0] if lay.recompute.startswith("min-cut-") else 1.0
        out["activations"] = kept * layer * tokens * stage_layers * stash
    if lay.pp == 1 and outside:
        out["activations"] += outside * tokens
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
    dense, expert = _params(p, lay)
    shard = lay.shard or lay.dp * lay.cp
    psi = dense / shard + expert / max(1, min(shard, lay.dp * lay.cp // lay.ep))
    return psi * (gb + wb) / HOST_LINK_BYTES_PER_S + psi * (2 * kb + gb) / HOST_BYTES_PER_S


def _redo_share(p: ModelProfile, w: Workload, lay: Layout) -> float:
    """Recomputed forward work as a share of the forward: full 1, selective the attention core
    (the FLOPs that grow with the sequence), min-cut its measured share."""
    if lay.recompute == "full":
        return 1.0
    if lay.recompute == "selective":
        total = p.forward_flops(1, w.seq_len)
        return p.attention_flops_per_token * w.seq_len / p.seq0 / total if total else 0.0
    if lay.recompute.startswith("min-cut-"):
        return min_cut_shares(p, lay.recompute)[1]
    return 0.0


@functools.cache
def _shared_simulator() -> StepSimulator:
    return step_simulator()


def evaluate(p: ModelProfile, w: Workload, c: Cluster, lay: Layout, sim: StepSimulator | None = None) -> LayoutResult:
    """Memory and time of ``lay`` (NOTE: [Layout costs]); ``sim(schedule, pp, m, backward_ratio, v)``
    gives (unit step, bubble fraction, the first rank's peak stash) of the schedule with unit
    forward stages (default: :class:`partitioner.pipeline.steps.StepSimulator`, one cache shared by
    every call)."""
    sim = sim or _shared_simulator()
    check_layout(p, lay, w)
    if w.kind == "inference":
        return serve(p, w, c, lay)
    acc = c.accelerator
    scale = w.element_bytes / p.element_bytes
    mem = _states(p, w, lay)
    per_replica = w.global_batch // lay.dp
    m = per_replica // lay.microbatch_size
    tokens_mb = lay.microbatch_size * w.seq_len / lay.cp  # on one device of the cp group
    hidden_mb = p.hidden_bytes_per_token * scale * tokens_mb
    layers_per_stage = p.layers / lay.pp
    redo = _redo_share(p, w, lay)
    loss = p.loss_seconds(tokens_mb, acc) / 2 / lay.tp  # each way; on the last stage, spread over the stages here
    fwd = (p.forward_seconds(tokens_mb, w.seq_len, acc, lay.tp, element_bytes=w.element_bytes) + loss) / lay.pp
    bwd = (
        p.backward_seconds(tokens_mb, w.seq_len, acc, lay.tp, element_bytes=w.element_bytes) + loss
    ) / lay.pp + redo * fwd
    in_node = lay.tp * lay.pp * lay.cp <= c.devices_per_node
    tp_s = 2 * layers_per_stage * _tp_allreduce(c, hidden_mb, lay.tp)[0]
    link = c.intra if in_node else c.inter
    p2p = (hidden_mb / link.bandwidth_bytes_per_s + link.latency_s) if lay.pp > 1 else 0.0
    cp_s = _context_exchange_s(p, c, lay, tokens_mb * lay.cp * scale) / lay.pp
    ep_s = _expert_exchange_s(p, c, lay, tokens_mb * p.hidden_bytes_per_token * scale / lay.tp) / lay.pp
    stage_f, stage_b = fwd + tp_s + p2p + ep_s + cp_s, bwd + tp_s + p2p + ep_s + 2 * cp_s
    ratio = bwd / fwd if fwd else 2.0
    if lay.pp > 1:  # the compute's backward ratio; communication scales with the stage time
        unit, _, stash = sim(lay.schedule, lay.pp, m, ratio, lay.virtual)
        pipe = unit * (stage_f + stage_b) / (1 + ratio)
    else:
        stash, pipe = 1, m * (stage_f + stage_b)
    mem.update(activation_bytes(p, w, lay, stash))
    mem["headroom"] = float(c.headroom_bytes)
    dense, expert = _params(p, lay)
    group = lay.dp * lay.cp
    dp_s = sum(row.seconds for row in _data_parallel_rows(p, w, c, lay))
    exposed = max(0.0, dp_s - bwd) + offload_seconds(p, w, lay)
    # ZeRO-1 and up: each rank steps its shard of the state (HSDP: of its shard group); offloaded: the host's
    shard = (lay.shard or group) if lay.zero else 1
    opt_s = (
        0.0
        if lay.offload
        else p.optimizer_seconds(
            dense / shard + expert / max(1, shard // lay.ep if lay.zero else 1), w.optimizer, w.element_bytes, acc
        )
    )
    step = pipe + exposed + opt_s
    busy = m * (fwd + bwd)
    parts = {
        "compute": busy,
        "tensor-parallel communication": m * 2 * tp_s,
        "pipeline transfers": m * 2 * p2p,
        "expert all-to-all": m * 2 * ep_s,
        "context-parallel exchange": m * 3 * cp_s,
        "bubble": max(0.0, pipe - m * (stage_f + stage_b)),
        "gradient reduction (exposed)": exposed,
        "optimizer step": opt_s,
    }
    if redo:  # the forward and its backward; the recomputed share apart
        parts["compute"] = m * 3 * fwd
        parts["recomputation"] = m * redo * fwd
    fits = sum(mem.values()) <= acc.memory_bytes
    limit = "memory" if not fits else max(parts, key=lambda k: parts[k])
    tokens = w.global_batch * w.seq_len
    model_flops = 3 * p.forward_flops(tokens, w.seq_len)
    devices = lay.devices
    mfu = model_flops / (step * devices * acc.peak_flops) if step > 0 else 0.0
    tps = tokens / step if step > 0 else math.inf
    cost = acc.price_per_hour * devices / 3600 * step / tokens * 1e6
    return LayoutResult(lay, fits, mem, step, parts, limit, mfu, tps, cost, m, stage_s=(stage_f, stage_b))
