"""Predicted against measured, end to end, with this machine's measured device profile.

For every sample model, on 2 and 4 local processes (gloo): the fx plan's run
(``partitioner.run``: its end-to-end walk), the pipeline's step (forward, GPipe, one stage a
process: the slowest rank's step), the tensor-parallel forward (the suggested spec, rank 0's
forward) and composed training steps on 4 processes (dp2 x tp2 and pp2 x tp2,
:func:`partitioner.cluster.run.checked.check_layout`; models whose parameters are not Linear pairs are
refused and shown so). Every measured figure is the median of the timed repeats after a warm-up,
the statistic calibration uses. The prediction of each is the library's own with the devices
typed as this machine's profile, measured (``partition-explorer calibrate``) right before each
model's rows in this run: the machine is shared, and its load moves. Prints the error
(measured - predicted) / predicted, the 1-minute load after each row, and the load before and
after; the target is within 25 %.

    .venv/bin/python bench/bench_predict.py [--models mlp,cnn] [--processes 2,4] [--cached]
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
from partitioner.cluster.run.checked import check_layout  # noqa: E402
from partitioner.cluster.run.compose import parse_layout  # noqa: E402
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


PROBE_N = 128  # the probe is one point of the profile's matmul curve: a 128 x 128 Linear op
_probe: dict[str, float] = {}


def probe(profile) -> float:
    """How much slower this process runs the profile's own 128 x 128 Linear op now than the
    calibration measured it (a diagnostic of the machine's load moving between calibration and
    run; the predictions do not use it). Median of 5 loops of 50."""
    import statistics

    import torch

    x, w, b = torch.randn(PROBE_N, PROBE_N), torch.randn(PROBE_N, PROBE_N), torch.randn(PROBE_N)
    f = torch.nn.functional.linear
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the profile's ranks run
    try:
        for _ in range(20):
            f(x, w, b)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(50):
                f(x, w, b)
            times.append((time.perf_counter() - start) / 50)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times) / profile.matmul_seconds(2.0 * PROBE_N**3)


def _row(model: str, kind: str, n: int, predicted: float, measured: float, note: str = "") -> tuple[str, float, float]:
    error = (measured - predicted) / predicted if predicted > 0 else float("inf")
    factor = _probe.get("now", 1.0)
    adjusted = (measured - predicted * factor) / (predicted * factor) if predicted > 0 else float("inf")
    mark = " " if abs(error) <= 0.25 else "*"
    print(
        f"{model:<12} {kind:<18} {n:>5} {format_seconds(predicted):>10} {format_seconds(measured):>10} "
        f"{error:>+8.1%}{mark} {os.getloadavg()[0]:>5.2f} x{factor:>4.2f} {adjusted:>+8.1%}  {note}",
        flush=True,
    )
    return kind, error, adjusted


def fx_plan(name: str, graph: partitioner.Graph, inputs: tuple, n: int, profile) -> tuple[str, float, float]:
    devices = with_profile(partitioner.parse_devices(f"{n}x{max(1, graph.total_size_bytes)}B"), profile)
    plan = partitioner.partition(graph, devices, mode="size_based", force_partition=True)
    result = partitioner.run(plan, graph, inputs, timeout_s=300, repeats=7)
    if not result.outputs_equal:
        raise RunError("outputs differ")
    return _row(
        name, "fx plan", n, result.predicted_latency_s, result.measured_latency_s, f"{len(plan.partitions)} partitions"
    )


def pipe(name: str, graph: partitioner.Graph, inputs: tuple, n: int, profile) -> tuple[str, float, float]:
    batch = int(inputs[0].shape[0])
    m = max(k for k in (1, 2, 4, 8) if batch % k == 0 and k <= max(1, batch))
    devices = with_profile(partitioner.parse_devices(f"{n}x64GiB"), profile)
    pp = pipeline.plan(graph, devices, stages=n, microbatches=m, schedule="gpipe")
    result = run_pipeline(pp, graph, inputs, timeout_s=300, repeats=5)
    if not result.outputs_equal:
        raise RunError("outputs differ")
    return _row(name, "pipeline step", n, result.simulated_step_s, result.measured_step_s, f"{m} microbatches")


def tensor_parallel_forward(
    name: str, module, graph: partitioner.Graph, inputs: tuple, n: int, profile
) -> tuple[str, float, float]:
    whole = device_memory(graph, [Device(f"d{i}", 1, i) for i in range(n)], {})[0]
    devices = [Device(f"d{i}", int(whole * 0.8), i) for i in range(n)]
    spec = tensor_parallel.suggest(graph, devices, profile.link.bandwidth_bytes_per_s if profile.link else None)
    plan = tensor_parallel.tp_plan(graph, spec, n)
    predicted = tp_forward(graph, plan, profile)
    result = run_sharded(module, inputs, plan, timeout_s=300, repeats=7)
    if not result.outputs_equal:
        raise RunError("outputs differ")
    dispatch = predicted.part("dtensor dispatch")
    comm = predicted.total_s - predicted.part("compute") - dispatch
    return _row(
        name,
        "tensor parallel",
        n,
        predicted.total_s,
        result.forward_s,
        f"{len(plan.styles)} modules sharded; predicted compute {format_seconds(predicted.part('compute'))}, "
        f"dispatch {format_seconds(dispatch)}, collectives {format_seconds(comm)}",
    )


def composed(name: str, module, inputs: tuple, text: str, profile) -> tuple[str, float, float]:
    check = check_layout(
        module, inputs, parse_layout(text, int(inputs[0].shape[0])), profile=profile, timeout_s=300, repeats=7
    )
    if not (check.run.outputs_equal and check.run.gradients_equal and check.run.loss_equal is not False):
        raise RunError(f"outputs or gradients differ: {check.run.mismatch}")
    parts = ", ".join(
        f"{p.name} {format_seconds(p.predicted_s)}"
        + (f"/{format_seconds(p.measured_s)}" if p.measured_s is not None else "")
        for p in check.parts[:-1]
        if p.predicted_s > 0 or p.measured_s
    )
    return _row(
        name,
        f"composed {text}",
        check.run.layout.devices,
        check.predicted.total_s,
        check.run.step_s,
        f"training step; predicted(/measured): {parts}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--processes", default="2,4")
    parser.add_argument("--kinds", default="fx,pipeline,tp,composed")
    parser.add_argument("--layouts", default="dp2 tp2,pp2 tp2", help="composed layouts, on 4 processes")
    parser.add_argument(
        "--cached", action="store_true", help="use the cached profile instead of measuring it again before each model"
    )
    args = parser.parse_args()
    print(f"load average before: {_load()} ({os.cpu_count()} cores)", flush=True)
    began = time.perf_counter()
    print(
        f"\n{'model':<12} {'run':<18} {'procs':>5} {'predicted':>10} {'measured':>10} {'error':>8}  {'load':>5} "
        f"{'probe':>5} {'adj.err':>8}"
    )
    errors = []
    kinds = set(args.kinds.split(","))
    for name in args.models.split(","):
        profile = local_profile(refresh=not args.cached)  # the machine's load moves: measured beside each model's runs
        print(
            f"  (profile {profile.name!r} measured at load {profile.load_average:g}: peak "
            f"{profile.peak_flops / 1e9:.0f} GFLOP/s, slowdown "
            + ", ".join(f"{k}: x{f:.2f}" for k, f in profile.slowdown)
            + ", barrier "
            + ", ".join(f"{k}: {format_seconds(s)}" for k, s in profile.barrier_s)
            + ", DTensor dispatch "
            + ", ".join(f"{k}: {format_seconds(s)}" for k, s in profile.dtensor_module_s)
            + f", training step x{profile.training_step_factor:.2f} a forward)",
            flush=True,
        )
        module, inputs, _ = sample_models.load(name)
        graph = partitioner.trace(module, inputs, name=name)
        for n in (int(x) for x in args.processes.split(",")):
            jobs = [
                ("fx", lambda: fx_plan(name, graph, inputs, n, profile)),
                ("pipeline", lambda: pipe(name, graph, inputs, n, profile)),
                ("tp", lambda: tensor_parallel_forward(name, module, graph, inputs, n, profile)),
            ]
            for kind, job in jobs:
                if kind not in kinds:
                    continue
                try:
                    _probe["now"] = probe(profile)
                    errors.append(job())
                except (PartitionError, RunError, ValueError) as exc:
                    print(
                        f"{name:<12} {kind:<18} {n:>5} {'-':>10} {'-':>10} {'n/a':>8}  {'':>5}  "
                        f"{str(exc).splitlines()[0][:110]}",
                        flush=True,
                    )
        for text in args.layouts.split(",") if "composed" in kinds else []:
            try:
                _probe["now"] = probe(profile)
                errors.append(composed(name, module, inputs, text, profile))
            except (PartitionError, RunError, ValueError) as exc:
                print(
                    f"{name:<12} {'composed ' + text:<18} {4:>5} {'-':>10} {'-':>10} {'n/a':>8}  {'':>5}  "
                    f"{str(exc).splitlines()[0][:110]}",
                    flush=True,
                )
    if errors:
        within = sum(1 for _, e, _ in errors if abs(e) <= 0.25)
        adjusted = sum(1 for _, _, a in errors if abs(a) <= 0.25)
        print(
            f"\n{within} of {len(errors)} runs within 25 % (* marks the others); median |error| "
            f"{statistics.median(abs(e) for _, e, _ in errors):.1%}. With the prediction scaled by the probe "
            f"(the load's move since calibration, a diagnostic): {adjusted} within 25 %, median |error| "
            f"{statistics.median(abs(a) for _, _, a in errors):.1%}"
        )
    else:
        print("\nno run completed")
    for kind in sorted({k for k, _, _ in errors}):
        es = [abs(e) for k, e, _ in errors if k == kind]
        adj = [abs(a) for k, _, a in errors if k == kind]
        print(
            f"  {kind}: median |error| {statistics.median(es):.1%} over {len(es)} runs "
            f"(probe-scaled {statistics.median(adj):.1%})"
        )
    print(f"load average after: {_load()}; {time.perf_counter() - began:.0f} s in all")


if __name__ == "__main__":
    main()
