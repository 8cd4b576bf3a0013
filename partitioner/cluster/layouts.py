"""One layout of a cluster, its memory per device and its time per step.

A layout composes the four techniques as Megatron-LM and torchtitan do: ``tp``-way tensor
parallelism inside a node, ``pp`` pipeline stages (a schedule from :mod:`partitioner.pipeline`,
simulated by the pipeline page's own simulator), ``dp``-way data parallelism with ZeRO stage
0-3 (stage 3 is FSDP's full sharding), ``ep``-way expert parallelism for a mixture of experts
(each MoE layer's experts split over ranks of the data-parallel group), and recomputation (none;
full: only each layer's input is kept and the forward runs again in the backward; or functorch's
min-cut at a budget).

# NOTE: [Layout costs]
Memory per device (training): model states by the ZeRO paper (Rajbhandari et al. 2020, sec. 3.1)
over psi = parameters / (tp x pp): (2 + 2 + K) psi with stage 0, 4 psi + K psi / dp with 1,
2 psi + (2 + K) psi / dp with 2, (4 + K) psi / dp with 3 (K from
:func:`partitioner.cost.training.model_state_bytes`); activations of one microbatch per stage,
divided by tp (sequence parallelism, Korthikanti et al. 2022), times the microbatches the
schedule keeps in flight on the first stage (the simulator's peak stash); the headroom.
Inference: the weights over tp x pp and the KV cache of the batch's context.
Time per step (training): each stage's forward per microbatch is the roofline of its share of
the graph (NOTE: [Scaling the traced graph]); backward twice the forward, three times with full
recomputation; tensor parallelism adds 2 all-reduces of the hidden state per layer in each
direction (Megatron-LM) on the node's link; a stage boundary sends the hidden state of a
microbatch; expert parallelism adds two all-to-alls per MoE layer in each direction (each token's
hidden state to its top-k experts and back); the schedule's simulation gives the step and its
bubble; data parallelism reduces the gradients (ring all-reduce, 2 (dp - 1) / dp of the bytes;
ZeRO-3 1.5 times that for its parameter gathers) on the slowest link of its group, overlapped with
the last microbatch's backward (as DDP's buckets are; the experts' gradients over their dp / ep
replicas): only what exceeds that backward is added. The optimizer step
and kernel launch overheads are left out. Assumptions: stages hold equal shares of the layers
(the first and last also hold the embedding and head: an under-estimate of the largest stage).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from partitioner.cluster.hardware import Cluster
from partitioner.cluster.profile import ModelProfile
from partitioner.cost.training import check_optimizer, model_state_bytes
from partitioner.errors import PartitionError

__all__ = ["Workload", "Layout", "LayoutResult", "Collective", "evaluate", "collectives", "ring_allreduce_s",
           "all_to_all_s", "check_layout", "min_cut_label", "min_cut_shares"]

ZERO_STAGES = (0, 1, 2, 3)
RECOMPUTE = ("none", "full")


@dataclass(frozen=True)
class Workload:
    """Training: ``global_batch`` sequences of ``seq_len`` tokens a step, weights of
    ``element_bytes`` (2: bf16 mixed precision), ``optimizer``, ``train_tokens`` to price a run.
    Inference: ``global_batch`` sequences, a prompt of ``seq_len`` tokens, ``generate_tokens``."""

    kind: str = "training"
    global_batch: int = 512
    seq_len: int = 4096
    element_bytes: int = 2
    optimizer: str = "adam"
    train_tokens: float = 1e12
    generate_tokens: int = 256

    def __post_init__(self) -> None:
        if self.kind not in ("training", "inference"):
            raise PartitionError(f"kind must be 'training' or 'inference' (got {self.kind!r})")
        if self.global_batch < 1 or self.seq_len < 1 or self.generate_tokens < 0:
            raise PartitionError(f"global_batch and seq_len must be >= 1 (got {self.global_batch}, {self.seq_len})")
        if self.element_bytes not in (1, 2, 4):
            raise PartitionError(f"element_bytes must be 1, 2 or 4 (got {self.element_bytes})")
        check_optimizer(self.optimizer)


@dataclass(frozen=True)
class Layout:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    microbatch_size: int = 1  # sequences per microbatch
    schedule: str = "none"  # a pipeline schedule when pp > 1
    zero: int = 0  # ZeRO stage over the dp group (3: FSDP full sharding)
    recompute: str = "none"
    ep: int = 1  # expert parallelism: each MoE layer's experts split over ep ranks of the dp group

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp

    def label(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        if self.pp > 1:
            parts.append(self.schedule)
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts.append(f"mb{self.microbatch_size}")
        if self.zero:
            parts.append(f"zero{self.zero}")
        if self.recompute != "none":
            parts.append(f"recompute-{self.recompute}")
        return " ".join(parts)


@dataclass(frozen=True)
class LayoutResult:
    layout: Layout
    fits: bool
    memory: dict[str, float]  # bytes per device by kind (the fullest device)
    step_s: float  # training: one optimizer step; inference: time to first token
    parts_s: dict[str, float]  # where the step's time goes
    limit: str  # what limits it: memory, compute, tensor-parallel communication, bubble, ...
    mfu: float
    tokens_per_s: float  # training: trained tokens; inference: generated tokens, all devices
    cost_per_million_tokens: float
    microbatches: int = 1
    extra: dict[str, float] = field(default_factory=dict)  # inference: per-token figures
    stage_s: tuple[float, float] = (0.0, 0.0)  # training: one microbatch's forward and backward on a stage

    @property
    def devices(self) -> int:
        return self.layout.devices

    @property
    def memory_bytes(self) -> float:
        return sum(self.memory.values())

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.layout.__dict__, "label": self.layout.label(), "devices": self.devices,
                "fits": self.fits, "memory_bytes": self.memory, "step_s": self.step_s, "parts_s": self.parts_s,
                "limit": self.limit, "mfu": self.mfu, "tokens_per_s": self.tokens_per_s,
                "cost_per_million_tokens": self.cost_per_million_tokens, "microbatches": self.microbatches,
                "stage_forward_s": self.stage_s[0], "stage_backward_s": self.stage_s[1],
                **({"inference": self.extra} if self.extra else {})}


def ring_allreduce_s(nbytes: float, n: int, bandwidth: float, latency: float) -> float:
    """A ring all-reduce of ``nbytes`` over ``n`` devices: 2 (n - 1) / n of the bytes each way,
    2 (n - 1) messages (Patarasuk and Yuan 2009; NCCL's ring)."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * latency


def _params(p: ModelProfile, lay: Layout) -> tuple[float, float]:
    """(dense, expert) parameters a device holds before ZeRO: everything split over tp x pp, the
    experts also over ep."""
    split = lay.tp * lay.pp
    return (p.param_count - p.expert_param_count) / split, p.expert_param_count / (split * lay.ep)


def _states(p: ModelProfile, w: Workload, lay: Layout) -> dict[str, float]:
    dense, expert = _params(p, lay)
    if w.kind == "inference":
        return {"weights": (dense + expert) * w.element_bytes}
    wb, gb, kb = model_state_bytes(w.optimizer, w.element_bytes)
    out = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0}
    # ZeRO shards each parameter over the ranks holding a copy of it: the dp group for dense
    # ones, dp / ep for the experts (the expert-data-parallel group, as DeepSpeed-MoE shards them).
    for psi, dp in ((dense, lay.dp), (expert, lay.dp // lay.ep)):
        shard = {0: (1, 1, 1), 1: (1, 1, dp), 2: (1, dp, dp), 3: (dp, dp, dp)}[lay.zero]
        out["weights"] += wb * psi / shard[0]
        out["gradients"] += gb * psi / shard[1]
        out["optimizer"] += kb * psi / shard[2]
    return out


def all_to_all_s(nbytes: float, n: int, bandwidth: float, latency: float) -> float:
    """An all-to-all of ``nbytes`` a device over ``n`` devices: (n - 1) / n of them leave, n - 1
    messages (the pairwise exchange NCCL and gloo run)."""
    if n <= 1:
        return 0.0
    return (n - 1) / n * nbytes / bandwidth + (n - 1) * latency


def min_cut_label(budget: float) -> str:
    return f"min-cut-{budget:g}"


def min_cut_shares(p: ModelProfile, recompute: str) -> tuple[float, float]:
    """(activations kept, forward FLOPs recomputed) as shares, for a ``min-cut-B`` choice."""
    for budget, kept, redo in p.min_cut:
        if min_cut_label(budget) == recompute:
            return kept, redo
    known = ", ".join([*RECOMPUTE, *(min_cut_label(b) for b, _, _ in p.min_cut)])
    raise PartitionError(f"recomputation {recompute!r} is not one of this profile's ({known}); min-cut budgets "
                         "come from cluster.with_min_cut (the CLI's --min-cut-budgets)")


def check_layout(p: ModelProfile, lay: Layout) -> None:
    """Raise :class:`PartitionError` for a layout no engine can run."""
    if lay.ep > 1 and (not p.experts or p.experts % lay.ep or lay.dp % lay.ep):
        experts = p.experts or "none: a dense model"
        raise PartitionError(f"expert parallelism ep{lay.ep} must divide the experts ({experts}) and the "
                             f"data-parallel degree ({lay.dp}); choose ep among their common divisors")


def evaluate(p: ModelProfile, w: Workload, c: Cluster, lay: Layout, sim: Any) -> LayoutResult:
    """Memory and time of ``lay`` (NOTE: [Layout costs]); ``sim(schedule, pp, m, backward_ratio)``
    gives (unit step, bubble fraction, peak stash) of the schedule with unit forward stages."""
    check_layout(p, lay)
    if w.kind == "inference":
        return _inference(p, w, c, lay)
    acc = c.accelerator
    scale = w.element_bytes / p.element_bytes
    mem = _states(p, w, lay)
    per_replica = w.global_batch // lay.dp
    m = per_replica // lay.microbatch_size
    tokens_mb = lay.microbatch_size * w.seq_len
    hidden_mb = p.hidden_bytes_per_token * scale * tokens_mb
    layers_per_stage = p.layers / lay.pp
    act_mb = p.act_bytes_per_token * scale * tokens_mb / lay.tp / lay.pp
    redo = 0.0  # recomputed forward work, as a share of the forward
    if lay.recompute == "full":  # each layer's input kept; one layer's activations live at a time
        act_mb = hidden_mb / lay.tp * layers_per_stage + act_mb / layers_per_stage
        redo = 1.0
    elif lay.recompute != "none":  # min-cut at a budget: its measured shares
        kept, redo = min_cut_shares(p, lay.recompute)
        act_mb *= kept
    fwd = p.forward_seconds(tokens_mb, w.seq_len, acc, lay.tp) / lay.pp
    bwd = fwd * (2.0 + redo)
    in_node = lay.tp * lay.pp <= c.devices_per_node
    tp_s = 2 * layers_per_stage * ring_allreduce_s(hidden_mb, lay.tp, c.intra.bandwidth_bytes_per_s, c.intra.latency_s)
    link = c.intra if in_node else c.inter
    p2p = (hidden_mb / link.bandwidth_bytes_per_s + link.latency_s) if lay.pp > 1 else 0.0
    ep_s = _expert_exchange_s(p, c, lay, tokens_mb * p.hidden_bytes_per_token * scale / lay.tp) / lay.pp
    stage_f, stage_b = fwd + tp_s + p2p + ep_s, bwd + tp_s + p2p + ep_s
    if lay.pp > 1:  # the compute's backward ratio; communication scales with the stage time
        unit, _, stash = sim(lay.schedule, lay.pp, m, bwd / fwd if fwd else 2.0)
        pipe = unit * (stage_f + stage_b) / (1 + (bwd / fwd if fwd else 2.0))
    else:
        stash, pipe = 1, m * (stage_f + stage_b)
    mem["activations"] = act_mb * stash
    mem["headroom"] = float(c.headroom_bytes)
    dense, expert = _params(p, lay)
    grad_bytes = model_state_bytes(w.optimizer, w.element_bytes)[1]
    dp_link = c.intra if lay.tp * lay.dp <= c.devices_per_node else c.inter
    dp_s = (ring_allreduce_s(dense * grad_bytes, lay.dp, dp_link.bandwidth_bytes_per_s, dp_link.latency_s)
            + ring_allreduce_s(expert * grad_bytes, lay.dp // lay.ep, dp_link.bandwidth_bytes_per_s, dp_link.latency_s)
            ) * (1.5 if lay.zero == 3 else 1.0)
    exposed = max(0.0, dp_s - bwd)
    step = pipe + exposed
    busy = m * (fwd + bwd)
    parts = {"compute": busy, "tensor-parallel communication": m * 2 * tp_s,
             "pipeline transfers": m * 2 * p2p, "expert all-to-all": m * 2 * ep_s,
             "bubble": max(0.0, pipe - m * (stage_f + stage_b)),
             "gradient reduction (exposed)": exposed}
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


def _expert_exchange_s(p: ModelProfile, c: Cluster, lay: Layout, hidden_bytes: float) -> float:
    """One direction's expert exchange of a microbatch whose hidden state is ``hidden_bytes`` a
    device: in every MoE layer, an all-to-all sends each token to its top-k experts and another
    brings the results back (GShard, Lepikhin et al. 2020), over the ep ranks (in the node when
    tp x ep fits in one)."""
    if lay.ep <= 1 or not p.moe_layers:
        return 0.0
    link = c.intra if lay.tp * lay.ep <= c.devices_per_node else c.inter
    per_layer = 2 * all_to_all_s(hidden_bytes * max(1, p.experts_per_token), lay.ep, link.bandwidth_bytes_per_s,
                                 link.latency_s)
    return p.moe_layers * per_layer


def _inference(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> LayoutResult:
    acc = c.accelerator
    scale = w.element_bytes / p.element_bytes
    batch = w.global_batch / lay.dp
    context = w.seq_len + w.generate_tokens
    mem = _states(p, w, lay)
    mem["kv_cache"] = p.kv_bytes_per_token * scale * batch * context / lay.tp / lay.pp
    mem["activations"] = p.act_bytes_per_token * scale * batch * w.seq_len / lay.tp / max(1, p.layers)
    mem["headroom"] = float(c.headroom_bytes)
    bw, peak = acc.memory_bandwidth_bytes_per_s, acc.peak_flops
    link = c.intra if lay.tp * lay.pp <= c.devices_per_node else c.inter

    def comm(tokens: float) -> float:
        hidden = p.hidden_bytes_per_token * scale * tokens
        tp = 2 * p.layers * ring_allreduce_s(hidden, lay.tp, c.intra.bandwidth_bytes_per_s, c.intra.latency_s)
        return tp + (lay.pp - 1) * (hidden / link.bandwidth_bytes_per_s + link.latency_s)

    ttft = p.forward_seconds(batch * w.seq_len, w.seq_len, acc, lay.tp) + comm(batch * w.seq_len)
    mid = w.seq_len + w.generate_tokens // 2
    kv_read = p.kv_bytes_per_token * scale * batch * mid / lay.tp / bw
    per_token = p.forward_seconds(batch, mid, acc, lay.tp) + kv_read + comm(batch)
    fits = sum(mem.values()) <= acc.memory_bytes
    parts = {"prefill compute": ttft - comm(batch * w.seq_len), "decode per token": per_token,
             "communication per token": comm(batch)}
    generated = w.global_batch * max(1, w.generate_tokens)
    run_s = ttft + w.generate_tokens * per_token
    tps = w.global_batch / per_token
    flops = p.forward_flops(batch, mid)
    mfu = flops / (per_token * lay.tp * lay.pp * peak)
    cost = acc.price_per_hour * lay.devices / 3600 * run_s / generated * 1e6
    limit = "memory" if not fits else ("memory bandwidth" if per_token > 2 * flops / (lay.tp * peak) else "compute")
    extra = {"time_to_first_token_s": ttft, "seconds_per_token": per_token,
             "tokens_per_s_per_sequence": 1 / per_token, "tokens_per_s_per_device": tps / lay.devices,
             "kv_cache_bytes_per_token": p.kv_bytes_per_token * scale}
    return LayoutResult(lay, fits, mem, ttft, parts, limit, mfu, tps, cost, 1, extra)


@dataclass(frozen=True)
class Collective:
    """One kind of communication a layout runs: ``count`` of them a step (inference: a prompt's
    prefill, then each generated token), each moving ``bytes_each`` a device over ``ranks`` ranks
    of the ``group`` dimension on ``link`` in ``seconds_each``."""

    name: str  # e.g. "all-reduce of the hidden state"
    group: str  # the mesh dimension: "tp", "pp", "ep" or "dp"
    ranks: int
    link: str
    count: float  # per step (or per token: see ``phase``)
    bytes_each: float
    seconds_each: float
    phase: str  # "forward + backward", "once a step", "prefill", "each token"
    overlap: str = ""  # what it is overlapped with, if anything

    @property
    def seconds(self) -> float:
        return self.count * self.seconds_each


def collectives(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> list[Collective]:
    """The communication :func:`evaluate` prices, one row a kind (NOTE: [Layout costs]): per step
    for training, in the tensor-parallel, pipeline, expert and data-parallel groups; for inference
    the prompt's prefill and each generated token. Rows sum to ``evaluate``'s parts (a test holds
    them equal); the counts are Megatron-LM's (Shoeybi et al. 2019, sec. 3: two all-reduces per
    layer in the forward and two in the backward), GShard's and the ZeRO paper's (sec. 7: ZeRO-3
    moves 1.5 times data parallelism's bytes)."""
    check_layout(p, lay)
    scale = w.element_bytes / p.element_bytes
    intra, inter = c.intra, c.inter
    rows: list[Collective] = []
    if w.kind == "inference":
        batch = w.global_batch / lay.dp
        pipe_link = intra if lay.tp * lay.pp <= c.devices_per_node else inter
        for phase, tokens in (("prefill", batch * w.seq_len), ("each token", batch)):
            hidden = p.hidden_bytes_per_token * scale * tokens
            if lay.tp > 1:
                rows.append(Collective("all-reduce of the hidden state", "tp", lay.tp, intra.name, 2 * p.layers, hidden,
                                       ring_allreduce_s(hidden, lay.tp, intra.bandwidth_bytes_per_s, intra.latency_s),
                                       phase))
            if lay.pp > 1:
                rows.append(Collective("send of the hidden state to the next stage", "pp", 2, pipe_link.name,
                                       lay.pp - 1, hidden,
                                       hidden / pipe_link.bandwidth_bytes_per_s + pipe_link.latency_s, phase))
        return rows
    per_replica = w.global_batch // lay.dp
    m = per_replica // lay.microbatch_size
    hidden_mb = p.hidden_bytes_per_token * scale * lay.microbatch_size * w.seq_len
    layers_per_stage = p.layers / lay.pp
    if lay.tp > 1:  # each microbatch, each layer of the stage: 2 in the forward, 2 in the backward
        rows.append(Collective("all-reduce of the hidden state", "tp", lay.tp, intra.name, m * 4 * layers_per_stage,
                               hidden_mb, ring_allreduce_s(hidden_mb, lay.tp, intra.bandwidth_bytes_per_s,
                                                           intra.latency_s), "forward + backward"))
    if lay.pp > 1:
        link = intra if lay.tp * lay.pp <= c.devices_per_node else inter
        rows.append(Collective("send of the hidden state and its gradient", "pp", 2, link.name, m * 2,
                               hidden_mb, hidden_mb / link.bandwidth_bytes_per_s + link.latency_s,
                               "forward + backward"))
    if lay.ep > 1 and p.moe_layers:
        link = intra if lay.tp * lay.ep <= c.devices_per_node else inter
        sent = hidden_mb / lay.tp * max(1, p.experts_per_token)
        rows.append(Collective("all-to-all of tokens to their experts and back", "ep", lay.ep, link.name,
                               m * 2 * 2 * p.moe_layers / lay.pp, sent,
                               all_to_all_s(sent, lay.ep, link.bandwidth_bytes_per_s, link.latency_s),
                               "forward + backward"))
    dense, expert = _params(p, lay)
    grad_bytes = model_state_bytes(w.optimizer, w.element_bytes)[1]
    link = intra if lay.tp * lay.dp <= c.devices_per_node else inter
    overlap = "last microbatch's backward"
    for what, psi, ranks in (("gradients", dense, lay.dp), ("expert gradients", expert, lay.dp // lay.ep)):
        nbytes = psi * grad_bytes
        if ranks <= 1 or nbytes <= 0:
            continue
        ring = ring_allreduce_s(nbytes, ranks, link.bandwidth_bytes_per_s, link.latency_s)
        if lay.zero == 3:  # a reduce-scatter of the gradients, an all-gather of the weights each way
            rows.append(Collective(f"reduce-scatter of the {what}", "dp", ranks, link.name, 1, nbytes, ring / 2,
                                   "once a step", overlap))
            rows.append(Collective(f"all-gather of the {what.replace('gradients', 'weights')} (forward, backward)",
                                   "dp", ranks, link.name, 2, nbytes, ring / 2, "once a step", overlap))
        else:
            name = f"all-reduce of the {what}" + (f" (ZeRO-{lay.zero}: reduce-scatter + all-gather)"
                                                   if lay.zero else "")
            rows.append(Collective(name, "dp", ranks, link.name, 1, nbytes, ring, "once a step", overlap))
    return rows
