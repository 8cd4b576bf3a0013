"""Sharding suggestions: time to suggest a spec that fits, and memory per device before and after.

On gpt2_small and a 48-layer transformer, over 2 and 4 devices each 80 % of what one device needs
unsharded: the suggestion time, the parameters sharded, each device's memory before and after,
and the collectives the spec adds per forward (and their time at 25 GB/s).

    .venv/bin/python bench/bench_shard.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from partitioner import Device, ShardingError, sharding
from partitioner.sharding import tensor_parallel
from partitioner.units import format_bytes, format_seconds


def main() -> None:
    for name, overrides in (("gpt2_small", {}), ("transformer", {"n_layer": 48})):
        module, inputs, _ = sample_models.load(name, overrides)
        graph = partitioner.trace(module, inputs)
        label = sample_models.label(name, overrides)
        for n in (2, 4):
            whole = sharding.device_memory(graph, [Device(f"d{i}", 1, i) for i in range(n)], {})[0]
            devices = [Device(f"d{i}", int(whole * 0.8), i) for i in range(n)]
            start = time.perf_counter()
            try:
                spec = tensor_parallel.suggest(graph, devices, 25e9)
            except ShardingError as exc:
                print(f"{label} on {n} devices: {exc} ({time.perf_counter() - start:.3f} s)")
                continue
            seconds = time.perf_counter() - start
            plan = tensor_parallel.tp_plan(graph, spec, n, 25e9)
            after = sharding.device_memory(graph, devices, plan.spec)
            print(
                f"{label} on {n} x {format_bytes(devices[0].memory_bytes)}: suggested in {seconds:.3f} s, "
                f"{sum(1 for v in plan.spec.values() if v.replace(',', '').strip('1'))} parameters sharded; "
                f"per device {format_bytes(whole)} -> {format_bytes(max(after.values()))}; "
                f"{plan.counts()} per forward, {format_seconds(plan.comm_time_s)}"
            )


if __name__ == "__main__":
    main()
