"""Hugging Face presets at their real sizes: trace time and peak resident memory (meta weights),
then our plan against the device map Accelerate's ``infer_auto_device_map`` makes for the same
devices, both scored by our cost model (latency, memory per device). Each preset runs in a fresh
process, so its peak memory is its own. Usage:

    .venv/bin/python bench/bench_hf.py                       # every preset, bf16, 25 GB/s
    .venv/bin/python bench/bench_hf.py llama-3-8b gpt2-xl
"""

from __future__ import annotations

import json
import subprocess
import sys

from sample_models._hf import PRESETS

CHILD = r"""
import json, math, resource, sys, time
import partitioner, sample_models
from partitioner.interop.device_map import accelerate_plan
name = sys.argv[1]
began = time.perf_counter()
model, args, kwargs = sample_models.load("hf:" + name, {"dtype": "bf16"})
graph = partitioner.trace(model, args, example_kwargs=kwargs)
traced = time.perf_counter() - began
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
weights = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
count = max(2, math.ceil(graph.total_size_bytes / (40 * 2**30)))  # 40 GiB cards, 30 % headroom
devices = partitioner.parse_devices(f"{count}x{int(graph.total_size_bytes * 1.3 / count)}B")
out = {"name": name, "trace_s": traced, "peak_rss": rss, "ops": len(graph.op_indices),
       "graph_bytes": graph.total_size_bytes, "weights": weights, "devices": count}
for label, make in (("ours", lambda: partitioner.partition(graph, devices, mode="kl_based", transfer_rate_bytes_per_s=25e9)),
                    ("accelerate", lambda: accelerate_plan(model, graph, devices, transfer_rate_bytes_per_s=25e9))):
    t = time.perf_counter()
    try:
        plan = make()
    except partitioner.PartitionError as exc:
        out[label] = {"error": str(exc).splitlines()[0]}
        continue
    used = plan.device_memory_bytes()
    out[label] = {"latency_s": plan.latency_s, "partitions": len(plan.partitions), "seconds": time.perf_counter() - t,
                  "max_util": plan.memory_utilisation(), "used": sorted(used.values()),
                  "violations": len(plan.violations(graph))}
print(json.dumps(out))
"""


def main() -> None:
    names = sys.argv[1:] or list(PRESETS)
    print(
        f"{'preset':14s} {'ops':>6s} {'weights':>9s} {'trace s':>8s} {'peak RSS':>9s} {'dev':>4s}  "
        f"{'ours: latency, peak mem':>26s}  {'accelerate: latency, peak mem':>31s}"
    )
    for name in names:
        done = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True, timeout=900)
        if done.returncode:
            print(f"{name:14s} failed: {done.stderr.strip().splitlines()[-1][:150]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])

        def cell(d):
            if "error" in d:
                return d["error"][:40]
            bad = f" ({d['violations']} violations)" if d["violations"] else ""
            return f"{d['latency_s'] * 1e3:8.2f} ms {d['max_util']:6.1%}{bad}"

        print(
            f"{name:14s} {r['ops']:6d} {r['weights'] / 2**30:7.2f}Gi {r['trace_s']:8.1f} "
            f"{r['peak_rss'] / 2**20:7.0f}Mi {r['devices']:4d}  {cell(r['ours']):>26s}  {cell(r['accelerate']):>31s}"
        )


if __name__ == "__main__":
    main()
