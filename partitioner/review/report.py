"""A review as the lines a person reads, the one wording the command line and the app share.
Torch-free."""

from __future__ import annotations

from partitioner.cluster.bands import duration_band, mfu_band, run_days, seconds_band, tokens_band
from partitioner.review.review import Review
from partitioner.units import format_bytes, format_seconds

__all__ = ["verdict", "memory_line", "speed_line", "dominant_line", "change_line", "FORMAT_NAMES", "MAX_LISTED"]

FORMAT_NAMES = {
    "torchtitan": "torchtitan job config (TOML)",
    "torchtitan-args": "torchtitan command line",
    "megatron": "Megatron-LM launch",
    "deepspeed": "DeepSpeed config (JSON)",
    "vllm": "vLLM serve command",
    "sglang": "SGLang launch_server command",
}
MAX_LISTED = 12  # names listed of the fields read and not priced; the rest counted


def verdict(rv: Review, accelerator: str) -> str:
    r = rv.result
    return (
        f"{r.layout.label()} on {r.devices} x {accelerator}: "
        + ("fits" if rv.fits else "does NOT fit")
        + f", {format_bytes(int(r.memory_bytes))} a GPU of its {format_bytes(int(rv.capacity_bytes))} (headroom included)"
    )


def memory_line(rv: Review) -> str:
    parts = ", ".join(f"{k.replace('_', ' ')} {format_bytes(int(v))}" for k, v in rv.result.memory.items() if v > 0)
    return f"memory a GPU: {parts}"


def speed_line(rv: Review) -> str:
    r, work = rv.result, rv.workload or rv.job.workload
    if work.kind == "inference":
        low, high = r.extra.get("seconds_per_token_low", 0.0), r.extra.get("seconds_per_token_high", 0.0)
        held = r.extra.get("kv_cache_sequences", 0.0)
        context = work.seq_len + work.generate_tokens
        return (
            f"first token {seconds_band(r.step_low_s, r.step_high_s)}; each generated token "
            f"{seconds_band(low, high)} at {work.global_batch} sequences; {tokens_band(*r.tokens_per_s_band)} "
            f"tokens/s generated (MFU {mfu_band(r)}); the KV cache holds {held:,.0f} sequences of {context:,} "
            "tokens a replica (vLLM's maximum concurrency)"
        )
    return (
        f"step {seconds_band(r.step_low_s, r.step_high_s)} (MFU {mfu_band(r)}, {tokens_band(*r.tokens_per_s_band)} "
        f"tokens/s); {work.train_tokens:.3g} tokens in {duration_band(*run_days(r, work.train_tokens))}"
    )


def dominant_line(rv: Review) -> str:
    """The three largest parts of the step (training) or of a generated token (serving)."""
    r = rv.result
    parts = r.parts_s
    if rv.job.workload.kind == "inference":  # a token's parts; the prefill is the first token's
        parts = {k.removesuffix(" per token"): v for k, v in parts.items() if k.endswith(" per token")}
    total = sum(parts.values())
    top = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
    shares = ", ".join(f"{k} {format_seconds(v)}" + (f" ({v / total:.0%})" if total else "") for k, v in top)
    return f"what dominates: {shares}; limited by {r.limit}"


def change_line(index: int, rv: Review, which: int) -> str:
    c = rv.changes[which]
    r = c.result
    speed = (
        f"{c.speedup:.2f}x the tokens/s ({tokens_band(*r.tokens_per_s_band)})"
        if rv.job.workload.kind == "inference"
        else f"{c.speedup:.2f}x the job's speed ({seconds_band(r.step_low_s, r.step_high_s)} a step, MFU {mfu_band(r)})"
    )
    return f"{index}. {r.layout.label()}: {speed}, {format_bytes(int(r.memory_bytes))} a GPU; {c.differs}"
