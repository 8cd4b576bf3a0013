"""Serving a model: the prefill of a batch of prompts in chunks, then each generated token
(decode), on a layout's tensor- and pipeline-parallel group, as vLLM, SGLang and TensorRT-LLM
serve it (CUDA graphs and fused kernels, chunked prefill, a paged KV cache). Torch-free.

Sources: vLLM's engine defaults (NOTE: [Serving engine defaults] in
:mod:`partitioner.cluster.hardware`); chunked prefill as Sarathi-Serve (Agrawal et al. 2024) and
vLLM run it; PagedAttention (Kwon et al. 2023); the serving all-reduce's measured latency (NOTE:
[Serving all-reduce] in :mod:`partitioner.cluster.comms`).

# NOTE: [Serving engine]
A serving answer prices what the serving engines run: CUDA graphs for decode and fused kernels
(the "graphs" engine, NOTE: [Engines] in :mod:`partitioner.kernels`), unless a person named the
engine (``h100-80gb@eager``: :attr:`Accelerator.engine_chosen`). Training keeps the engine given.

# NOTE: [Chunked prefill]
The engines prefill ``max_num_batched_tokens`` tokens a forward pass (8,192 on an H100 or H200),
the batch's prompts one after another cut into such chunks: a pass's activations are a chunk's,
not the batch's, and each pass reads the weights again. A pass costs the forward of its tokens in
sequences of the prompt's length (its attention against what came before; summed over a prompt's
chunks, the causal attention of the whole prompt). With pp stages the chunks pipeline: (chunks +
pp - 1) stage times. A request's first token comes when its prompt's last chunk is done (first
come, first served): the time to first token is the mean of that over the batch, the whole
prefill the last request's.

# NOTE: [What bounds a token]
A decoded token's time is split into parts that add up to it: the host's launches (eager only:
the eager forward less the same forward fused under CUDA graphs), the weights' read and the
arithmetic (the fused forward, at least the weights' read, shared between the two in proportion to
their floors: bytes / bandwidth and FLOPs / the dtype's peak), the KV cache's read and the
tensor- and pipeline-parallel messages. The label names the largest part.

# NOTE: [Experts read in decode]
A mixture of experts reads only the experts its tokens route to: with top-k of E and T tokens
routed at random, E (1 - (1 - k / E)^T) experts a layer (k at one token, all E once the batch is
large). Decoding reads the dense weights, those experts and the KV cache each token: a floor under
the step beside the arithmetic (Mixtral-8x7B at one sequence: 12.9B of 46.7B parameters).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from partitioner.cluster.comms import _serving_tp_allreduce
from partitioner.cluster.engine import COLLECTIVE_SPREAD, KERNEL_SPREAD, host_per_op_range_s
from partitioner.cluster.hardware import (
    KV_BLOCK_TOKENS,
    Accelerator,
    Cluster,
    serving_chunk_tokens,
)
from partitioner.cluster.layout_types import Layout, LayoutResult, Workload
from partitioner.cluster.model_profile import ModelProfile
from partitioner.cluster.rules import _params
from partitioner.cost.training import StateBytes, state_bytes

__all__ = ["serve", "experts_touched", "serving_accelerator", "prefill_chunks", "TOKEN_PARTS", "SERVING_ENGINE"]

SERVING_ENGINE = "graphs"  # NOTE: [Serving engine]
# The parts of a decoded token (NOTE: [What bounds a token]), each ``f"{name} per token"`` in parts_s.
TOKEN_PARTS = ("launch", "weights", "KV cache", "arithmetic", "communication")
ACTIVATION_BYTES = 2  # activations between the products stay bf16 in FP8 serving (vLLM's fp8 quantisation)


def serving_accelerator(acc: Accelerator) -> Accelerator:
    """``acc`` under the engine a serving answer assumes (NOTE: [Serving engine]): the one a person
    named, else the serving engines' (CUDA graphs and fused kernels)."""
    if acc.engine_chosen or acc.engine == SERVING_ENGINE:
        return acc
    return dataclasses.replace(acc, engine=SERVING_ENGINE)


def prefill_chunks(tokens: float, chunk: int) -> list[tuple[float, int]]:
    """(tokens a pass, passes) that prefill ``tokens`` tokens in passes of at most ``chunk``
    (NOTE: [Chunked prefill]): the full chunks, then what is left. O(1)."""
    full, rest = divmod(max(1.0, tokens), chunk)
    out = [(float(chunk), int(full))] if full else []
    return out + ([(rest, 1)] if rest else [])


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


