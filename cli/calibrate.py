"""``partition-explorer calibrate``: measure this machine as a device profile the cost model reads."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli.arguments import positive_float
from cli.commands import COMMON_EPILOG
from cli.inputs import EXIT_OK, CLIError
from cli.report import format_table
from partitioner.calibration.naming import calibrated_words, dated_name, newest_calibrated
from partitioner.device_profile import DeviceProfile, cache_dir, cache_off, find_profile, load_profile, profile_path
from partitioner.units import format_bytes, format_seconds

__all__ = ["register"]

EXAMPLES = """examples:
  partition-explorer calibrate                       # measure, cache as "local-<UTC date-time>"
  partition-explorer calibrate --name box --out box.json
  partition-explorer calibrate --name local          # replace the shared "local" profile
  partition-explorer calibrate --show                # the newest cached calibration, measured if none is
  partition-explorer plan mlp --devices 2xlocal      # a measured profile as the device type
  partition-explorer run plan.json mlp --calibrate   # re-score with the cached profile, then run
  partition-explorer calibrate --gpu --name my-h100  # a CUDA GPU's kernel curves (a few minutes)

Starts --processes ranks (gloo on CPU, NCCL on GPUs) and times what the cost model needs: Linear
ops (n x n by n x n, with bias) from 8 to 512 per dtype (the efficiency curve), an elementwise op
from 256 B to 32 MiB (memory bandwidth), the dispatch overhead of an op and of a module call, the slowdown when 1, 2
and all ranks compute at once on these cores, and point-to-point, all-reduce and all-gather
latency and bandwidth on 2 and all ranks. Writes the profile as JSON under the cache folder
(PARTITION_EXPLORER_CACHE, else ~/.cache/partition-explorer) as NAME.json: NAME or the file is
then a device type wherever one is asked (--devices 2xNAME, 2xFILE.json; cluster --accelerator
NAME). Without --name the profile is its own, local-<UTC date-time>: the shared "local" (what
`run --calibrate` and --devices 2xlocal read) changes only with --name local. The profile records
when (UTC) and at what load (the 1-minute load average) it was measured; every figure it prices
says so ("calibrated <date> at load <x>"). Takes 20-60 s, most of it the processes importing torch.

