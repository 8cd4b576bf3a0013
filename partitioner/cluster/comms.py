"""The communication a layout runs: all-reduces by NCCL's algorithms, all-to-alls, the context
ring, and the collectives table (NOTE: [All-reduce algorithms] in :mod:`partitioner.cluster.layouts`);
serving's tensor-parallel all-reduce at the latency the serving engines' custom all-reduce was
measured at (NOTE: [Serving all-reduce]). Torch-free.

# NOTE: [Serving all-reduce]
A decoded token's tensor-parallel all-reduce moves one hidden state a sequence (8 KiB for
Llama-3-8B at batch 1): its time is the kernel's fixed latency, not the link's 2 us a message.
vLLM and SGLang run a custom one-shot all-reduce inside the node for such messages (each rank reads
the others' buffers over NVLink and adds them; a two-shot reduce-scatter + all-gather for larger
ones). Its latency on H100s, as SGLang's maintainers measured vLLM's custom all-reduce (SGLang
pull request #2904, "optimize custom allreduce kernel", 2025-01-15, ``tests/test_trt_reduce.py``
on H100, no CUDA graph): 9.5, 9.1 and 10.1 us at 2, 4 and 8 ranks for the smallest messages,
growing to 26.6, 40.2 and 45.0 us at the largest measured; SGLang's own kernel 3.7, 4.8 and 5.9 us
(``SERVING_ALLREDUCE_LATENCY_S`` keeps vLLM's, what both engines ran by default then). Others
agree: 8 GPUs, 16 KiB in bf16, one-shot 11.2 us against NCCL's 22.4 (yifuwang/symm-mem-recipes
pull request #3, all-reduce benchmark); under CUDA graphs, PyTorch's symmetric-memory all-reduce
9.0 us and NCCL 16.5-18.6 us at 2-4 KiB (SGLang pull request #10571). So a
serving all-reduce costs that latency plus its bytes over the link: one-shot ``(n - 1) B / bw``,
two-shot ``2 (n - 1) / n B / bw`` and a second synchronisation; NCCL's ring and tree (which
``allreduce_s`` prices for training) no faster than the same floor. Training rows keep
``allreduce_s``: their messages are megabytes, where the latency does not show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from partitioner.cluster.hardware import Cluster, Link
from partitioner.cluster.layout_types import Layout, Workload
from partitioner.cluster.model_profile import ModelProfile
from partitioner.cluster.rules import _params, stage_layers, stage_share
from partitioner.cost.training import state_bytes
from partitioner.pipeline.schedules import virtual_stages

__all__ = [
    "Collective",
    "ring_allreduce_s",
    "allreduce_s",
    "all_to_all_s",
    "serving_allreduce_s",
    "SERVING_ALLREDUCE_LATENCY_S",
]

# vLLM's custom all-reduce on H100s, smallest message, by ranks (NOTE: [Serving all-reduce])
SERVING_ALLREDUCE_LATENCY_S = {2: 9.5e-6, 4: 9.1e-6, 8: 10.1e-6}


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
    options = [
        (ring_allreduce_s(nbytes, n, bandwidth, latency), "ring"),
        (2 * nbytes / bandwidth + 2 * steps * latency, "tree"),
    ]
    if one_shot:
        options.append(((n - 1) * nbytes / bandwidth + latency, "one-shot"))
    return min(options)


def all_to_all_s(nbytes: float, n: int, bandwidth: float, latency: float) -> float:
    """An all-to-all of ``nbytes`` a device over ``n`` devices: (n - 1) / n of them leave, n - 1
    messages (the pairwise exchange NCCL and gloo run)."""
    if n <= 1:
        return 0.0
    return (n - 1) / n * nbytes / bandwidth + (n - 1) * latency


def _tp_allreduce(c: Cluster, nbytes: float, n: int) -> tuple[float, str]:
    return allreduce_s(nbytes, n, c.intra.bandwidth_bytes_per_s, c.intra.latency_s, one_shot=True)


def serving_allreduce_s(nbytes: float, n: int, bandwidth: float, latency: float) -> tuple[float, str]:
    """(seconds, algorithm) of a serving engine's all-reduce of ``nbytes`` over ``n`` ranks of a
    node (NOTE: [Serving all-reduce]): the fastest of the custom one-shot and two-shot kernels and
    NCCL, none below the custom kernel's measured latency at ``n`` ranks (the nearest measured
    count at or above it, 8's beyond). O(1)."""
    if n <= 1:
        return 0.0, "none"
    floor = next((s for k, s in sorted(SERVING_ALLREDUCE_LATENCY_S.items()) if k >= n), SERVING_ALLREDUCE_LATENCY_S[8])
    nccl, algorithm = allreduce_s(nbytes, n, bandwidth, latency)
    options = [
        (floor + (n - 1) * nbytes / bandwidth, "one-shot custom"),
        (2 * floor + 2 * (n - 1) / n * nbytes / bandwidth, "two-shot custom"),
        (max(floor, nccl), f"NCCL {algorithm}"),
    ]
    return min(options)


