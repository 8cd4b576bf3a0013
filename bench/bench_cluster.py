"""Benchmark the cluster planner at real size: trace time, search time over 8 to 4,096 devices
(layouts per second), and the answers for training on H100 nodes of 8.

    .venv/bin/python bench/bench_cluster.py                       # Llama-3-8B, Llama-3-70B, Mixtral-8x7B
    .venv/bin/python bench/bench_cluster.py --models hf:llama-3-8b --seq-len 8192
"""

from __future__ import annotations

import argparse
import time

import partitioner
import sample_models
from partitioner import cluster
from partitioner.units import format_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["hf:llama-3-8b", "hf:llama-3-70b", "hf:mixtral-8x7b"])
    parser.add_argument("--global-batch", type=int, default=1024)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--max-nodes", type=int, default=512)
    args = parser.parse_args()
    target = cluster.cluster("h100-80gb", 8)
    work = cluster.Workload(global_batch=args.global_batch, seq_len=args.seq_len)
    sizes = cluster.device_counts(8, args.max_nodes, min_devices=8, max_devices=4096)
    print(f"training at {work.global_batch} x {work.seq_len} tokens on H100 nodes of 8, {sizes[0]} to {sizes[-1]} devices")
    header = f"{'model':<18}{'params':>9}{'trace':>8}{'search':>8}{'layouts/s':>11}  answer"
    print(header)
    print("-" * len(header))
    for spec in args.models:
        began = time.perf_counter()
        module, inputs, kwargs = sample_models.load(spec, overrides={"dtype": "bf16"})
        graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
        traced = time.perf_counter() - began
        prof = cluster.profile(graph, spec)
        found = cluster.search(prof, work, target, sizes)
        rate = found.evaluated / found.search_s if found.search_s else float("inf")
        lead = f"{spec:<18}{prof.param_count / 1e9:>8.1f}B{traced:>7.1f}s{found.search_s:>7.2f}s{rate:>11,.0f}"
        for title, r in (("fewest", found.fewest_devices), ("fastest", found.fastest), ("cheapest", found.cheapest)):
            if r is None:
                print(f"{lead}  no layout fits")
                break
            days = work.train_tokens / r.tokens_per_s / 86400
            print(f"{lead}  {title}: {r.devices} devices {r.layout.label()}, step {format_seconds(r.step_s)}, "
                  f"MFU {r.mfu:.0%}, {r.limit}; 1e12 tokens: {days:.1f} days, ${r.cost_per_million_tokens * 1e6:,.0f}")
            lead = " " * len(lead)


if __name__ == "__main__":
    main()
