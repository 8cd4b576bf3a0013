"""A GPU's kernel curves (:class:`partitioner.kernels.GpuKernels`) as a device profile's JSON
``gpu`` section, written and read back: every list's length checked before a value of it is read
(NOTE: [Bounded profiles] in :mod:`partitioner.curves`), a value of the wrong type refused. Torch-free."""

from __future__ import annotations

from typing import Any, Mapping

from partitioner.curves import MAX_CURVE_POINTS, MAX_PROFILE_POINTS, check_length, named_items, real, text
from partitioner.errors import DeviceSpecError
from partitioner.kernels import CALIBRATE_GPU, GPU_LIMITS, GpuKernels, gpu_curve

__all__ = ["gpu_kernels_to_json", "gpu_kernels_from_json"]


def gpu_kernels_to_json(self: GpuKernels) -> dict[str, Any]:
    """``self`` as the profile JSON's ``gpu`` section (:func:`gpu_kernels_from_json` reads it back)."""
    return {
        "gpu": self.gpu,
        "launch_s": self.launch_s,
        "host_op_s": self.host_op_s,
        "matmul": {d: [list(r) for r in rows] for d, rows in self.matmul},
        "elementwise": {k: [list(p) for p in c] for k, c in self.elementwise},
        "attention": {("causal" if c else "full"): [list(p) for p in curve] for c, curve in self.attention},
        "embedding": [list(p) for p in self.embedding],
        "loss": [list(p) for p in self.loss],
        "derived_from": self.derived_from,
        "source": self.source,
        **({"derived_dtypes": {d: r for d, r in self.derived_dtypes}} if self.derived_dtypes else {}),
    }


def gpu_kernels_from_json(data: Mapping[str, Any]) -> GpuKernels:
    """A profile JSON's ``gpu`` section, every list's length checked before a value of it is read
    (NOTE: [Bounded profiles]), wrong types refused, never converted."""
    if not isinstance(data, Mapping):
        raise DeviceSpecError(
            f"a GPU profile is a JSON object (got {type(data).__name__}); measure it with `{CALIBRATE_GPU}`"
        )
    name = text("GPU profile", "gpu", data.get("gpu", ""))[:200]
    owner = f"GPU profile {name!r}"
    try:
        # Every list's length first, before a value of any is read (NOTE: [Bounded profiles]).
        for field, limit in GPU_LIMITS.items():
            if data.get(field) is not None:
                check_length(owner, field, data[field], limit, "entries", CALIBRATE_GPU)
        points = 0
        for field in ("matmul", "elementwise", "attention"):
            for key, rows in named_items(owner, field, data[field]):
                points += check_length(owner, f"{field}[{key!s:.40}]", rows, MAX_CURVE_POINTS, "points", CALIBRATE_GPU)
        for field in ("embedding", "loss"):
            points += check_length(owner, field, data[field], MAX_CURVE_POINTS, "points", CALIBRATE_GPU)
        if points > MAX_PROFILE_POINTS:
            raise DeviceSpecError(
                f"{owner}: its curves hold {points:,} points together (at most {MAX_PROFILE_POINTS:,}; a "
                f"measurement makes a few hundred); measure it again with `{CALIBRATE_GPU}`"
            )
        raw = {
            text(owner, "a matmul dtype", d): [tuple(real(owner, f"matmul[{d}]", v) for v in r) for r in rows]
            for d, rows in named_items(owner, "matmul", data["matmul"])
        }
        if any(len(r) != 4 for rows in raw.values() for r in rows):
            raise DeviceSpecError(f"GPU profile {name!r}: matmul rows are [m, k, n, seconds]")
        matmul = tuple(sorted((d, tuple(sorted((r[0], r[1], r[2], r[3]) for r in rows))) for d, rows in raw.items()))
        kinds = [
            text(owner, "an attention curve's name", k) for k, _ in named_items(owner, "attention", data["attention"])
        ]
        if any(k not in ("causal", "full") for k in kinds):
            raise DeviceSpecError(f"{owner}: attention curves are named causal and full (got {kinds!r})")
        return GpuKernels(
            gpu=name,
            launch_s=real(owner, "launch_s", data["launch_s"]),
            host_op_s=real(owner, "host_op_s", data["host_op_s"]),
            matmul=matmul,
            elementwise=tuple(
                sorted(
                    (text(owner, "an elementwise kind", k), gpu_curve(name, f"elementwise[{k}]", c))
                    for k, c in named_items(owner, "elementwise", data["elementwise"])
                )
            ),
            attention=tuple(
                sorted(
                    (k == "causal", gpu_curve(name, f"attention[{k}]", c))
                    for k, c in named_items(owner, "attention", data["attention"])
                )
            ),
            embedding=gpu_curve(name, "embedding", data["embedding"]),
            loss=gpu_curve(name, "loss", data["loss"]),
            derived_from=text(owner, "derived_from", data.get("derived_from", ""))[:500],
            source=text(owner, "source", data.get("source", ""))[:500],
            derived_dtypes=tuple(
                sorted(
                    (text(owner, "a derived dtype", d), real(owner, f"derived_dtypes[{d}]", r))
                    for d, r in named_items(owner, "derived_dtypes", data.get("derived_dtypes") or {})
                )
            ),
        )
    except DeviceSpecError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DeviceSpecError(
            f"GPU profile {name!r} is malformed ({type(exc).__name__}: {exc}); measure it "
            "again with `partition-explorer calibrate --gpu`"
        ) from None
