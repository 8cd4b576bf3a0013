"""One layout of a cluster, its memory per device and its time per step.

A layout composes the techniques as Megatron-LM and torchtitan do: ``tp``-way tensor parallelism
inside a node (with or without sequence parallelism), ``cp``-way context parallelism (each
sequence split over ranks, keys and values passed around a ring), ``pp`` pipeline stages (a
schedule from :mod:`partitioner.pipeline`, simulated by the pipeline page's own simulator; an
interleaved schedule ``virtual`` chunks deep, or zero-bubble), ``dp``-way data parallelism with ZeRO stage 0-3
(stage 3 is FSDP's full sharding), ``ep``-way expert parallelism for a mixture of experts (each
MoE layer's experts split over ranks of the data-parallel group), and recomputation (none;
selective: the attention core, or torchtitan's per-op policy with fused attention; full: each
layer's input kept and its forward run again in the backward; layers-K: K layers of each rank so;
or functorch's min-cut at a budget).

# NOTE: [Layout costs]
Memory per device (training): model states by the ZeRO paper (Rajbhandari et al. 2020, sec. 3.1)
over psi = the busiest rank's share of the parameters / tp (NOTE: [Uneven stages] in
:mod:`partitioner.cluster.rules`), sharded over the dp x cp ranks that hold copies: (2 + 2 + K)
psi with stage 0, 4 psi + K psi / dp with 1, 2 psi + (2 + K) psi / dp with 2, (4 + K) psi / dp with
3 (K from :attr:`partitioner.cost.training.StateBytes.state`), and with stage 3 the layer being
computed, gathered whole with its whole gradient (DeepSpeed's ``estimate_zero3_model_states_mem_needs``:
4 x the largest layer in bf16); DeepSpeed's fp32 gradient partition (``grad_fp32``) adds 4 bytes a
parameter over dp (its estimators' 18 psi / N); with HSDP (``shard``) the states shard over that
group only; with ZeRO-Offload (``offload``) the optimizer state (and with ZeRO 2-3 the gradient
partition) lives on the host (:func:`offload_seconds` prices its traffic and step; :func:`host_bytes` the host
memory a node needs, NOTE: [Host memory under ZeRO-Offload]); activations
(NOTE: [Activation memory] in :mod:`partitioner.cluster.memory`); the loss's logits and their fp32 copy on the last stage; the headroom.
Inference: the weights over tp x pp and the KV cache of the batch's context.
Time per step (training): each stage's forward per microbatch is the graph's time for the busiest
rank's share (NOTE: [Scaling the traced graph]), eager PyTorch's host cost per op included; backward twice the forward plus the recomputed share;
tensor parallelism adds 2 all-reduces of the hidden state per layer in each direction (Megatron-LM)
on the node's link (NOTE: [All-reduce algorithms]); a stage boundary sends the hidden state of a
microbatch at each of a rank's chunks; context parallelism passes every layer's keys and values around its ring (their
gradients back: twice); expert parallelism adds two all-to-alls per MoE layer in each direction
(each token's hidden state to its top-k experts and back); the schedule's simulation gives the
step and its bubble; data parallelism reduces the gradients (ring all-reduce, 2 (dp - 1) / dp of
the bytes; ZeRO-3 1.5 times that for its parameter gathers) on the slowest link of its group,
overlapped with the last microbatch's backward (as DDP's buckets are; the experts' gradients over
their dp / ep replicas): only what exceeds that backward is added; FSDP (ZeRO-3) repeats its
gathers and reductions every microbatch, each hidden under that microbatch's compute. What the
engine costs beyond (the loss at scale, zero-bubble's stash) and the band: NOTE: [Engine costs]
and NOTE: [Bands] in :mod:`partitioner.cluster.engine`.

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

from partitioner.cluster.comm_table import collectives
from partitioner.cluster.comms import (
    Collective,
    _context_exchange_s,
    _data_parallel_rows,
    _expert_exchange_s,
    _tp_allreduce,
    all_to_all_s,
    allreduce_s,
    ring_allreduce_s,
)
from partitioner.cluster.engine import (
    scale_factor,
    step_band,
    training_assumes,
)
from partitioner.cluster.hardware import Accelerator, Cluster
from partitioner.cluster.layout_types import (
    MAX_DEGREE,
    RECOMPUTE,
    SCHEDULE_CHOICES,
    ZERO_STAGES,
    Layout,
    LayoutResult,
    Workload,
    recompute_layers,
)
from partitioner.cluster.memory import (
    Memo,
    _activations_of,
    _memo,
    _over_memory,
    _states_of,
    activation_bytes,
    host_bytes,
    host_over,
    memory_fits,
    offload_seconds,
    over_by_states,
    states_key,
)
from partitioner.cluster.model_profile import ModelProfile
from partitioner.cluster.rules import (
    _params,
    _saved,
    check_layout,
    largest_layer_params,
    min_cut_label,
    min_cut_shares,
    stage_layers,
    stage_share,
)
from partitioner.cluster.serving import experts_touched, serve
from partitioner.pipeline.schedules import virtual_stages
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
    "host_bytes",
    "largest_layer_params",
    "memory_fits",
    "over_by_states",
    "Memo",
    "RECOMPUTE",
    "ZERO_STAGES",
    "SCHEDULE_CHOICES",
    "MAX_DEGREE",
]


def _redo_share(p: ModelProfile, w: Workload, lay: Layout) -> float:
    """Recomputed forward work as a share of the rank's forward: full 1, layers-K K over the
    rank's layers, selective the attention core (the FLOPs that grow with the sequence) or, with
    fused attention, torchtitan's op policy's products; min-cut its measured share."""
    if lay.recompute == "full":
        return 1.0
    if recompute_layers(lay.recompute):
        return min(1.0, recompute_layers(lay.recompute) / stage_layers(p, lay))
    total = p.forward_flops(1, w.seq_len)
    if lay.recompute == "selective":
        saved = _saved(p)
        if saved is not None and not saved.score_elements:
            return saved.op_policy_recompute_flops * saved.layers / total if total else 0.0
        return p.attention_flops_per_token * w.seq_len / p.seq0 / total if total else 0.0
    if lay.recompute.startswith("min-cut-"):
        return min_cut_shares(p, lay.recompute)[1]
    return 0.0


@functools.cache
def shared_simulator() -> StepSimulator:
    """The process's one :class:`~partitioner.pipeline.steps.StepSimulator`: its cache serves every
    evaluation and search (a schedule simulated once a process)."""
    return step_simulator()


def _compute_s(p: ModelProfile, w: Workload, acc: Accelerator, lay: Layout, tokens: float) -> tuple[float, float]:
    """(forward, backward) seconds of the busiest rank's share for a microbatch of ``tokens``
    tokens a device on ``acc``, the loss spread as the layers are (NOTE: [Uneven stages])."""
    share = stage_share(p, lay)
    loss = p.loss_seconds(tokens, acc) / 2 / lay.tp  # each way; on the last stage, spread over the stages here
    fwd = (p.forward_seconds(tokens, w.seq_len, acc, lay.tp, element_bytes=w.element_bytes) + loss) * share
    bwd = (p.backward_seconds(tokens, w.seq_len, acc, lay.tp, element_bytes=w.element_bytes) + loss) * share
    return fwd, bwd


def _stage(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> tuple[float, ...]:
    """One microbatch on the busiest stage: (forward, backward with the recomputation, the
    recomputed share, tensor-parallel, pipeline, context and expert seconds, the communication
    forward and backward)."""
    scale = max(2, w.element_bytes) / p.element_bytes  # activations stay bf16 under FP8 (torchtitan's float8)
    tokens_mb = lay.microbatch_size * w.seq_len / lay.cp  # on one device of the cp group
    hidden_mb = p.hidden_bytes_per_token * scale * tokens_mb
    share = stage_share(p, lay)
    redo = _redo_share(p, w, lay)
    fwd, bwd = _compute_s(p, w, c.accelerator, lay, tokens_mb)
    bwd += redo * fwd
    in_node = lay.tp * lay.pp * lay.cp <= c.devices_per_node
    tp_s = 2 * stage_layers(p, lay) * _tp_allreduce(c, hidden_mb, lay.tp)[0]
    link = c.intra if in_node else c.inter
    # a microbatch crosses each of a rank's chunks' boundaries (interleaving's extra transfers)
    chunks = virtual_stages(lay.schedule, lay.virtual) if lay.pp > 1 else 1
    p2p = chunks * (hidden_mb / link.bandwidth_bytes_per_s + link.latency_s) if lay.pp > 1 else 0.0
    cp_s = _context_exchange_s(p, c, lay, tokens_mb * lay.cp * scale) * share
    ep_s = _expert_exchange_s(p, c, lay, tokens_mb * p.hidden_bytes_per_token * scale / lay.tp) * share
    return fwd, bwd, redo, tp_s, p2p, cp_s, ep_s, tp_s + p2p + ep_s + cp_s, tp_s + p2p + ep_s + 2 * cp_s


def _replicas(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> tuple[float, float, float, float]:
    """(the data-parallel reduction's seconds, FSDP's latency a microbatch, ZeRO-Offload's seconds,
    the optimizer step's seconds) of a step."""
    dense, expert = _params(p, lay)
    group = lay.dp * lay.cp
    dp_s = sum(row.seconds for row in _data_parallel_rows(p, w, c, lay))
    fsdp = _fsdp_latency_s(p, c, lay) if lay.zero == 3 and group > 1 else 0.0
    # ZeRO-1 and up: each rank steps its shard of the state (HSDP: of its shard group); offloaded: the host's
    shard = (lay.shard or group) if lay.zero else 1
    opt_s = (
        0.0
        if lay.offload
        else p.optimizer_seconds(
            dense / shard + expert / max(1, shard // lay.ep if lay.zero else 1),
            w.optimizer,
            w.element_bytes,
            c.accelerator,
        )
    )
    return dp_s, fsdp, offload_seconds(p, w, lay), opt_s


def _pipeline(lay: Layout, m: int, ratio: float, sim: StepSimulator, memo: Memo | None) -> tuple[float, float, float]:
    """(the step in stage-microbatch slots, the first rank's peak stash, its microbatches awaiting
    their weight-gradient step) from the schedule's simulation."""
    if lay.pp <= 1:
        return float(m), 1, 0.0

    def run() -> tuple[float, float, float]:
        unit, _, stash = sim(lay.schedule, lay.pp, m, ratio, lay.virtual)
        return unit / (1 + ratio), stash, sim.pending_weight(lay.schedule, lay.pp, m, ratio, lay.virtual)

    return _memo(memo, ("pipeline", lay.schedule, lay.pp, m, ratio, lay.virtual), run)


def evaluate(
    p: ModelProfile,
    w: Workload,
    c: Cluster,
    lay: Layout,
    sim: StepSimulator | None = None,
    time_unfit: bool = True,
    memo: Memo | None = None,
) -> LayoutResult:
    """Memory and time of ``lay`` (NOTE: [Layout costs]), the time with its band and what it
    assumes (NOTE: [Engine costs], NOTE: [Bands] in :mod:`partitioner.cluster.engine`);
    ``sim(schedule, pp, m, backward_ratio, v)`` gives (unit step, bubble fraction, the first rank's
    peak stash) of the schedule with unit forward stages (default:
    :class:`partitioner.pipeline.steps.StepSimulator`, one cache shared by every call). Without
    ``time_unfit`` (the search's), a layout over the memory is answered by its memory alone (its
    step infinite), the stash from the closed forms the simulator equals. ``memo``: a search's,
    for one workload and cluster (NOTE: [A search's memo] in :mod:`partitioner.cluster.memory`)."""
    sim = sim or shared_simulator()
    check_layout(p, lay, w)
    if w.kind == "inference":
        return serve(p, w, c, lay)
    m = (w.global_batch // lay.dp) // lay.microbatch_size  # microbatches a replica runs a step
    states = _states_of(p, w, lay, memo)
    if not time_unfit:
        over = _over_memory(p, w, c, lay, states, m, memo)
        if over is not None:
            return over
    # 1. a stage's time: its compute and the collectives inside it (tp, cp, ep, pipeline sends)
    stage = _memo(
        memo,
        ("stage", lay.tp, lay.pp, lay.schedule, lay.virtual, lay.cp, lay.ep, lay.microbatch_size, lay.recompute),
        lambda: _stage(p, w, c, lay),
    )
    fwd, bwd, redo, *_, comm_f, comm_b = stage
    # 2. the schedule: its slots, and the microbatches the first rank stashes and has pending
    slots, stash, pending = _pipeline(lay, m, bwd / fwd if fwd else 2.0, sim, memo)
    # 3. the memory a device holds
    mem = {**states, **_activations_of(p, w, lay, stash, pending, memo), "headroom": float(c.headroom_bytes)}
    host = _memo(memo, ("host", *states_key(lay)), lambda: host_bytes(p, w, c, lay))
    # 4. the data-parallel collectives, the step and its parts
    replicas = _memo(memo, ("replicas", *states_key(lay)), lambda: _replicas(p, w, c, lay))
    step, parts, exposed = _step_parts(lay, c, m, stage, slots, replicas)
    band = step_band(p, c, lay, slots, (fwd, bwd, redo), (comm_f + comm_b, exposed), step)
    # 5. the result
    fits = sum(mem.values()) <= c.accelerator.memory_bytes
    limit = "memory" if not fits else "host memory" if host_over(host, c) else max(parts, key=lambda k: parts[k])
    flops = _memo(memo, ("flops",), lambda: _model_flops(p, w))
    memory = (fits and limit != "host memory", mem, host)
    return _result(w, c, lay, memory, (step, parts, limit, band), m, (fwd + comm_f, bwd + comm_b), flops)


def _step_parts(
    lay: Layout,
    c: Cluster,
    m: int,
    stage: tuple[float, ...],
    slots: float,
    replicas: tuple[float, float, float, float],
) -> tuple[float, dict[str, float], float]:
    """(the step, its parts by cause, the gradient reduction left exposed) from a stage's times
    (:func:`_stage`), the schedule's ``slots`` and the data-parallel times (:func:`_replicas`)."""
    fwd, bwd, redo, tp_s, p2p, cp_s, ep_s, comm_f, comm_b = stage
    stage_f, stage_b = fwd + comm_f, bwd + comm_b
    pipe = slots * (stage_f + stage_b)
    dp_s, fsdp, offload_s, opt_s = replicas
    if lay.zero == 3 and lay.dp * lay.cp > 1:  # FSDP: every microbatch gathers and reduces layer by layer
        exposed = m * max(0.0, dp_s + fsdp - (fwd + bwd))
    else:
        exposed = max(0.0, dp_s - bwd)
    exposed += offload_s
    at_scale = scale_factor(lay.devices, c.devices_per_node)
    step = (pipe + exposed + opt_s) * at_scale
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
        "efficiency lost at scale": step - step / at_scale,
    }
    if redo:  # the forward and its backward; the recomputed share apart
        parts["compute"] = busy - m * redo * fwd
        parts["recomputation"] = m * redo * fwd
    return step, parts, exposed


def _result(
    w: Workload,
    c: Cluster,
    lay: Layout,
    memory: tuple[bool, dict[str, float], float],
    time: tuple[float, dict[str, float], str, tuple[float, float]],
    m: int,
    stage_s: tuple[float, float],
    flops: tuple[float, float],
) -> LayoutResult:
    """The :class:`LayoutResult` of a training layout: ``memory`` (fits, bytes by part, host bytes)
    and ``time`` (step, parts, limit, band), with the rates and cost they give; ``stage_s``: a
    stage's forward and backward with their collectives; ``flops``: the
    step's model FLOPs, and with a causal model's attention halved (:func:`_model_flops`)."""
    fits, mem, host = memory
    step, parts, limit, band = time
    acc = c.accelerator
    tokens = w.global_batch * w.seq_len
    model_flops, causal_flops = flops
    mfu = model_flops / (step * lay.devices * acc.peak_flops) if step > 0 else 0.0
    return LayoutResult(
        lay,
        fits,
        mem,
        step,
        parts,
        limit,
        mfu,
        tokens / step if step > 0 else math.inf,
        acc.price_per_hour * lay.devices / 3600 * step / tokens * 1e6,
        m,
        stage_s=stage_s,
        band_s=band,
        assumes=training_assumes(acc, lay),
        mfu_causal=mfu * causal_flops / model_flops if model_flops else 0.0,
        host_bytes=host,
        host_memory_bytes=float(c.host_memory_bytes) if lay.offload else 0.0,
    )


def _model_flops(p: ModelProfile, w: Workload) -> tuple[float, float]:
    """(the step's model FLOPs, with a causal model's attention halved) (NOTE: [Engine costs])."""
    tokens = w.global_batch * w.seq_len
    model_flops = 3 * p.forward_flops(tokens, w.seq_len)
    return model_flops, model_flops - 1.5 * tokens * p.attention_flops_per_token * w.seq_len / p.seq0 * _causal(p)


def _causal(p: ModelProfile) -> bool:
    """Whether the model's attention is causal (its fused attention kernels are). Cached on the
    profile."""
    key = ("causal attention",)
    if key not in p._cache:
        p._cache[key] = float(any(op.kind == "attention" and op.causal for op in p.node_ops))
    return bool(p._cache[key])


def _fsdp_latency_s(p: ModelProfile, c: Cluster, lay: Layout) -> float:
    """The latency of one microbatch's FSDP collectives (NOTE: [Engine costs] in
    :mod:`partitioner.cluster.engine`): FSDP2 gathers each layer's weights in the forward and again
    in the backward and reduce-scatters its gradients, 3 ring collectives a layer, each of n - 1
    steps over the sharding group (NCCL's all-gather and reduce-scatter are rings): at 2,048 ranks
    over InfiniBand about 10 ms each, whatever the bytes. O(1)."""
    group = lay.shard or lay.dp * lay.cp
    link = c.intra if lay.tp * group <= c.devices_per_node else c.inter
    return 3 * stage_layers(p, lay) * (group - 1) * link.latency_s
