"""The communication a layout runs: all-reduces by NCCL's algorithms, all-to-alls, the context
ring, and the collectives table (NOTE: [All-reduce algorithms] in :mod:`partitioner.cluster.layouts`).
Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass

from partitioner.cluster.hardware import Cluster, Link
from partitioner.cluster.layout_types import Layout, Workload
from partitioner.cluster.profile import ModelProfile
from partitioner.cluster.rules import _params, check_layout
from partitioner.cost.training import state_bytes

__all__ = ["Collective", "collectives", "ring_allreduce_s", "allreduce_s", "all_to_all_s"]


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


def collectives(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> list[Collective]:
    """The communication :func:`evaluate` prices, one row a kind (NOTE: [Layout costs]): per step
    for training, in the tensor-parallel, pipeline, context, expert and data-parallel groups; for
    inference the prompt's prefill and each generated token. Rows sum to ``evaluate``'s parts (a
    test holds them equal); the counts are Megatron-LM's (Shoeybi et al. 2019, sec. 3: two
    all-reduces per layer in the forward and two in the backward), GShard's and the ZeRO paper's
    (sec. 7: ZeRO-3 moves 1.5 times data parallelism's bytes); each all-reduce names the algorithm
    that prices it (NOTE: [All-reduce algorithms])."""
    check_layout(p, lay)
    scale = w.element_bytes / p.element_bytes  # the profile's bytes at the workload's precision
    if w.kind == "inference":
        return _inference_rows(p, w, c, lay, scale)
    mb = _Microbatches.of(p, w, lay, scale)
    rows = [
        _tensor_parallel_row(p, c, lay, mb),
        _pipeline_row(c, lay, mb),
        _context_row(p, c, lay, mb, scale),
        _expert_row(p, c, lay, mb),
    ]
    return [row for row in rows if row is not None] + _data_parallel_rows(p, w, c, lay)


def _link_spanning(c: Cluster, devices: int) -> Link:
    """The link a group of ``devices`` consecutive ranks talks over: the node's own when it fits
    in one node, else the network between nodes."""
    return c.intra if devices <= c.devices_per_node else c.inter


def _inference_rows(p: ModelProfile, w: Workload, c: Cluster, lay: Layout, scale: float) -> list[Collective]:
    """Inference's rows: the prompt's prefill moves every prompt token's hidden state, each
    generated token one a sequence; tensor parallelism all-reduces it twice a layer and each
    pipeline stage but the last sends it on."""
    batch = w.global_batch / lay.dp
    pipe_link = _link_spanning(c, lay.tp * lay.pp)
    rows: list[Collective] = []
    for phase, tokens in (("prefill", batch * w.seq_len), ("each token", batch)):
        hidden = p.hidden_bytes_per_token * scale * tokens
        if lay.tp > 1:
            seconds, algorithm = _tp_allreduce(c, hidden, lay.tp)
            rows.append(
                Collective(
                    name=f"all-reduce of the hidden state ({algorithm})",
                    group="tp",
                    ranks=lay.tp,
                    link=c.intra.name,
                    count=2 * p.layers,
                    bytes_each=hidden,
                    seconds_each=seconds,
                    phase=phase,
                )
            )
        if lay.pp > 1:
            rows.append(
                Collective(
                    name="send of the hidden state to the next stage",
                    group="pp",
                    ranks=2,
                    link=pipe_link.name,
                    count=lay.pp - 1,
                    bytes_each=hidden,
                    seconds_each=hidden / pipe_link.bandwidth_bytes_per_s + pipe_link.latency_s,
                    phase=phase,
                )
            )
    return rows


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
        count=mb.count * 4 * (p.layers / lay.pp),
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
        count=mb.count * 2,
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
        bytes_each=p.kv_bytes_per_token * scale * mb.tokens * lay.cp / lay.tp / lay.pp,
        seconds_each=_context_exchange_s(p, c, lay, mb.tokens * lay.cp * scale) / lay.pp,
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
        count=mb.count * 2 * 2 * p.moe_layers / lay.pp,
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
            rows += [
                Collective(
                    f"reduce-scatter of the {what} in the shard group",
                    "dp",
                    shard,
                    inner.name,
                    1,
                    nbytes,
                    half,
                    "once a step",
                    overlap,
                ),
                Collective(
                    f"all-reduce of each {what.removesuffix('s')} shard across replicas",
                    "dp",
                    ranks // shard,
                    link.name,
                    1,
                    nbytes / shard,
                    across,
                    "once a step",
                    overlap,
                ),
                Collective(
                    f"all-gather of the {weights} in the shard group"
                    + (" (forward, backward)" if lay.zero == 3 else ""),
                    "dp",
                    shard,
                    inner.name,
                    2 if lay.zero == 3 else 1,
                    nbytes,
                    half,
                    "once a step",
                    overlap,
                ),
            ]
            continue
        ring = ring_allreduce_s(nbytes, ranks, link.bandwidth_bytes_per_s, link.latency_s)
        if lay.zero == 3:  # a reduce-scatter of the gradients, an all-gather of the weights each way
            rows.append(
                Collective(
                    f"reduce-scatter of the {what}", "dp", ranks, link.name, 1, nbytes, ring / 2, "once a step", overlap
                )
            )
            rows.append(
                Collective(
                    f"all-gather of the {what.replace('gradients', 'weights')} (forward, backward)",
                    "dp",
                    ranks,
                    link.name,
                    2,
                    nbytes,
                    ring / 2,
                    "once a step",
                    overlap,
                )
            )
        else:
            name = f"all-reduce of the {what}" + (
                f" (ZeRO-{lay.zero}: reduce-scatter + all-gather)" if lay.zero else ""
            )
            rows.append(Collective(name, "dp", ranks, link.name, 1, nbytes, ring, "once a step", overlap))
    return rows
