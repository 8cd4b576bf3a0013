"""GPU kernel curves from measured rows (the carried ``*.jsonl`` format that ``measure_curves`` and
``partition-explorer calibrate --gpu`` write), and the curves of a card nobody measured, derived
from the nearest measured one by datasheet ratios. Torch-free."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from partitioner.kernels import MIN_KERNEL_S, GpuKernels, gpu_curve

__all__ = ["from_rows", "derive"]


def from_rows(rows: Iterable[Mapping[str, Any]], source: str = "") -> GpuKernels:
    """A :class:`GpuKernels` from ``measure_curves`` rows (one JSON object a measurement, the
    format ``partition-explorer calibrate --gpu`` writes). O(rows log rows)."""
    gpu, launch, host = "", 0.0, 0.0
    matmul: dict[str, list[tuple[float, float, float, float]]] = {}
    elementwise: dict[str, list[tuple[float, float]]] = {}
    attention: dict[bool, list[tuple[float, float]]] = {}
    embedding: list[tuple[float, float]] = []
    loss: list[tuple[float, float]] = []
    for row in rows:
        kind = row.get("kind")
        if kind == "info":
            gpu = str(row.get("gpu", ""))
        elif kind == "overhead":
            if "back to back" in str(row.get("what", "")):
                launch = float(row["per_op_s"])
            else:
                host = float(row["per_op_s"])
        elif kind == "matmul" and row.get("dtype") != "tf32":
            matmul.setdefault(str(row["dtype"]), []).append(
                (float(row["m"]), float(row["k"]), float(row["n"]), float(row["s"]))
            )
        elif kind == "elementwise":
            elementwise.setdefault(str(row["op"]), []).append((float(row["bytes"]), float(row["s"])))
        elif kind == "attention":
            attention.setdefault(bool(row["causal"]), []).append((float(row["seq"]), float(row["s"])))
        elif kind == "embedding":
            embedding.append((2.0 * 2 * float(row["tokens"]) * float(row["dim"]), float(row["s"])))
        elif kind == "cross_entropy":
            loss.append((float(row["tokens"]) * float(row["vocab"]), float(row["s"])))
    return GpuKernels(
        gpu=gpu,
        launch_s=launch,
        host_op_s=host or launch,
        matmul=tuple(sorted((d, tuple(sorted(r))) for d, r in matmul.items())),
        elementwise=tuple(sorted((k, gpu_curve(gpu, k, c)) for k, c in elementwise.items())),
        attention=tuple(sorted((k, gpu_curve(gpu, "attention", c)) for k, c in attention.items())),
        embedding=gpu_curve(gpu, "embedding", embedding),
        loss=gpu_curve(gpu, "cross_entropy", loss),
        source=source,
    )


def derive(base: GpuKernels, compute: Mapping[str, float], bandwidth: float, name: str, base_name: str) -> GpuKernels:
    """Curves of a card nobody measured, from ``base`` (the nearest measured card): each kernel's
    own time (the timed one less the launch) divided by the datasheet ratio of the roof it sits
    under: ``compute[dtype]`` (this card's peak over the base's) for matrix products above the
    base's ridge point and for attention, ``bandwidth`` for the rest. Launch costs are kept (they
    are the host's). Said so in ``derived_from``."""

    def scaled(t: float, ratio: float) -> float:
        return base.launch_s + max(t - base.launch_s, MIN_KERNEL_S) / ratio

    bf16_ratio = compute.get("bfloat16", 1.0)
    ridge = base.best_flops("bfloat16") / max(base.best_bandwidth_bytes_per_s, 1.0)
    matmul = []
    for dtype, rows in base.matmul:
        out = []
        for m, k, n, s in rows:
            intensity = m * k * n / (m * k + k * n + m * n)  # FLOPs per byte at 2 bytes an element
            share = intensity / (intensity + ridge)  # how compute-bound: a smooth roofline blend
            ratio = 1.0 / (share / compute.get(dtype, bf16_ratio) + (1.0 - share) / bandwidth)
            out.append((m, k, n, scaled(s, ratio)))
        matmul.append((dtype, tuple(out)))
    return GpuKernels(
        gpu=name,
        launch_s=base.launch_s,
        host_op_s=base.host_op_s,
        matmul=tuple(matmul),
        elementwise=tuple((k, tuple((x, scaled(s, bandwidth)) for x, s in c)) for k, c in base.elementwise),
        attention=tuple((k, tuple((x, scaled(s, bf16_ratio)) for x, s in c)) for k, c in base.attention),
        embedding=tuple((x, scaled(s, bandwidth)) for x, s in base.embedding),
        loss=tuple((x, scaled(s, bandwidth)) for x, s in base.loss),
        derived_from=(
            f"derived from the measured {base_name}: kernels scaled by the datasheet ratios "
            f"(bf16 x{bf16_ratio:.2f}, fp32 x{compute.get('float32', bf16_ratio):.2f}, "
            f"memory bandwidth x{bandwidth:.2f}); launch costs as measured there"
        ),
        source=base.source,
    )
