"""Predicted against measured, end to end, with this machine's measured device profile.

For every sample model, on 2 and 4 local processes (gloo): the fx plan's run
(``partitioner.run``: its end-to-end latency, best of the timed walks), the pipeline's step
(forward, GPipe, one stage a process: the slowest rank's best step) and the tensor-parallel
forward (the suggested spec, the median of warm forwards on rank 0). The prediction of each is
the library's own with the devices typed as the profile (``partition-explorer calibrate``,
cached; measured first when none is). Prints the error (measured - predicted) / predicted and
the machine's load before and after; the target is within 25 %.

    .venv/bin/python bench/bench_predict.py [--models mlp,cnn] [--processes 2,4] [--refresh]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from partitioner import Device, pipeline  # noqa: E402
from partitioner.cost.runs import tp_forward  # noqa: E402
from partitioner.devices import with_profile  # noqa: E402
from partitioner.errors import PartitionError, RunError  # noqa: E402
from partitioner.pipeline.runner import run as run_pipeline  # noqa: E402
from partitioner.runtime.calibrate import local_profile  # noqa: E402
from partitioner.sharding import device_memory, tensor_parallel  # noqa: E402
from partitioner.sharding.tp_run import run_sharded  # noqa: E402
from partitioner.units import format_seconds  # noqa: E402

MODELS = ("mlp", "cnn", "transformer", "dlrm", "unet", "moe", "gpt2_small")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _row(model: str, kind: str, n: int, predicted: float, measured: float, note: str = "") -> tuple[str, float]:
    error = (measured - predicted) / predicted if predicted > 0 else float("inf")
    mark = "" if abs(error) <= 0.25 else "  *"
    print(f"{model:<12} {kind:<16} {n:>5} {format_seconds(predicted):>10} {format_seconds(measured):>10} "
          f"{error:>+8.1%}{mark} {note}", flush=True)
    return kind, error


def fx_plan(name: str, graph: partitioner.Graph, inputs: tuple, n: int, profile) -> tuple[str, float]:
    devices = with_profile(partitioner.parse_devices(f"{n}x{max(1, graph.total_size_bytes)}B"), profile)
    plan = partitioner.partition(graph, devices, mode="size_based", force_partition=True)
    result = partitioner.run(plan, graph, inputs, timeout_s=300, repeats=7)
    if not result.outputs_equal:
        raise RunError("outputs differ")
    return _row(name, "fx plan", n, result.predicted_latency_s, result.measured_latency_s,
                f"{len(plan.partitions)} partitions")


def pipe(name: str, graph: partitioner.Graph, inputs: tuple, n: int, profile) -> tuple[str, float]:
    batch = int(inputs[0].shape[0])
    m = max(k for k in (1, 2, 4, 8) if batch % k == 0 and k <= max(1, batch))
    devices = with_profile(partitioner.parse_devices(f"{n}x64GiB"), profile)
    pp = pipeline.plan(graph, devices, stages=n, microbatches=m, schedule="gpipe")
    result = run_pipeline(pp, graph, inputs, timeout_s=300, repeats=5)
    if not result.outputs_equal:
        raise RunError("outputs differ")
    return _row(name, "pipeline step", n, result.simulated_step_s, result.measured_step_s, f"{m} microbatches")


def tensor_parallel_forward(name: str, module, graph: partitioner.Graph, inputs: tuple, n: int,
                            profile) -> tuple[str, float]:
    whole = device_memory(graph, [Device(f"d{i}", 1, i) for i in range(n)], {})[0]
    devices = [Device(f"d{i}", int(whole * 0.8), i) for i in range(n)]
    spec = tensor_parallel.suggest(graph, devices, profile.link.bandwidth_bytes_per_s if profile.link else None)
    plan = tensor_parallel.tp_plan(graph, spec, n)
    predicted = tp_forward(graph, plan, profile)
    result = run_sharded(module, inputs, plan, timeout_s=300, repeats=7)
    if not result.outputs_equal:
        raise RunError("outputs differ")
    comm = predicted.total_s - predicted.part("compute")
    return _row(name, "tensor parallel", n, predicted.total_s, result.forward_s,
                f"{len(plan.styles)} modules sharded, {format_seconds(comm)} of collectives predicted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--processes", default="2,4")
    parser.add_argument("--kinds", default="fx,pipeline,tp")
    parser.add_argument("--refresh", action="store_true", help="measure the profile again before each model")
    args = parser.parse_args()
    print(f"load average before: {_load()} ({os.cpu_count()} cores)", flush=True)
    began = time.perf_counter()
    profile = local_profile(refresh=args.refresh)
    print(f"profile {profile.name!r} measured {profile.measured_at} at load {profile.load_average:g}; peak "
          f"{profile.peak_flops / 1e9:.1f} GFLOP/s, op overhead {format_seconds(profile.op_overhead_s)}, slowdown "
          + ", ".join(f"{k}: x{f:.2f}" for k, f in profile.slowdown), flush=True)
    print(f"\n{'model':<12} {'run':<16} {'procs':>5} {'predicted':>10} {'measured':>10} {'error':>8}")
    errors = []
    kinds = set(args.kinds.split(","))
    for k, name in enumerate(args.models.split(",")):
        if args.refresh and k:  # the machine's load moves: measure it again beside each model's runs
            profile = local_profile(refresh=True)
            print(f"  (profile measured again at load {profile.load_average:g})", flush=True)
        module, inputs, _ = sample_models.load(name)
        graph = partitioner.trace(module, inputs, name=name)
        for n in (int(x) for x in args.processes.split(",")):
            jobs = [("fx", lambda: fx_plan(name, graph, inputs, n, profile)),
                    ("pipeline", lambda: pipe(name, graph, inputs, n, profile)),
                    ("tp", lambda: tensor_parallel_forward(name, module, graph, inputs, n, profile))]
            for kind, job in jobs:
                if kind not in kinds:
                    continue
                try:
                    errors.append(job())
                except (PartitionError, RunError, ValueError) as exc:
                    print(f"{name:<12} {kind:<16} {n:>5} {'-':>10} {'-':>10} {'n/a':>8} {str(exc).splitlines()[0][:110]}",
                          flush=True)
    within = sum(1 for _, e in errors if abs(e) <= 0.25)
    print(f"\n{within} of {len(errors)} runs within 25 % (* marks the others); median |error| "
          f"{statistics.median(abs(e) for _, e in errors):.1%}" if errors else "\nno run completed")
    for kind in sorted({k for k, _ in errors}):
        es = [abs(e) for k, e in errors if k == kind]
        print(f"  {kind}: median |error| {statistics.median(es):.1%} over {len(es)} runs")
    print(f"load average after: {_load()}; {time.perf_counter() - began:.0f} s in all")


if __name__ == "__main__":
    main()
