"""Serving a model: the prefill of a batch of prompts, then each generated token (decode), on a
layout's tensor- and pipeline-parallel group. Torch-free.

# NOTE: [Experts read in decode]
A mixture of experts reads only the experts its tokens route to: with top-k of E and T tokens
routed at random, E (1 - (1 - k / E)^T) experts a layer (k at one token, all E once the batch is
large). Decoding reads the dense weights, those experts and the KV cache each token: a floor under
the step beside the arithmetic (Mixtral-8x7B at one sequence: 12.9B of 46.7B parameters).
"""

from __future__ import annotations

from partitioner.cluster.comms import _tp_allreduce
from partitioner.cluster.hardware import Cluster
from partitioner.cluster.layout_types import Layout, LayoutResult, Workload
from partitioner.cluster.profile import ModelProfile
from partitioner.cluster.rules import _params
from partitioner.cost.training import StateBytes, state_bytes

__all__ = ["serve", "experts_touched"]


def _weights(p: ModelProfile, lay: Layout, w: Workload) -> dict[str, float]:
    dense, expert = _params(p, lay)
    held: StateBytes = state_bytes(None, w.element_bytes)
    return {"weights": (dense + expert) * held.weights}


def experts_touched(experts: int, top_k: int, tokens: float) -> float:
    """Expected experts of one MoE layer that ``tokens`` tokens route to, each to ``top_k`` of
    ``experts`` at random: E (1 - (1 - k / E)^T); k at one token, all E once the batch is large."""
    if experts <= 0:
        return 0.0
    k = min(max(1, top_k), experts)
    return experts * (1.0 - (1.0 - k / experts) ** max(1.0, tokens))


def serve(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> LayoutResult:
    """Memory and time of serving ``w`` on ``lay``: the prefill's time to the first token, then
    each generated token."""
    acc = c.accelerator
    scale = w.element_bytes / p.element_bytes
    batch = w.global_batch / lay.dp
    context = w.seq_len + w.generate_tokens
    mem = _weights(p, lay, w)
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
        dense, expert = float(p.param_count - p.expert_param_count), float(p.expert_param_count)
        if p.experts:
            expert *= experts_touched(p.experts, p.experts_per_token, tokens) / p.experts
        return (dense + expert) * w.element_bytes / (lay.tp * lay.pp) / bw

    ttft_compute = max(
        p.forward_seconds(batch * w.seq_len, w.seq_len, acc, lay.tp, element_bytes=w.element_bytes),
        weight_floor(batch * w.seq_len),
    )
    ttft = ttft_compute + comm(batch * w.seq_len)
    mid = w.seq_len + w.generate_tokens // 2
    kv_read = p.kv_bytes_per_token * scale * batch * mid / lay.tp / bw
    decode = max(
        p.forward_seconds(batch, mid, acc, lay.tp, decode=True, element_bytes=w.element_bytes), weight_floor(batch)
    )
    per_token = decode + kv_read + comm(batch)
    fits = sum(mem.values()) <= acc.memory_bytes
    parts = {"prefill compute": ttft_compute, "decode per token": per_token, "communication per token": comm(batch)}
    generated = w.global_batch * max(1, w.generate_tokens)
    run_s = ttft + w.generate_tokens * per_token
    tps = w.global_batch / per_token
    flops = p.forward_flops(batch, mid)
    mfu = flops / (per_token * lay.tp * lay.pp * peak)
    cost = acc.price_per_hour * lay.devices / 3600 * run_s / generated * 1e6
    # What bounds a generated token: the weights and cache read, the arithmetic, or the messages.
    bounds = {
        "memory bandwidth": weight_floor(batch) + kv_read,
        "compute": flops / (lay.tp * lay.pp * peak),
        "communication": comm(batch),
    }
    limit = "memory" if not fits else max(bounds, key=lambda k: bounds[k])
    extra = {
        "time_to_first_token_s": ttft,
        "seconds_per_token": per_token,
        "tokens_per_s_per_sequence": 1 / per_token,
        "tokens_per_s_per_device": tps / lay.devices,
        "kv_cache_bytes_per_token": p.kv_bytes_per_token * scale,
        "weights_read_s_per_token": weight_floor(batch),
        "kv_read_s_per_token": kv_read,
        "compute_floor_s_per_token": flops / (lay.tp * lay.pp * peak),
        "prefill_compute_floor_s": p.forward_flops(batch * w.seq_len, w.seq_len) / (lay.tp * lay.pp * peak),
    }
    return LayoutResult(lay, fits, mem, ttft, parts, limit, mfu, tps, cost, 1, extra)
