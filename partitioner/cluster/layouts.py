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
3 (K from :func:`partitioner.cost.training.model_state_bytes`), and with stage 3 the layer being
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
microbatch in flight (the schedule's peak stash on the first stage). Full recomputation keeps each
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

# NOTE: [Experts read in decode]
A mixture of experts reads only the experts its tokens route to: with top-k of E and T tokens
routed at random, E (1 - (1 - k / E)^T) experts a layer (k at one token, all E once the batch is
large). Decoding reads the dense weights, those experts and the KV cache each token: a floor under
the step beside the arithmetic (Mixtral-8x7B at one sequence: 12.9B of 46.7B parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from partitioner.cluster.hardware import Cluster
from partitioner.cluster.profile import ModelProfile
from partitioner.cluster.saved import SavedActivations
from partitioner.cost.training import check_optimizer, model_state_bytes
from partitioner.errors import PartitionError

__all__ = ["Workload", "Layout", "LayoutResult", "Collective", "evaluate", "collectives", "ring_allreduce_s",
           "all_to_all_s", "check_layout", "min_cut_label", "min_cut_shares"]

ZERO_STAGES = (0, 1, 2, 3)
RECOMPUTE = ("none", "selective", "full")


def _is_min_cut(text: str) -> bool:
    """Whether ``text`` is ``min-cut-B`` with B a number in [0, 1]."""
    if not text.startswith("min-cut-"):
        return False
    try:
        budget = float(text.removeprefix("min-cut-"))
    except ValueError:
        return False
    return 0.0 <= budget <= 1.0


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


SCHEDULE_CHOICES = ("none", "gpipe", "1f1b", "interleaved_1f1b", "zero_bubble")
MAX_DEGREE = 1 << 20  # no layout has a degree beyond a million devices


@dataclass(frozen=True)
class Layout:
    """One way to lay a model out. Validates itself: degrees are whole numbers in [1, 2^20], ZeRO
    0-3, a known schedule and recomputation; :func:`check_layout` checks it against a model."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    microbatch_size: int = 1  # sequences per microbatch
    schedule: str = "none"  # a pipeline schedule when pp > 1
    zero: int = 0  # ZeRO stage over the dp group (3: FSDP full sharding)
    recompute: str = "none"  # none, selective (attention core), full, or min-cut-B
    ep: int = 1  # expert parallelism: each MoE layer's experts split over ep ranks of the dp group
    sp: bool = True  # sequence parallelism with tp > 1 (Korthikanti et al. 2022; Megatron's --sequence-parallel)
    cp: int = 1  # context parallelism: each sequence split over cp ranks (ring attention)
    virtual: int = 2  # interleaved 1F1B: model chunks a pipeline rank holds
    grad_fp32: bool = False  # DeepSpeed's fp32 gradient partition (its estimators' 18 bytes a parameter)
    shard: int = 0  # ZeRO's sharding group: 0 the whole dp x cp group; k: HSDP, shard over k, replicate the rest
    offload: bool = False  # ZeRO-Offload: the optimizer state and its step on the host, gradients sent there

    def __post_init__(self) -> None:
        for key in ("dp", "tp", "pp", "microbatch_size", "ep", "cp", "virtual"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEGREE:
                raise PartitionError(f"layout {key} must be a whole number in [1, {MAX_DEGREE}] (got {value!r})")
        if isinstance(self.shard, bool) or not isinstance(self.shard, int) or not 0 <= self.shard <= MAX_DEGREE:
            raise PartitionError(f"layout shard must be a whole number in [0, {MAX_DEGREE}] (got {self.shard!r}); "
                                 "0 shards over the whole data-parallel group")
        if isinstance(self.zero, bool) or self.zero not in ZERO_STAGES:
            raise PartitionError(f"layout zero must be 0, 1, 2 or 3 (got {self.zero!r})")
        if self.schedule not in SCHEDULE_CHOICES:
            raise PartitionError(f"layout schedule must be one of {', '.join(SCHEDULE_CHOICES)} (got {self.schedule!r})")
        if self.schedule == "interleaved_1f1b" and self.virtual < 2:
            raise PartitionError(f"interleaved 1F1B needs at least 2 chunks a rank (got virtual={self.virtual})")
        if not isinstance(self.recompute, str) or not (self.recompute in RECOMPUTE or _is_min_cut(self.recompute)):
            raise PartitionError(f"layout recompute must be one of {', '.join(RECOMPUTE)} or min-cut-B with B in "
                                 f"[0, 1] (got {self.recompute!r})")
        if self.devices > MAX_DEGREE:
            raise PartitionError(f"a layout of {self.devices} devices is beyond {MAX_DEGREE}; lower its degrees")

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def label(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.pp > 1:
            parts.append(self.schedule)
            if self.schedule == "interleaved_1f1b" and self.virtual != 2:
                parts.append(f"v{self.virtual}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts.append(f"mb{self.microbatch_size}")
        if self.zero:
            parts.append(f"zero{self.zero}")
        if self.recompute != "none":
            parts.append(f"recompute-{self.recompute}")
        if self.tp > 1 and not self.sp:
            parts.append("no-sp")
        if self.grad_fp32:
            parts.append("fp32-grads")
        if self.shard:
            parts.append(f"shard{self.shard}")
        if self.offload:
            parts.append("offload")
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


def allreduce_s(nbytes: float, n: int, bandwidth: float, latency: float, one_shot: bool = False) -> tuple[float, str]:
    """(seconds, algorithm) of an all-reduce of ``nbytes`` over ``n`` devices, the fastest of the
    algorithms NCCL chooses among by size (NOTE: [All-reduce algorithms]): the ring, the double
    binary tree, and, inside a node whose devices read each other's memory (``one_shot``), the
    one-shot all-reduce of small messages."""
    if n <= 1:
        return 0.0, "none"
    steps = math.ceil(math.log2(n))
    options = [(ring_allreduce_s(nbytes, n, bandwidth, latency), "ring"),
               (2 * nbytes / bandwidth + 2 * steps * latency, "tree")]
    if one_shot:
        options.append(((n - 1) * nbytes / bandwidth + latency, "one-shot"))
    return min(options)


def _params(p: ModelProfile, lay: Layout) -> tuple[float, float]:
    """(dense, expert) parameters a device holds before ZeRO: everything split over tp x pp, the
    experts also over ep."""
    split = lay.tp * lay.pp
    return (p.param_count - p.expert_param_count) / split, p.expert_param_count / (split * lay.ep)


def largest_layer_params(p: ModelProfile) -> float:
    """The most parameters one op reads (an embedding, a fused projection): what ZeRO-3 gathers at
    once, as DeepSpeed's estimators take it (``largest_layer_params``)."""
    return max(p.node_weight_bytes, default=0) / p.element_bytes


def _states(p: ModelProfile, w: Workload, lay: Layout) -> dict[str, float]:
    dense, expert = _params(p, lay)
    if w.kind == "inference":
        return {"weights": (dense + expert) * w.element_bytes}
    wb, gb, kb = model_state_bytes(w.optimizer, w.element_bytes)
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
            broken.append(f"tensor parallelism tp{lay.tp} must divide the attention heads and the widths "
                          f"({raise_tp}); choose a tp that divides them")
    per_rank = {"interleaved_1f1b": lay.virtual, "zero_bubble": 2}.get(lay.schedule, 1)
    chunks = lay.pp * per_rank
    if lay.pp > 1 and p.layers % chunks:
        broken.append(f"pipeline stages pp{lay.pp}" + (f" x {chunks // lay.pp} chunks" if chunks != lay.pp else "")
                      + f" must divide the {p.layers} layers; choose a divisor")
    if lay.pp > 1 and lay.schedule == "none" and w is not None and w.kind == "training":
        broken.append(f"pipeline stages pp{lay.pp} need a schedule (gpipe, 1f1b, interleaved_1f1b or zero_bubble)")
    if lay.shard and (not lay.zero or (lay.dp * lay.cp) % lay.shard or lay.shard % lay.cp):
        broken.append(f"a ZeRO sharding group of {lay.shard} (HSDP) needs ZeRO 1-3 and must divide the "
                      f"data-parallel ranks (dp{lay.dp} x cp{lay.cp}) in whole context-parallel groups")
    if lay.offload and not lay.zero:
        broken.append("offloading the optimizer (ZeRO-Offload) needs ZeRO 1-3: add zero1, zero2 or zero3")
    if lay.ep > 1 and (not p.experts or p.experts % lay.ep or lay.dp % lay.ep):
        experts = p.experts or "none: a dense model"
        broken.append(f"expert parallelism ep{lay.ep} must divide the experts ({experts}) and the "
                      f"data-parallel degree ({lay.dp}); choose ep among their common divisors")
    if w is not None:
        if lay.cp > 1 and w.seq_len % lay.cp:
            broken.append(f"context parallelism cp{lay.cp} must divide the sequence ({w.seq_len} tokens)")
        if w.kind == "training" and w.global_batch % (lay.dp * lay.microbatch_size):
            broken.append(f"the global batch ({w.global_batch}) must divide over dp{lay.dp} x mb"
                          f"{lay.microbatch_size}; choose degrees whose product divides it")
        if w.kind == "inference" and w.global_batch % lay.dp:
            broken.append(f"the sequences served ({w.global_batch}) must divide over dp{lay.dp}")
    if max_devices is not None and lay.devices > max_devices:
        broken.append(f"the layout needs {lay.devices} devices and the cluster has {max_devices}; "
                      "lower its degrees or add nodes")
    if broken:
        raise PartitionError(f"layout {lay.label()!r} cannot run on {p.name or 'this model'}: " + "; ".join(broken))


def activation_bytes(p: ModelProfile, w: Workload, lay: Layout, stash: float) -> dict[str, float]:
    """Saved activations on the fullest device (NOTE: [Activation memory]): by kind, in bytes."""
    scale = w.element_bytes / p.element_bytes
    tokens = lay.microbatch_size * w.seq_len / lay.cp  # a microbatch's tokens on one device
    stage_layers = p.layers / lay.pp
    saved = _saved(p)
    if saved is not None:
        layer = saved.layer_bytes_per_token(w.element_bytes, w.seq_len, lay.tp, lay.sp or lay.tp == 1,
                                            scores=lay.recompute != "selective")
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
    wb, gb, kb = model_state_bytes(w.optimizer, w.element_bytes)
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


def _tp_allreduce(c: Cluster, nbytes: float, n: int) -> tuple[float, str]:
    return allreduce_s(nbytes, n, c.intra.bandwidth_bytes_per_s, c.intra.latency_s, one_shot=True)


def evaluate(p: ModelProfile, w: Workload, c: Cluster, lay: Layout, sim: Any) -> LayoutResult:
    """Memory and time of ``lay`` (NOTE: [Layout costs]); ``sim(schedule, pp, m, backward_ratio)``
    gives (unit step, bubble fraction, peak stash) of the schedule with unit forward stages."""
    check_layout(p, lay, w)
    if w.kind == "inference":
        return _inference(p, w, c, lay)
    acc = c.accelerator
    scale = w.element_bytes / p.element_bytes
    mem = _states(p, w, lay)
    per_replica = w.global_batch // lay.dp
    m = per_replica // lay.microbatch_size
    tokens_mb = lay.microbatch_size * w.seq_len / lay.cp  # on one device of the cp group
    hidden_mb = p.hidden_bytes_per_token * scale * tokens_mb
    layers_per_stage = p.layers / lay.pp
    redo = _redo_share(p, w, lay)
    fwd = p.forward_seconds(tokens_mb, w.seq_len, acc, lay.tp) / lay.pp
    bwd = fwd * (2.0 + redo)
    in_node = lay.tp * lay.pp * lay.cp <= c.devices_per_node
    tp_s = 2 * layers_per_stage * _tp_allreduce(c, hidden_mb, lay.tp)[0]
    link = c.intra if in_node else c.inter
    p2p = (hidden_mb / link.bandwidth_bytes_per_s + link.latency_s) if lay.pp > 1 else 0.0
    cp_s = _context_exchange_s(p, c, lay, tokens_mb * lay.cp * scale) / lay.pp
    ep_s = _expert_exchange_s(p, c, lay, tokens_mb * p.hidden_bytes_per_token * scale / lay.tp) / lay.pp
    stage_f, stage_b = fwd + tp_s + p2p + ep_s + cp_s, bwd + tp_s + p2p + ep_s + 2 * cp_s
    ratio = bwd / fwd if fwd else 2.0
    if lay.pp > 1:  # the compute's backward ratio; communication scales with the stage time
        if lay.schedule == "interleaved_1f1b" and lay.virtual != 2:
            from partitioner.cluster.search import closed_form

            unit, _, stash = closed_form(lay.schedule, lay.pp, m, ratio, lay.virtual)
        else:
            unit, _, stash = sim(lay.schedule, lay.pp, m, ratio)
        pipe = unit * (stage_f + stage_b) / (1 + ratio)
    else:
        stash, pipe = 1, m * (stage_f + stage_b)
    mem.update(activation_bytes(p, w, lay, stash))
    mem["headroom"] = float(c.headroom_bytes)
    dense, expert = _params(p, lay)
    grad_bytes = model_state_bytes(w.optimizer, w.element_bytes)[1]
    group = lay.dp * lay.cp
    dp_s = sum(row.seconds for row in _data_parallel_rows(p, w, c, lay))
    exposed = max(0.0, dp_s - bwd) + offload_seconds(p, w, lay)
    step = pipe + exposed
    busy = m * (fwd + bwd)
    parts = {"compute": busy, "tensor-parallel communication": m * 2 * tp_s,
             "pipeline transfers": m * 2 * p2p, "expert all-to-all": m * 2 * ep_s,
             "context-parallel exchange": m * 3 * cp_s,
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


def _context_exchange_s(p: ModelProfile, c: Cluster, lay: Layout, sequence_bytes_scale: float) -> float:
    """One forward's context-parallel exchange on a device: ring attention passes every layer's
    keys and values around the cp ranks ((cp - 1) / cp of a microbatch's, split over tp), on the
    node's link when tp x cp fits in one (Liu et al. 2023; Megatron's and torchtitan's context
    parallelism). The backward sends the key and value gradients back: twice this."""
    if lay.cp <= 1 or not p.kv_bytes_per_token:
        return 0.0
    link = c.intra if lay.tp * lay.cp <= c.devices_per_node else c.inter
    kv = p.kv_bytes_per_token * sequence_bytes_scale / lay.tp  # every layer's K and V of the microbatch
    return (lay.cp - 1) / lay.cp * kv / link.bandwidth_bytes_per_s + (lay.cp - 1) * p.layers * link.latency_s


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


def experts_touched(experts: int, top_k: int, tokens: float) -> float:
    """Expected experts of one MoE layer that ``tokens`` tokens route to, each to ``top_k`` of
    ``experts`` at random: E (1 - (1 - k / E)^T); k at one token, all E once the batch is large."""
    if experts <= 0:
        return 0.0
    k = min(max(1, top_k), experts)
    return experts * (1.0 - (1.0 - k / experts) ** max(1.0, tokens))


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
        tp = 2 * p.layers * _tp_allreduce(c, hidden, lay.tp)[0]
        return tp + (lay.pp - 1) * (hidden / link.bandwidth_bytes_per_s + link.latency_s)

    def weight_floor(tokens: float) -> float:
        """Reading the weights a step touches: the dense ones and the experts its tokens route to
        (NOTE: [Experts read in decode]), on one device of tp x pp."""
        dense, expert = (p.param_count - p.expert_param_count), p.expert_param_count
        if p.experts:
            expert *= experts_touched(p.experts, p.experts_per_token, tokens) / p.experts
        return (dense + expert) * w.element_bytes / (lay.tp * lay.pp) / bw

    ttft_compute = max(p.forward_seconds(batch * w.seq_len, w.seq_len, acc, lay.tp), weight_floor(batch * w.seq_len))
    ttft = ttft_compute + comm(batch * w.seq_len)
    mid = w.seq_len + w.generate_tokens // 2
    kv_read = p.kv_bytes_per_token * scale * batch * mid / lay.tp / bw
    decode = max(p.forward_seconds(batch, mid, acc, lay.tp), weight_floor(batch))
    per_token = decode + kv_read + comm(batch)
    fits = sum(mem.values()) <= acc.memory_bytes
    parts = {"prefill compute": ttft_compute, "decode per token": per_token,
             "communication per token": comm(batch)}
    generated = w.global_batch * max(1, w.generate_tokens)
    run_s = ttft + w.generate_tokens * per_token
    tps = w.global_batch / per_token
    flops = p.forward_flops(batch, mid)
    mfu = flops / (per_token * lay.tp * lay.pp * peak)
    cost = acc.price_per_hour * lay.devices / 3600 * run_s / generated * 1e6
    # What bounds a generated token: the weights and cache read, the arithmetic, or the messages.
    bounds = {"memory bandwidth": weight_floor(batch) + kv_read, "compute": flops / (lay.tp * lay.pp * peak),
              "communication": comm(batch)}
    limit = "memory" if not fits else max(bounds, key=lambda k: bounds[k])
    extra = {"time_to_first_token_s": ttft, "seconds_per_token": per_token,
             "tokens_per_s_per_sequence": 1 / per_token, "tokens_per_s_per_device": tps / lay.devices,
             "kv_cache_bytes_per_token": p.kv_bytes_per_token * scale,
             "weights_read_s_per_token": weight_floor(batch), "kv_read_s_per_token": kv_read,
             "compute_floor_s_per_token": flops / (lay.tp * lay.pp * peak),
             "prefill_compute_floor_s": p.forward_flops(batch * w.seq_len, w.seq_len) / (lay.tp * lay.pp * peak)}
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
    for training, in the tensor-parallel, pipeline, context, expert and data-parallel groups; for
    inference the prompt's prefill and each generated token. Rows sum to ``evaluate``'s parts (a
    test holds them equal); the counts are Megatron-LM's (Shoeybi et al. 2019, sec. 3: two
    all-reduces per layer in the forward and two in the backward), GShard's and the ZeRO paper's
    (sec. 7: ZeRO-3 moves 1.5 times data parallelism's bytes); each all-reduce names the algorithm
    that prices it (NOTE: [All-reduce algorithms])."""
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
                seconds, algorithm = _tp_allreduce(c, hidden, lay.tp)
                rows.append(Collective(f"all-reduce of the hidden state ({algorithm})", "tp", lay.tp, intra.name,
                                       2 * p.layers, hidden, seconds, phase))
            if lay.pp > 1:
                rows.append(Collective("send of the hidden state to the next stage", "pp", 2, pipe_link.name,
                                       lay.pp - 1, hidden,
                                       hidden / pipe_link.bandwidth_bytes_per_s + pipe_link.latency_s, phase))
        return rows
    per_replica = w.global_batch // lay.dp
    m = per_replica // lay.microbatch_size
    tokens_mb = lay.microbatch_size * w.seq_len / lay.cp
    hidden_mb = p.hidden_bytes_per_token * scale * tokens_mb
    layers_per_stage = p.layers / lay.pp
    if lay.tp > 1:  # each microbatch, each layer of the stage: 2 in the forward, 2 in the backward
        seconds, algorithm = _tp_allreduce(c, hidden_mb, lay.tp)
        rows.append(Collective(f"all-reduce of the hidden state ({algorithm})", "tp", lay.tp, intra.name,
                               m * 4 * layers_per_stage, hidden_mb, seconds, "forward + backward"))
    if lay.pp > 1:
        link = intra if lay.tp * lay.pp * lay.cp <= c.devices_per_node else inter
        rows.append(Collective("send of the hidden state and its gradient", "pp", 2, link.name, m * 2,
                               hidden_mb, hidden_mb / link.bandwidth_bytes_per_s + link.latency_s,
                               "forward + backward"))
    if lay.cp > 1 and p.kv_bytes_per_token:
        link = intra if lay.tp * lay.cp <= c.devices_per_node else inter
        kv = p.kv_bytes_per_token * scale * tokens_mb * lay.cp / lay.tp / lay.pp
        rows.append(Collective("ring exchange of keys and values (backward: their gradients, twice)", "cp", lay.cp,
                               link.name, m * 3, kv, _context_exchange_s(p, c, lay, tokens_mb * lay.cp * scale) / lay.pp,
                               "forward + backward"))
    if lay.ep > 1 and p.moe_layers:
        link = intra if lay.tp * lay.ep <= c.devices_per_node else inter
        sent = hidden_mb / lay.tp * max(1, p.experts_per_token)
        rows.append(Collective("all-to-all of tokens to their experts and back", "ep", lay.ep, link.name,
                               m * 2 * 2 * p.moe_layers / lay.pp, sent,
                               all_to_all_s(sent, lay.ep, link.bandwidth_bytes_per_s, link.latency_s),
                               "forward + backward"))
    return rows + _data_parallel_rows(p, w, c, lay)


def _data_parallel_rows(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> list[Collective]:
    """The gradient reduction over the data-parallel (dp x cp) ranks, once a step: a ring
    all-reduce (ZeRO 0-2), or ZeRO-3's reduce-scatter and its two all-gathers of the weights; with
    HSDP (``lay.shard``) a reduce-scatter and the all-gathers inside the sharding group, and an
    all-reduce of each shard across the replicas (FSDP2's HSDP; DeepSpeed's ZeRO++ hpZ)."""
    dense, expert = _params(p, lay)
    grad_bytes = model_state_bytes(w.optimizer, w.element_bytes)[1]
    group = lay.dp * lay.cp
    node = c.devices_per_node
    link = c.intra if lay.tp * group <= node else c.inter
    overlap = "last microbatch's backward"
    rows: list[Collective] = []
    for what, psi, ranks in (("gradients", dense, group), ("expert gradients", expert, group // lay.ep)):
        nbytes = psi * grad_bytes
        if ranks <= 1 or nbytes <= 0:
            continue
        shard = min(lay.shard, ranks) if lay.shard else ranks
        if shard < ranks:  # HSDP
            inner = c.intra if lay.tp * shard <= node else c.inter
            half = ring_allreduce_s(nbytes, shard, inner.bandwidth_bytes_per_s, inner.latency_s) / 2
            across = ring_allreduce_s(nbytes / shard, ranks // shard, link.bandwidth_bytes_per_s, link.latency_s)
            weights = what.replace("gradients", "weights")
            rows += [Collective(f"reduce-scatter of the {what} in the shard group", "dp", shard, inner.name, 1,
                                nbytes, half, "once a step", overlap),
                     Collective(f"all-reduce of each {what.removesuffix('s')} shard across replicas", "dp",
                                ranks // shard, link.name, 1, nbytes / shard, across, "once a step", overlap),
                     Collective(f"all-gather of the {weights} in the shard group" + (" (forward, backward)"
                                                                                    if lay.zero == 3 else ""),
                                "dp", shard, inner.name, 2 if lay.zero == 3 else 1, nbytes, half, "once a step",
                                overlap)]
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
