"""Predicted against measured: sample models run for real on 2-4 local processes (gloo).

For each model and plan, prints per partition the plan's predicted latency and the measured
compute time, first with the roofline estimate, then calibrated (the devices typed as this
machine's measured profile, ``partition-explorer calibrate``), and end to end. Ratios near 1 after calibration mean the cost model holds; what is
left is process overhead and transfers on loopback.

    .venv/bin/python bench/bench_run.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from partitioner.devices import with_profile
from partitioner.runtime.calibrate import local_profile
from partitioner.units import format_seconds

CASES = [("mlp", 2), ("mlp", 4), ("transformer", 3), ("cnn", 2)]


def main() -> None:
    print(f"{'model':<12} {'procs':>5} {'model':>10} {'partition':>9} {'predicted':>10} {'measured':>10} {'ratio':>7}")
    for name, count in CASES:
        module, inputs, _ = sample_models.load(name)
        graph = partitioner.trace(module, inputs, name=name)
        _, memory = sample_models.default_devices(name)
        devices = partitioner.parse_devices(
            f"{count}x{max(memory, graph.total_size_bytes // (count - 1) if count > 1 else memory)}B"
        )
        plan = partitioner.partition(
            graph, devices, mode="kl_based", transfer_rate_bytes_per_s=5e9, force_partition=True
        )
        calibrated = partitioner.evaluate_plan(
            graph,
            with_profile(devices, local_profile()),
            plan.node_to_partition(),
            plan.partition_to_devices(),
            mode=plan.mode,
        )
        for label, p in (("roofline", plan), ("calibrated", calibrated)):
            result = partitioner.run(p, graph, inputs, timeout_s=300)
            assert result.outputs_equal
            for part in result.partitions:
                print(
                    f"{name:<12} {result.world_size:>5} {label:>10} {'P' + str(part.id):>9} "
                    f"{format_seconds(part.predicted_s):>10} {format_seconds(part.compute_s):>10} {part.ratio:>6.2f}x"
                )
            ratio = result.measured_latency_s / result.predicted_latency_s
            print(
                f"{name:<12} {result.world_size:>5} {label:>10} {'end-to-end':>9} "
                f"{format_seconds(result.predicted_latency_s):>10} {format_seconds(result.measured_latency_s):>10} {ratio:>6.2f}x"
            )


if __name__ == "__main__":
    main()