--gpu measures this machine's CUDA GPU the way the GPU presets (h100-80gb, h200-141gb) were
measured: launch cost per kernel, Linear by shape and dtype, elementwise and normalisation ops by
bytes, attention by sequence, embedding and cross-entropy. The profile is priced as the presets
are (eager PyTorch by default; see `plan --engine`). A machine without CUDA keeps the host's
calibration above.
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "calibrate",
        help="measure this machine as a device profile for the cost model",
        description="measure this machine as a device profile for the cost model",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES + COMMON_EPILOG,
    )
    p.add_argument(
        "--name",
        help="the profile's name, its device type (default local-<UTC date-time>, a profile of its own; "
        "--name local replaces the shared one other runs read)",
    )
    p.add_argument("--processes", type=int, default=4, help="ranks to measure on, 2 to 8 (default 4)")
    p.add_argument("--out", metavar="FILE", help="also write the profile here")
    p.add_argument("--show", action="store_true", help="print the cached profile (measure only if none is cached)")
    p.add_argument("--profile", metavar="FILE", help="--show: print this profile file instead")
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive_float,
        default=180.0,
        help="end the measurement (and every process) after this long (default 180)",
    )
    p.add_argument("--json", action="store_true", help="print the profile's JSON")
    p.add_argument("--gpu", action="store_true", help="measure this machine's CUDA GPU's kernel curves")
    p.add_argument("--quick", action="store_true", help="--gpu: a few small shapes only (seconds; a check)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from partitioner.calibration.host import calibrate

    if not 2 <= args.processes <= 8:
        raise CLIError(f"--processes must be 2 to 8 (got {args.processes}); 4 measures runs of 2 and 4 processes")
    progress = None if args.json else (lambda text: print(f"  {text}", file=sys.stderr))
    profile: DeviceProfile | None = None
    if args.profile:
        profile = load_profile(args.profile)
    elif args.show:
        shown = args.name or newest_calibrated()
        profile = find_profile(shown) if shown else None
    name = args.name or dated_name()  # a profile of its own: the shared "local" only when named
    if profile is None and args.gpu:
        profile = _calibrate_gpu(args, name)
        if not cache_off():
            profile.save(profile_path(name))
    if profile is None:
        profile = calibrate(name, args.processes, timeout_s=args.timeout, progress=progress)
        if not cache_off():
            profile.save(profile_path(name))
    if args.out:
        profile.save(args.out)
    if args.json:
        print(json.dumps(profile.to_dict(), indent=2))
    else:
        print(summary(profile))
        cached = not cache_off() and profile_path(profile.name).exists()
        print(
            f"\ncached as {profile_path(profile.name)}: a device type as --devices 2x{profile.name}, "
            f"cluster --accelerator {profile.name}"
            if cached
            else "\nnot cached (the cache is off: PARTITION_EXPLORER_CACHE=off)"
            if cache_off()
            else f"\nnot cached (cache folder {cache_dir()})"
        )
    return EXIT_OK


def _calibrate_gpu(args: argparse.Namespace, name: str) -> DeviceProfile:
    from partitioner.calibration.gpu import calibrate_gpu
    from partitioner.processes.worker import run_in_worker

    if not run_in_worker(_has_cuda, (), 60.0, "the CUDA check"):
        raise CLIError(
            "--gpu needs a CUDA GPU and torch with CUDA (none here); `partition-explorer calibrate` "
            "without --gpu measures this host, and the presets h100-80gb, h200-141gb carry measured curves"
        )
    return calibrate_gpu(name, timeout_s=max(args.timeout, 900.0) if not args.quick else args.timeout, quick=args.quick)


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def gpu_summary(profile: DeviceProfile) -> str:
    """A GPU profile as a person reads it: what it assumes, and its curves at a few sizes."""
    gpu = profile.gpu
    assert gpu is not None
    lines = [
        f"profile {profile.name!r}: {gpu.gpu}, {format_bytes(profile.memory_bytes)}; {profile.assumes}"
        + (f"; {calibrated_words(profile)}" if calibrated_words(profile) else ""),
        f"launch: {format_seconds(gpu.launch_s)} a kernel back to back, {format_seconds(gpu.host_op_s)} of "
        f"host time a bare op, {format_seconds(gpu.host_per_op_s)} an op of a model (eager)",
        "",
    ]
    rows = []
    for dtype, points in gpu.matmul:
        for m, k, n, s in points:
            if k == n == 4096 or (m == k == n):
                rows.append([dtype, f"{m:g} x {k:g} -> {n:g}", format_seconds(s), f"{2 * m * k * n / s / 1e12:.1f}"])
    lines.append(format_table(["matmul", "shape", "time (timed alone)", "TFLOP/s"], rows[:24], right=(2, 3)))
    rows = [[k, format_bytes(int(c[-1][0])), f"{c[-1][0] / c[-1][1] / 1e9:,.0f}"] for k, c in gpu.elementwise]
    lines += ["", format_table(["elementwise", "largest measured", "GB/s there"], rows, right=(1, 2))]
    rows = [
        [("causal" if causal else "full"), f"{seq:g}", format_seconds(s)] for causal, c in gpu.attention for seq, s in c
    ]
    lines += ["", format_table(["attention (32 heads of 128)", "sequence", "time"], rows, right=(1, 2))]
    return "\n".join(lines)


def summary(profile: DeviceProfile) -> str:
    """The profile as a person reads it: curves as tables, fits in words."""
    if profile.gpu is not None:
        return gpu_summary(profile)
    lines = [
        f"profile {profile.name!r}: {profile.cores} cores, {format_bytes(profile.memory_bytes)}, "
        f"{profile.backend}; {calibrated_words(profile) or 'calibrated ? at load ?'} on {profile.host or '?'} "
        f"in {profile.calibration_s:.0f} s",
        f"overhead: {format_seconds(profile.launch_s)} an op, {format_seconds(profile.module_overhead_s)} "
        f"more a module call; peak {profile.peak_flops / 1e9:.1f} GFLOP/s, memory "
        f"{profile.memory_bandwidth_bytes_per_s / 1e9:.1f} GB/s",
        "",
    ]
    sizes = [x for x, _ in profile.matmul[0][1]]
    rows = [
        [f"{round((x / 2) ** (1 / 3))}^3"] + [f"{profile.flops_per_s(x, d) / 1e9:.1f}" for d, _ in profile.matmul]
        for x in sizes
    ]
    lines.append(format_table(["matmul", *(f"{d} GFLOP/s" for d, _ in profile.matmul)], rows, right=range(1, 3)))
    rows = [
        [format_bytes(int(x)), format_seconds(t), f"{profile.bandwidth_bytes_per_s(x) / 1e9:.2f}"]
        for x, t in profile.copy
    ]
    lines += ["", format_table(["elementwise, bytes moved", "time", "GB/s"], rows, right=(1, 2))]
    rows = [
        [k, str(n), format_seconds(ab.latency_s), f"{ab.bandwidth_bytes_per_s / 1e9:.3f}"]
        for k, n, ab in profile.collectives
    ]
    lines += ["", format_table(["collective", "processes", "latency", "GB/s"], rows, right=(1, 2, 3))]
    lines += ["", "ranks computing at once: " + ", ".join(f"{k}: x{f:.2f}" for k, f in profile.slowdown)]
    lines += [
        f"a tensor-parallel module call: {format_seconds(profile.sharded_module_overhead_s)} more (DTensor, one rank)"
        + "".join(f"; {format_seconds(s)} on {n} ranks at once" for n, s in profile.dtensor_module_s)
    ]
    if profile.barrier_s:
        lines += ["a barrier after compute: " + ", ".join(f"{format_seconds(s)} on {n}" for n, s in profile.barrier_s)]
    lines += [f"a training step (forward and backward): x{profile.training_step_factor:.2f} the forward"]
    if profile.elementwise:
        lines += [
            "ops with their own curve (at the largest size measured): "
            + ", ".join(f"{k} {profile.elementwise_rate(k) / 1e9:.2f} GB/s" for k, _ in profile.elementwise)
        ]
    if profile.pipeline_action_s:
        lines += [
            "a pipelining action (forward of a microbatch on a stage, its send included): "
            + ", ".join(f"{format_seconds(s)} on {n} stages" for n, s in profile.pipeline_action_s)
        ]
    return "\n".join(lines)
