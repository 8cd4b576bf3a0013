"""The serving planner against the published record, row by row: what a serving engine's
maintainers printed for a model, card, precision, batch and input/output lengths beside what the
planner computes for the same setting, and their ratio.

Sources (their numbers are written below, never the planner's):
- NVIDIA, TensorRT-LLM ``docs/source/performance.md`` (the v0.6.1 peak-throughput tables and the
  v0.5 low-latency tables): H100 SXM 80GB, FP8 weights and FP8 KV cache (``--enable_fp8
  --fp8_kv_cache``), static batches (``gptSessionBenchmark``: the batch prefilled, then decoded
  together); output tokens a second a GPU, and the first token's latency at batch 1.
- SGLang pull request #1401 ("Support cuda graph in the triton attention backend", 2024-09-12):
  ``sglang.bench_latency`` of Meta-Llama-3-8B, batch 1, input 128, flashinfer with CUDA graphs:
  decode median latency 7.35 ms. The PR does not name its GPU (SGLang's maintainers benchmark on
  H100s): not a solid row.
- vLLM pull request #11000 ("[v1] fix use compile sizes", 2024-12-09): ``benchmark_latency.py`` of
  Meta-Llama-3-8B at batch 1 (its defaults: 32 input and 128 output tokens), V1 engine: 0.9447 s
  a request. The PR does not name its GPU: not a solid row.

Solid rows (card, precision, batch and lengths all stated) are held within 20 % by
``tests/cluster/test_serving_record.py``. Each model is traced at full depth on meta weights (the
tracer traces one repeated block and repeats it: seconds).

    .venv/bin/python bench/bench_serving_record.py
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from partitioner import cluster  # noqa: E402

# The checkpoints' configs (their config.json); Llama 2's from Meta's release.
MODELS = {
    "llama-2-7b": (
        "hf:llama",
        dict(
            hidden_size=4096,
            intermediate_size=11008,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=32,
            vocab_size=32000,
        ),
    ),
    "llama-2-70b": (
        "hf:llama",
        dict(
            hidden_size=8192,
            intermediate_size=28672,
            num_hidden_layers=80,
            num_attention_heads=64,
            num_key_value_heads=8,
            vocab_size=32000,
        ),
    ),
    "llama-3-8b": ("hf:llama-3-8b", {}),
}


@dataclass(frozen=True)
class Row:
    """One published serving figure: ``metric`` is "out tok/s/GPU" (a static batch: batch x output
    tokens over the prefill and the decode, a GPU), "first token s" (batch 1: the prefill), "decode
    s/token" or "request s" (batch 1: the prefill and every output token)."""

    source: str
    engine: str
    model: str
    card: str
    element_bytes: int  # 1: FP8 weights and KV cache; 2: bf16
    tp: int
    batch: int
    input_tokens: int
    output_tokens: int
    metric: str
    published: float
    solid: bool  # the card, precision, batch and lengths are all stated