def _first_token_mean_s(batch: int, seq: int, chunk: int, stage_s: float, pp: int) -> float:
    """The mean over ``batch`` prompts of ``seq`` tokens, prefilled first come first served in
    passes of ``chunk`` through ``pp`` stages of ``stage_s`` each, of the time their last chunk is
    done (NOTE: [Chunked prefill]). O(batch)."""
    passes = sum(math.ceil((i + 1) * seq / chunk) for i in range(batch))
    return (passes / batch + pp - 1) * stage_s


@dataclass(frozen=True)
class _Serving:
    """One serving question on the serving engine's accelerator (NOTE: [Serving engine]), with
    the prices its prefill and its decoded tokens share."""

    p: ModelProfile
    w: Workload
    c: Cluster
    lay: Layout
    acc: Accelerator

    @property
    def batch(self) -> float:
        """The sequences a replica serves."""
        return self.w.global_batch / self.lay.dp

    @property
    def scale(self) -> float:
        """The profile's bytes at the workload's precision (weights, KV cache)."""
        return self.w.element_bytes / self.p.element_bytes

    @property
    def act_scale(self) -> float:
        """The profile's activation bytes at the workload's precision (at least bf16)."""
        return max(self.w.element_bytes, ACTIVATION_BYTES) / self.p.element_bytes

    def comm(self, tokens: float) -> float:
        """The tensor-parallel all-reduces (twice a layer) and pipeline sends of ``tokens``' hidden states."""
        p, c, lay = self.p, self.c, self.lay
        link = c.intra if lay.tp * lay.pp <= c.devices_per_node else c.inter
        hidden = p.hidden_bytes_per_token * self.act_scale * tokens
        tp = 2 * p.layers * _serving_tp_allreduce(c, hidden, lay.tp)[0]
        return tp + (lay.pp - 1) * (hidden / link.bandwidth_bytes_per_s + link.latency_s)

    def weight_floor(self, tokens: float) -> float:
        """Reading the weights a step touches: the dense ones and the experts its tokens route to
        (NOTE: [Experts read in decode]), on one device of tp x pp."""
        p = self.p
        dense, expert = float(p.param_count - p.expert_param_count), float(p.expert_param_count)
        if p.experts:
            expert *= experts_touched(p.experts, p.experts_per_token, tokens) / p.experts
        lay, bw = self.lay, self.acc.memory_bandwidth_bytes_per_s
        return (dense + expert) * self.w.element_bytes / (lay.tp * lay.pp) / bw

    def prefill_pass(self, tokens: float) -> float:
        """One prefill pass of ``tokens`` tokens: its forward, at least the weights' read, and its messages."""
        fwd = self.p.forward_seconds(tokens, self.w.seq_len, self.acc, self.lay.tp, element_bytes=self.w.element_bytes)
        return max(fwd, self.weight_floor(tokens)) + self.comm(tokens)


@dataclass(frozen=True)
class _Prefill:
    """The chunked prefill (NOTE: [Chunked prefill]): its passes as (tokens a pass, passes), their
    compute, a pass's mean time, the whole prefill's and the mean time to the first token."""

    chunk: int
    passes: list[tuple[float, int]]
    compute_s: float
    pass_s: float
    prefill_s: float
    first_token_s: float

    @property
    def count(self) -> int:
        return sum(n for _, n in self.passes)


@dataclass(frozen=True)
class _Token:
    """A decoded token (NOTE: [What bounds a token]): its parts by :data:`TOKEN_PARTS`, the forward's
    FLOPs and the floors of its weights' read and arithmetic, its KV cache's read."""

    parts: dict[str, float]
    flops: float
    weights_floor_s: float
    arithmetic_floor_s: float
    kv_read_s: float