def _serving_tp_allreduce(c: Cluster, nbytes: float, n: int) -> tuple[float, str]:
    return serving_allreduce_s(nbytes, n, c.intra.bandwidth_bytes_per_s, c.intra.latency_s)


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
    per_layer = 2 * all_to_all_s(
        hidden_bytes * max(1, p.experts_per_token), lay.ep, link.bandwidth_bytes_per_s, link.latency_s
    )
    return p.moe_layers * per_layer


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


def _link_spanning(c: Cluster, devices: int) -> Link:
    """The link a group of ``devices`` consecutive ranks talks over: the node's own when it fits
    in one node, else the network between nodes."""
    return c.intra if devices <= c.devices_per_node else c.inter


@dataclass(frozen=True)
class _Microbatches:
    """A training step's microbatches on one replica as the model-parallel groups see them:
    ``count`` of them, each ``tokens`` tokens on a device (a context-parallel rank holds 1/cp of
    every sequence) whose hidden state is ``hidden_bytes``."""

    count: int
    tokens: float
    hidden_bytes: float

    @classmethod
    def of(cls, p: ModelProfile, w: Workload, lay: Layout, scale: float) -> "_Microbatches":
        per_replica = w.global_batch // lay.dp
        tokens = lay.microbatch_size * w.seq_len / lay.cp
        return cls(per_replica // lay.microbatch_size, tokens, p.hidden_bytes_per_token * scale * tokens)


def _tensor_parallel_row(p: ModelProfile, c: Cluster, lay: Layout, mb: _Microbatches) -> Collective | None:
    """Each microbatch, each layer of the stage: 2 all-reduces in the forward, 2 in the backward."""
    if lay.tp <= 1:
        return None
    seconds, algorithm = _tp_allreduce(c, mb.hidden_bytes, lay.tp)
    return Collective(
        name=f"all-reduce of the hidden state ({algorithm})",
        group="tp",
        ranks=lay.tp,
        link=c.intra.name,
        count=mb.count * 4 * stage_layers(p, lay),
        bytes_each=mb.hidden_bytes,
        seconds_each=seconds,
        phase="forward + backward",
    )


def _pipeline_row(c: Cluster, lay: Layout, mb: _Microbatches) -> Collective | None:
    """Each microbatch's hidden state goes forward to the next stage and its gradient back."""
    if lay.pp <= 1:
        return None
    link = _link_spanning(c, lay.tp * lay.pp * lay.cp)
    return Collective(
        name="send of the hidden state and its gradient",
        group="pp",
        ranks=2,
        link=link.name,
        count=mb.count * 2 * virtual_stages(lay.schedule, lay.virtual),  # at each of a rank's chunks
        bytes_each=mb.hidden_bytes,
        seconds_each=mb.hidden_bytes / link.bandwidth_bytes_per_s + link.latency_s,
        phase="forward + backward",
    )


def _context_row(p: ModelProfile, c: Cluster, lay: Layout, mb: _Microbatches, scale: float) -> Collective | None:
    """Ring attention's exchange of a stage's keys and values: once in the forward, and their
    gradients twice in the backward (priced by :func:`_context_exchange_s`)."""
    if lay.cp <= 1 or not p.kv_bytes_per_token:
        return None
    link = _link_spanning(c, lay.tp * lay.cp)
    return Collective(
        name="ring exchange of keys and values (backward: their gradients, twice)",
        group="cp",
        ranks=lay.cp,
        link=link.name,
        count=mb.count * 3,
        bytes_each=p.kv_bytes_per_token * scale * mb.tokens * lay.cp / lay.tp * stage_share(p, lay),
        seconds_each=_context_exchange_s(p, c, lay, mb.tokens * lay.cp * scale) * stage_share(p, lay),
        phase="forward + backward",
    )


def _expert_row(p: ModelProfile, c: Cluster, lay: Layout, mb: _Microbatches) -> Collective | None:
    """In each MoE layer of the stage, each way: an all-to-all sends a device's tokens (one copy
    for each of its top-k experts) to the experts and another brings them back."""
    if lay.ep <= 1 or not p.moe_layers:
        return None
    link = _link_spanning(c, lay.tp * lay.ep)
    sent = mb.hidden_bytes / lay.tp * max(1, p.experts_per_token)
    return Collective(
        name="all-to-all of tokens to their experts and back",
        group="ep",
        ranks=lay.ep,
        link=link.name,
        count=mb.count * 2 * 2 * p.moe_layers * stage_share(p, lay),
        bytes_each=sent,
        seconds_each=all_to_all_s(sent, lay.ep, link.bandwidth_bytes_per_s, link.latency_s),
        phase="forward + backward",
    )


def _data_parallel_rows(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> list[Collective]:
    """The gradient reduction over the data-parallel (dp x cp) ranks, once a step: a ring
    all-reduce (ZeRO 0-2), or ZeRO-3's reduce-scatter and its two all-gathers of the weights; with
    HSDP (``lay.shard``) a reduce-scatter and the all-gathers inside the sharding group, and an
    all-reduce of each shard across the replicas (FSDP2's HSDP; DeepSpeed's ZeRO++ hpZ)."""
    dense, expert = _params(p, lay)
    grad_bytes = state_bytes(w.optimizer, w.element_bytes).gradients
    group = lay.dp * lay.cp
    link = _link_spanning(c, lay.tp * group)
    rows: list[Collective] = []
    for what, psi, ranks in (("gradients", dense, group), ("expert gradients", expert, group // lay.ep)):
        nbytes = psi * grad_bytes
        if ranks <= 1 or nbytes <= 0:
            continue
        shard = min(lay.shard, ranks) if lay.shard else ranks
        if shard < ranks:
            rows += _hsdp_rows(c, lay, what, nbytes, ranks, shard, link)
        else:
            rows += _whole_group_rows(lay, what, nbytes, ranks, link)
    return rows


def _once_a_step(name: str, ranks: int, link: Link, count: float, nbytes: float, seconds: float) -> Collective:
    """A data-parallel collective run once a step, overlapped with the last microbatch's backward."""
    return Collective(name, "dp", ranks, link.name, count, nbytes, seconds, "once a step", "last microbatch's backward")


def _hsdp_rows(
    c: Cluster, lay: Layout, what: str, nbytes: float, ranks: int, shard: int, link: Link
) -> list[Collective]:
    """HSDP's rows for ``nbytes`` of ``what`` over ``ranks`` ranks sharded over groups of
    ``shard``: a reduce-scatter and the all-gathers of the weights inside the sharding group (on
    the node's link when it fits in one), an all-reduce of each shard across the replicas on
    ``link``."""
    inner = _link_spanning(c, lay.tp * shard)
    half = ring_allreduce_s(nbytes, shard, inner.bandwidth_bytes_per_s, inner.latency_s) / 2
    across = ring_allreduce_s(nbytes / shard, ranks // shard, link.bandwidth_bytes_per_s, link.latency_s)
    weights = what.replace("gradients", "weights")
    gathers = " (forward, backward)" if lay.zero == 3 else ""
    return [
        _once_a_step(f"reduce-scatter of the {what} in the shard group", shard, inner, 1, nbytes, half),
        _once_a_step(
            f"all-reduce of each {what.removesuffix('s')} shard across replicas",
            ranks // shard,
            link,
            1,
            nbytes / shard,
            across,
        ),
        _once_a_step(
            f"all-gather of the {weights} in the shard group{gathers}",
            shard,
            inner,
            2 if lay.zero == 3 else 1,
            nbytes,
            half,
        ),
    ]


def _whole_group_rows(lay: Layout, what: str, nbytes: float, ranks: int, link: Link) -> list[Collective]:
    """The rows for ``nbytes`` of ``what`` over all ``ranks`` ranks on ``link``: ZeRO-3's
    reduce-scatter of the gradients and its all-gather of the weights each way, else one ring
    all-reduce (ZeRO 1-2 as a reduce-scatter and an all-gather of the same bytes)."""
    ring = ring_allreduce_s(nbytes, ranks, link.bandwidth_bytes_per_s, link.latency_s)
    if lay.zero == 3:
        weights = what.replace("gradients", "weights")
        return [
            _once_a_step(f"reduce-scatter of the {what}", ranks, link, 1, nbytes, ring / 2),
            _once_a_step(f"all-gather of the {weights} (forward, backward)", ranks, link, 2, nbytes, ring / 2),
        ]
    zero = f" (ZeRO-{lay.zero}: reduce-scatter + all-gather)" if lay.zero else ""
    return [_once_a_step(f"all-reduce of the {what}{zero}", ranks, link, 1, nbytes, ring)]
