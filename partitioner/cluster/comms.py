"""The communication a layout runs: all-reduces by NCCL's algorithms, all-to-alls, the context
ring, and the collectives table (NOTE: [All-reduce algorithms] in :mod:`partitioner.cluster.layouts`).
Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass

from partitioner.cluster.hardware import Cluster
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
                rows.append(
                    Collective(
                        f"all-reduce of the hidden state ({algorithm})",
                        "tp",
                        lay.tp,
                        intra.name,
                        2 * p.layers,
                        hidden,
                        seconds,
                        phase,
                    )
                )
            if lay.pp > 1:
                rows.append(
                    Collective(
                        "send of the hidden state to the next stage",
                        "pp",
                        2,
                        pipe_link.name,
                        lay.pp - 1,
                        hidden,
                        hidden / pipe_link.bandwidth_bytes_per_s + pipe_link.latency_s,
                        phase,
                    )
                )
        return rows
    per_replica = w.global_batch // lay.dp
    m = per_replica // lay.microbatch_size
    tokens_mb = lay.microbatch_size * w.seq_len / lay.cp
    hidden_mb = p.hidden_bytes_per_token * scale * tokens_mb
    layers_per_stage = p.layers / lay.pp
    if lay.tp > 1:  # each microbatch, each layer of the stage: 2 in the forward, 2 in the backward
        seconds, algorithm = _tp_allreduce(c, hidden_mb, lay.tp)
        rows.append(
            Collective(
                f"all-reduce of the hidden state ({algorithm})",
                "tp",
                lay.tp,
                intra.name,
                m * 4 * layers_per_stage,
                hidden_mb,
                seconds,
                "forward + backward",
            )
        )
    if lay.pp > 1:
        link = intra if lay.tp * lay.pp * lay.cp <= c.devices_per_node else inter
        rows.append(
            Collective(
                "send of the hidden state and its gradient",
                "pp",
                2,
                link.name,
                m * 2,
                hidden_mb,
                hidden_mb / link.bandwidth_bytes_per_s + link.latency_s,
                "forward + backward",
            )
        )
    if lay.cp > 1 and p.kv_bytes_per_token:
        link = intra if lay.tp * lay.cp <= c.devices_per_node else inter
        kv = p.kv_bytes_per_token * scale * tokens_mb * lay.cp / lay.tp / lay.pp
        rows.append(
            Collective(
                "ring exchange of keys and values (backward: their gradients, twice)",
                "cp",
                lay.cp,
                link.name,
                m * 3,
                kv,
                _context_exchange_s(p, c, lay, tokens_mb * lay.cp * scale) / lay.pp,
                "forward + backward",
            )
        )
    if lay.ep > 1 and p.moe_layers:
        link = intra if lay.tp * lay.ep <= c.devices_per_node else inter
        sent = hidden_mb / lay.tp * max(1, p.experts_per_token)
        rows.append(
            Collective(
                "all-to-all of tokens to their experts and back",
                "ep",
                lay.ep,
                link.name,
                m * 2 * 2 * p.moe_layers / lay.pp,
                sent,
                all_to_all_s(sent, lay.ep, link.bandwidth_bytes_per_s, link.latency_s),
                "forward + backward",
            )
        )
    return rows + _data_parallel_rows(p, w, c, lay)


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