def serve(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> LayoutResult:
    """Memory and time of serving ``w`` on ``lay`` as the serving engines serve it: the chunked
    prefill's time to the first token, then each generated token (NOTEs above). O(batch) beside
    the profile's cached forward times."""
    s = _Serving(p, w, c, lay, serving_accelerator(c.accelerator))
    chunk = serving_chunk_tokens(s.acc)
    mem, kv_per_sequence = _serving_memory(s, chunk)
    pre = _prefill(s, chunk)
    token = _decoded_token(s)
    per_token = sum(token.parts.values())
    fits = sum(mem.values()) <= s.acc.memory_bytes
    limit = "memory" if not fits else max(TOKEN_PARTS, key=lambda k: token.parts[k])
    parts = {"prefill compute": pre.compute_s, **{f"{k} per token": v for k, v in token.parts.items()}}
    generated = w.global_batch * max(1, w.generate_tokens)
    run_s = pre.prefill_s + w.generate_tokens * per_token
    tps = w.global_batch / per_token
    mfu = token.flops / (per_token * lay.tp * lay.pp * s.acc.peak_flops)
    cost = s.acc.price_per_hour * lay.devices / 3600 * run_s / generated * 1e6
    extra = _serving_figures(s, mem, kv_per_sequence, pre, token, per_token)
    extra.update(_token_band(s.acc, token.parts, per_token))
    band = _first_token_band(s, pre)
    return LayoutResult(
        lay,
        fits,
        mem,
        pre.first_token_s,
        parts,
        limit,
        mfu,
        tps,
        cost,
        1,
        extra,
        band_s=band,
        assumes=_assumes(s.acc, c, lay, w, chunk),
    )


def _serving_memory(s: _Serving, chunk: int) -> tuple[dict[str, float], float]:
    """(a device's memory by kind, a sequence's KV cache on a device): the weights, the KV cache
    in paged blocks, a prefill pass's activations of one layer, the headroom."""
    p, w, c, lay = s.p, s.w, s.c, s.lay
    context = w.seq_len + w.generate_tokens
    pass_tokens = min(float(chunk), s.batch * w.seq_len)
    mem = _weights(p, lay, w)
    blocks = math.ceil(context / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS  # a sequence's paged blocks
    kv_per_sequence = p.kv_bytes_per_token * s.scale * blocks / lay.tp / lay.pp
    mem["kv_cache"] = kv_per_sequence * s.batch
    mem["activations"] = p.act_bytes_per_token * s.act_scale * pass_tokens / lay.tp / max(1, p.layers)
    # the engine takes c.memory_utilization of the card; the rest is the CUDA context's and others'
    mem["headroom"] = max(float(c.headroom_bytes), (1 - c.memory_utilization) * s.acc.memory_bytes)
    return mem, kv_per_sequence


def _prefill(s: _Serving, chunk: int) -> _Prefill:
    """The batch's prompts prefilled in passes of ``chunk`` tokens, pipelined over the stages
    (NOTE: [Chunked prefill])."""
    passes = prefill_chunks(s.batch * s.w.seq_len, chunk)
    compute = sum(n * s.prefill_pass(t) for t, n in passes)
    pass_s = compute / sum(n for _, n in passes)
    stage = pass_s / s.lay.pp
    prefill_s = (sum(n for _, n in passes) + s.lay.pp - 1) * stage
    sequences = max(1, round(s.batch))
    first = _first_token_mean_s(sequences, s.w.seq_len, chunk, stage, s.lay.pp)
    return _Prefill(chunk, passes, compute, pass_s, prefill_s, first)


def _decoded_token(s: _Serving) -> _Token:
    """One generated token at the middle of the generation's context, split into its parts
    (NOTE: [What bounds a token])."""
    p, w, lay, acc = s.p, s.w, s.lay, s.acc
    elem = w.element_bytes
    mid = w.seq_len + w.generate_tokens // 2
    kv_read = p.kv_bytes_per_token * s.scale * s.batch * mid / lay.tp / acc.memory_bandwidth_bytes_per_s
    decode = p.forward_seconds(s.batch, mid, acc, lay.tp, decode=True, element_bytes=elem)
    fused_acc = dataclasses.replace(acc, engine=SERVING_ENGINE)
    fused = (
        decode
        if acc.engine == SERVING_ENGINE
        else p.forward_seconds(s.batch, mid, fused_acc, lay.tp, decode=True, element_bytes=elem)
    )
    flops = p.forward_flops(s.batch, mid)
    arithmetic_floor = flops / (lay.tp * lay.pp * acc.peak_for(w.dtype))
    weights_floor = s.weight_floor(s.batch)
    kernels = max(fused, weights_floor)  # NOTE: [What bounds a token]
    weights_share = weights_floor / (weights_floor + arithmetic_floor) if weights_floor + arithmetic_floor else 1.0
    parts = {
        "launch": max(0.0, decode - fused),
        "weights": kernels * weights_share,
        "KV cache": kv_read,
        "arithmetic": kernels * (1 - weights_share),
        "communication": s.comm(s.batch),
    }
    return _Token(parts, flops, weights_floor, arithmetic_floor, kv_read)


def _serving_figures(
    s: _Serving, mem: dict[str, float], kv_per_sequence: float, pre: _Prefill, token: _Token, per_token: float
) -> dict[str, float]:
    """The serving answer's figures beside its step: the prefill, the token rates, the KV cache's
    room and the floors."""
    p, w, c, lay, acc = s.p, s.w, s.c, s.lay, s.acc
    engine_room = c.memory_utilization * acc.memory_bytes - mem["weights"] - mem["activations"]
    prompt_tokens = s.batch * w.seq_len
    return {
        "time_to_first_token_s": pre.first_token_s,
        "prefill_s": pre.prefill_s,
        "prefill_chunk_tokens": float(pre.chunk),
        "prefill_passes": float(pre.count),
        "seconds_per_token": per_token,
        "tokens_per_s_per_sequence": 1 / per_token,
        "tokens_per_s_per_device": w.global_batch / per_token / lay.devices,
        "kv_cache_bytes_per_token": p.kv_bytes_per_token * s.scale,
        "kv_cache_sequences": max(0.0, engine_room) / kv_per_sequence if kv_per_sequence else math.inf,
        "weights_read_s_per_token": token.weights_floor_s,
        "kv_read_s_per_token": token.kv_read_s,
        "compute_floor_s_per_token": token.arithmetic_floor_s,
        "prefill_compute_floor_s": p.forward_flops(prompt_tokens, w.seq_len)
        / (lay.tp * lay.pp * acc.peak_for(w.dtype)),
    }


def _token_band(acc: Accelerator, token: dict[str, float], per_token: float) -> dict[str, float]:
    """A decoded token's low and high seconds (NOTE: [Bands] in :mod:`partitioner.cluster.engine`):
    kernels -3/+5 %, collectives -10/+30 %, the host's launches (eager) over its measured 6-17 us
    an op."""
    fast, slow = host_per_op_range_s(acc.kernels) if acc.kernels is not None else (1.0, 1.0)
    host = acc.kernels.host_per_op_s if acc.kernels is not None else 1.0
    launch_low, launch_high = token["launch"] * fast / host, token["launch"] * slow / host
    on_gpu = token["weights"] + token["KV cache"] + token["arithmetic"]
    return {
        "seconds_per_token_low": min(
            per_token, launch_low + on_gpu * KERNEL_SPREAD[0] + token["communication"] * COLLECTIVE_SPREAD[0]
        ),
        "seconds_per_token_high": max(
            per_token, launch_high + on_gpu * KERNEL_SPREAD[1] + token["communication"] * COLLECTIVE_SPREAD[1]
        ),
    }


def _first_token_band(s: _Serving, pre: _Prefill) -> tuple[float, float]:
    """The time to the first token's band: the kernels' spread on a pass's compute, the
    collectives' on its messages (their share of the first pass)."""
    prefill_comm = s.comm(pre.passes[0][0]) / pre.pass_s if pre.pass_s else 0.0
    ttft = pre.first_token_s
    return (
        ttft * (KERNEL_SPREAD[0] * (1 - prefill_comm) + COLLECTIVE_SPREAD[0] * prefill_comm),
        ttft * (KERNEL_SPREAD[1] * (1 - prefill_comm) + COLLECTIVE_SPREAD[1] * prefill_comm),
    )


def _assumes(acc: Accelerator, c: Cluster, lay: Layout, w: Workload, chunk: int) -> tuple[str, ...]:
    """What a serving answer's times assume, in short phrases (NOTE: [Serving engine])."""
    if acc.kernels is None:
        engine = "engine: the roofline of the datasheet's peak FLOP/s and bandwidth (no kernel curves)"
    elif acc.engine == SERVING_ENGINE:
        chosen = "" if acc.engine_chosen else " (vLLM/SGLang/TensorRT-LLM's; name @eager for eager PyTorch)"
        engine = f"engine: CUDA graphs + fused kernels{chosen}"
    else:
        engine = f"engine: {acc.engine} (as named)"
    out = [
        engine,
        f"chunked prefill {chunk} tokens a pass (vLLM's max_num_batched_tokens on this card)",
        f"KV cache in blocks of {KV_BLOCK_TOKENS} tokens; the engine takes {c.memory_utilization:.0%} of memory",
    ]
    if lay.tp > 1:
        seconds, algorithm = _serving_tp_allreduce(c, 8192.0, lay.tp)
        out.append(f"TP all-reduce: {algorithm} on {c.intra.name}, {seconds * 1e6:.0f} us a small message")
    if w.element_bytes == 1:
        derived = acc.kernels is not None and any(d.startswith("float8") for d, _ in acc.kernels.derived_dtypes)
        out.append(
            "FP8: weights and KV cache at 1 byte"
            + (
                "; FP8 products at the datasheet's FP8/bf16 ratio x the bf16 curves (no FP8 curves measured)"
                if derived
                else ""
            )
        )
    if acc.kernels is not None:
        out.append(acc.kernels.derived_from or f"kernel curves measured on {acc.kernels.gpu}")
    return tuple(out)
