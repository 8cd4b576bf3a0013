"""Benchmark the cluster planner at real size: trace time, search time over 8 to 4,096 devices
(layouts per second), and the answers for training on H100 nodes of 8.

Each model is loaded on meta weights in bf16 (``sample_models.load(spec, overrides={"dtype":
"bf16"})``), traced once, profiled, and searched at global batch 1024 x 4096 tokens; the table
gives the fewest devices that fit (with the fastest layout at that size), the fastest layout and
the cheapest, each with its step, MFU, what limits it, and the days and dollars of the
``--train-tokens`` run.

    .venv/bin/python bench/bench_cluster.py                       # Llama-3-8B, Llama-3-70B, Mixtral-8x7B
    .venv/bin/python bench/bench_cluster.py --models hf:llama-3-8b --seq-len 8192
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from partitioner import cluster  # noqa: E402
from partitioner.units import format_seconds  # noqa: E402

HEADER = (
    "model",
    "params",
    "trace",
    "search",
    "layouts",
    "fit",
    "layouts/s",
    "answer",
    "devices",
    "layout",
    "step",
    "MFU",
    "limit",
    "days",
    "cost",
)


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(HEADER, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["hf:llama-3-8b", "hf:llama-3-70b", "hf:mixtral-8x7b"])
    parser.add_argument("--global-batch", type=int, default=1024)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--train-tokens", type=float, default=1e12)
    parser.add_argument("--max-devices", type=int, default=4096)
    args = parser.parse_args()
    target = cluster.cluster("h100-80gb", 8)
    work = cluster.Workload(global_batch=args.global_batch, seq_len=args.seq_len, train_tokens=args.train_tokens)
    sizes = cluster.device_counts(8, args.max_devices // 8, min_devices=8, max_devices=args.max_devices)
    print(
        f"training at {work.global_batch} x {work.seq_len} tokens a step on H100 nodes of 8 "
        f"(${target.accelerator.price_per_hour:g} a device-hour), {sizes[0]} to {sizes[-1]} devices "
        f"({len(sizes)} sizes); days and cost of {work.train_tokens:.3g} tokens"
    )
    rows: list[tuple[str, ...]] = []
    for spec in args.models:
        began = time.perf_counter()
        module, inputs, kwargs = sample_models.load(spec, overrides={"dtype": "bf16"})
        graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
        traced = time.perf_counter() - began
        prof = cluster.profile(graph, spec)
        found = cluster.search(prof, work, target, sizes)
        rate = found.evaluated / found.search_s if found.search_s else float("inf")
        lead = (
            spec,
            f"{prof.param_count / 1e9:.1f} B",
            f"{traced:.1f} s",
            f"{found.search_s:.2f} s",
            f"{found.evaluated:,}",
            f"{len(found.fitting):,}",
            f"{rate:,.0f}",
        )
        if not found.fitting:
            rows.append((*lead, "no layout fits", *[""] * 7))
            continue
        for title, r in (("fewest", found.fewest_devices), ("fastest", found.fastest), ("cheapest", found.cheapest)):
            assert r is not None
            days = work.train_tokens / r.tokens_per_s / 86400
            rows.append(
                (
                    *lead,
                    title,
                    str(r.devices),
                    r.layout.label(),
                    format_seconds(r.step_s),
                    f"{r.mfu:.0%}",
                    r.limit,
                    f"{days:,.1f}",
                    f"${r.cost_per_million_tokens * work.train_tokens / 1e6:,.0f}",
                )
            )
            lead = ("",) * len(lead)
    print(_table(rows))


if __name__ == "__main__":
    main()
