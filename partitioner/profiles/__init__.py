"""The GPU presets' device profiles: kernel curves measured on an H100 80GB HBM3 and an H200
(``h100-80gb.jsonl``, ``h200-141gb.jsonl``: rows of ``partition-explorer calibrate --gpu``, torch
2.11 + CUDA 13, 2026-11-26), and for every other card of :data:`partitioner.hardware.HARDWARE`
curves derived from the nearest measured card by the datasheet ratios (said so in the profile).
Torch-free; read once per process.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from partitioner.device_profile import AlphaBeta, DeviceProfile
from partitioner.errors import DeviceSpecError
from partitioner.hardware import HARDWARE, LINKS, Hardware
from partitioner.kernels import ENGINES, GpuKernels
from partitioner.profiles.build import derive, from_rows
from partitioner.units import DTYPES

__all__ = ["MEASURED", "gpu_profile", "gpu_kernels", "profile_from_kernels"]

_HERE = Path(__file__).resolve().parent
MEASURED = {"h100-80gb": "h100-80gb.jsonl", "h200-141gb": "h200-141gb.jsonl"}  # preset -> carried curves


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _nearest_measured(card: Hardware) -> str:
    """The measured card closest to ``card`` in memory bandwidth (log ratio): the roof most of a
    model's ops sit under."""
    return min(
        MEASURED,
        key=lambda m: abs(math.log(card.memory_bandwidth_bytes_per_s / HARDWARE[m].memory_bandwidth_bytes_per_s)),
    )


@functools.lru_cache(maxsize=None)
def gpu_kernels(name: str) -> GpuKernels | None:
    """The kernel curves of the preset ``name``: measured, derived, or None for the host CPU."""
    card = HARDWARE.get(name)
    if card is None:
        raise DeviceSpecError(f"unknown device type {name!r}; choose one of {', '.join(HARDWARE)}")
    if not card.accelerator:
        return None
    if name in MEASURED:
        return from_rows(_rows(_HERE / MEASURED[name]), source=f"{MEASURED[name]} (measured, carried in the package)")
    base_name = _nearest_measured(card)
    base, ref = gpu_kernels(base_name), HARDWARE[base_name]
    assert base is not None
    compute = {d.name: card.peak_for(d.name) / ref.peak_for(d.name) for d in DTYPES if d.gpu_calibrated}
    return derive(base, compute, card.memory_bandwidth_bytes_per_s / ref.memory_bandwidth_bytes_per_s, name, base_name)


def profile_from_kernels(
    name: str,
    memory_bytes: int,
    kernels: GpuKernels,
    link_bandwidth: float,
    link_latency_s: float,
    engine: str = "eager",
) -> DeviceProfile:
    """A :class:`DeviceProfile` whose ops are priced by ``kernels`` (its flat curves for readers
    of a single figure: matmul FLOPs -> seconds per dtype, the copy curve)."""
    matmul = []
    for dtype, rows in kernels.matmul:
        by_flops: dict[float, float] = {}
        for m, k, n, s in rows:
            by_flops[2 * m * k * n] = min(s, by_flops.get(2 * m * k * n, math.inf))
        matmul.append((dtype, tuple(sorted(by_flops.items()))))
    copy = dict(kernels.elementwise).get("copy") or kernels.elementwise[0][1]
    return DeviceProfile(
        name=name,
        memory_bytes=int(memory_bytes),
        launch_s=kernels.launch_s,
        module_overhead_s=0.0,
        matmul=tuple(matmul),
        copy=copy,
        elementwise=kernels.elementwise,
        collectives=(("p2p", 2, AlphaBeta(link_latency_s, link_bandwidth)),),
        host_per_op_s=kernels.host_per_op_s,
        backend="nccl",
        host=kernels.gpu,
        gpu=kernels,
        engine=engine,
    )


@functools.lru_cache(maxsize=None)
def gpu_profile(name: str, engine: str = "eager") -> DeviceProfile | None:
    """The device profile of the preset ``name`` under ``engine`` (None for the host CPU, whose
    profile `partition-explorer calibrate` measures)."""
    if engine not in ENGINES:
        raise DeviceSpecError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    kernels = gpu_kernels(name)
    if kernels is None:
        return None
    card = HARDWARE[name]
    link = LINKS[card.link]
    return profile_from_kernels(name, card.memory_bytes, kernels, link.bandwidth_bytes_per_s, link.latency_s, engine)