TRT = "TensorRT-LLM docs/source/performance.md"
ROWS = (
    # v0.6.1 peak throughput, H100 FP8 (out tok/s/GPU)
    Row(TRT, "TensorRT-LLM 0.6.1", "llama-2-7b", "h100-80gb", 1, 1, 768, 128, 128, "out tok/s/GPU", 19694, True),
    Row(TRT, "TensorRT-LLM 0.6.1", "llama-2-7b", "h100-80gb", 1, 1, 112, 128, 2048, "out tok/s/GPU", 6818, True),
    Row(TRT, "TensorRT-LLM 0.6.1", "llama-2-7b", "h100-80gb", 1, 1, 80, 2048, 128, "out tok/s/GPU", 2244, True),
    Row(TRT, "TensorRT-LLM 0.6.1", "llama-2-7b", "h100-80gb", 1, 1, 48, 2048, 2048, "out tok/s/GPU", 2740, True),
    Row(TRT, "TensorRT-LLM 0.6.1", "llama-2-70b", "h100-80gb", 1, 2, 1024, 128, 128, "out tok/s/GPU", 2657, True),
    Row(TRT, "TensorRT-LLM 0.6.1", "llama-2-70b", "h100-80gb", 1, 4, 480, 128, 2048, "out tok/s/GPU", 1486, True),
    Row(TRT, "TensorRT-LLM 0.6.1", "llama-2-70b", "h100-80gb", 1, 2, 96, 2048, 128, "out tok/s/GPU", 306, True),
    Row(TRT, "TensorRT-LLM 0.6.1", "llama-2-70b", "h100-80gb", 1, 2, 64, 2048, 2048, "out tok/s/GPU", 547, True),
    # v0.5 low latency, H100 FP8: the first token at batch 1 (ms, written as s)
    Row(TRT, "TensorRT-LLM 0.5", "llama-2-7b", "h100-80gb", 1, 1, 1, 128, 1, "first token s", 0.007, True),
    Row(TRT, "TensorRT-LLM 0.5", "llama-2-7b", "h100-80gb", 1, 1, 1, 2048, 1, "first token s", 0.036, True),
    Row(TRT, "TensorRT-LLM 0.5", "llama-2-70b", "h100-80gb", 1, 4, 1, 128, 1, "first token s", 0.026, True),
    Row(TRT, "TensorRT-LLM 0.5", "llama-2-70b", "h100-80gb", 1, 4, 1, 2048, 1, "first token s", 0.109, True),
    # bf16 decode at batch 1 (the GPU unnamed in both)
    Row("SGLang PR #1401", "SGLang", "llama-3-8b", "h100-80gb", 2, 1, 1, 128, 8, "decode s/token", 0.00735, False),
    Row("vLLM PR #11000", "vLLM V1", "llama-3-8b", "h100-80gb", 2, 1, 1, 32, 128, "request s", 0.9447, False),
)


@functools.lru_cache(maxsize=None)
def model_profile(name: str) -> cluster.ModelProfile:
    """``name``'s profile, traced at full depth on meta weights (one block traced, repeated)."""
    spec, sizes = MODELS[name]
    module, inputs, kwargs = sample_models.load(spec, overrides={**sizes, "dtype": "bf16"})
    return cluster.profile(partitioner.trace(module, inputs, example_kwargs=kwargs), name=name)


def planned(row: Row) -> float:
    """The planner's figure for ``row``'s setting, in the row's metric."""
    w = cluster.Workload(
        "inference", row.batch, row.input_tokens, element_bytes=row.element_bytes, generate_tokens=row.output_tokens
    )
    r = cluster.evaluate(model_profile(row.model), w, cluster.cluster(row.card), cluster.Layout(tp=row.tp), None)
    x = r.extra
    if row.metric == "out tok/s/GPU":
        return row.batch * row.output_tokens / (x["prefill_s"] + row.output_tokens * x["seconds_per_token"]) / row.tp
    if row.metric == "first token s":
        return r.step_s
    if row.metric == "decode s/token":
        return x["seconds_per_token"]
    if row.metric == "request s":
        return x["prefill_s"] + row.output_tokens * x["seconds_per_token"]
    raise ValueError(f"unknown metric {row.metric!r}")


def table(rows: tuple[Row, ...] = ROWS) -> list[str]:
    head = f"{'source':<22} {'model':<12} {'card':<10} {'prec':<5} {'tp':>2} {'batch':>5} {'in/out':>10} "
    head += f"{'metric':<15} {'published':>10} {'planner':>10} {'ratio':>6} solid"
    out = [head, "-" * len(head)]
    for row in rows:
        got = planned(row)
        prec = "fp8" if row.element_bytes == 1 else "bf16"
        out.append(
            f"{row.source[:22]:<22} {row.model:<12} {row.card:<10} {prec:<5} {row.tp:>2} {row.batch:>5} "
            f"{f'{row.input_tokens}/{row.output_tokens}':>10} {row.metric:<15} {row.published:>10.4g} "
            f"{got:>10.4g} {got / row.published:>6.2f} {'yes' if row.solid else 'no'}"
        )
    return out


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    start = time.perf_counter()
    for line in table():
        print(line)
    print(f"\n{len(ROWS)} rows in {time.perf_counter() - start:.1f} s; ratio = planner / published")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
