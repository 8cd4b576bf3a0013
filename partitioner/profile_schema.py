"""The JSON form of a device profile (:class:`partitioner.device_profile.DeviceProfile`): the checks
every profile passes, writing one and reading one back with an error that names the field and the
fix. Torch-free."""

from __future__ import annotations

import math
from typing import Any, Mapping

from partitioner.curves import AlphaBeta, check_curve
from partitioner.errors import DeviceSpecError
from partitioner.kernels import ENGINES, GpuKernels
from partitioner.profile_cache import NAME as _NAME
from partitioner.profile_cache import PROFILE_KIND

__all__ = ["SCHEMA_VERSION", "check_profile", "profile_dict", "profile_fields"]

SCHEMA_VERSION = 1


def check_profile(p: Any) -> None:
    """Every rule a profile's fields obey (a profile checks itself when made); O(curve points)."""
    if not isinstance(p.name, str) or not _NAME.match(p.name):
        raise DeviceSpecError(f"profile name must be 1-64 letters, digits, '_', '.', '-' (got {p.name!r})")
    for field in ("op_overhead_s", "module_overhead_s", "sharded_module_overhead_s", "graph_op_overhead_s"):
        value = getattr(p, field)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise DeviceSpecError(f"profile {p.name!r}: {field} must be seconds in [0, 1) (got {value!r})")
    if not isinstance(p.memory_bytes, int) or not 0 < p.memory_bytes <= 2**60:
        raise DeviceSpecError(
            f"profile {p.name!r}: memory_bytes must be an integer in [1, 2**60] (got {p.memory_bytes!r})"
        )
    if not p.matmul:
        raise DeviceSpecError(f"profile {p.name!r}: matmul needs at least one dtype's curve")
    if not p.slowdown or any(not (k >= 1 and 0 < f < 1e6) for k, f in p.slowdown):
        raise DeviceSpecError(
            f"profile {p.name!r}: slowdown needs (ranks >= 1, factor in (0, 1e6)) pairs (got {p.slowdown!r})"
        )
    ts = p.training_step_factor
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not 1 <= ts <= 100:
        raise DeviceSpecError(
            f"profile {p.name!r}: training_step_factor must be in [1, 100] (a step over "
            f"its forward; 3 by the FLOP count) (got {ts!r})"
        )
    for field in ("pipeline_action_s", "barrier_s", "dtensor_module_s"):
        pairs = getattr(p, field)
        if len(pairs) > 4096 or any(not (1 <= k <= 1_000_000 and 0 <= t < 60) for k, t in pairs):
            raise DeviceSpecError(
                f"profile {p.name!r}: {field} needs (count in [1, 1e6], seconds in "
                f"[0, 60)) pairs (got {pairs[:4]!r}...)"
            )
    for kind, n, ab in p.collectives:
        if not (1 <= n <= 1_000_000 and 0 <= ab.latency_s < 60 and 1e3 <= ab.bandwidth_bytes_per_s < 1e16):
            raise DeviceSpecError(
                f"profile {p.name!r}: collective {kind!r} at {n} processes needs latency_s in [0, 60) and "
                f"bandwidth_bytes_per_s in [1e3, 1e16) (got {ab.latency_s!r}, {ab.bandwidth_bytes_per_s!r})"
            )
    if isinstance(p.cores, bool) or not isinstance(p.cores, int) or not 1 <= p.cores <= 100_000:
        raise DeviceSpecError(f"profile {p.name!r}: cores must be an integer in [1, 100000] (got {p.cores!r})")
    if p.engine not in ENGINES or len(p.collectives) > 4096 or len(p.elementwise) > 64 or len(p.matmul) > 16:
        raise DeviceSpecError(
            f"profile {p.name!r}: engine must be one of {', '.join(ENGINES)} (got {p.engine!r}) "
            "and its curves as many as a measurement makes"
        )


def profile_dict(p: Any) -> dict[str, Any]:
    """``p`` as JSON-ready data (the form :func:`profile_fields` reads back)."""
    return {
        "kind": PROFILE_KIND,
        "schema_version": SCHEMA_VERSION,
        "name": p.name,
        "memory_bytes": p.memory_bytes,
        "op_overhead_s": p.op_overhead_s,
        "module_overhead_s": p.module_overhead_s,
        "sharded_module_overhead_s": p.sharded_module_overhead_s,
        "matmul": {dtype: [list(p) for p in curve] for dtype, curve in p.matmul},
        "copy": [list(p) for p in p.copy],
        "collectives": [
            {
                "kind": k,
                "processes": n,
                "latency_s": ab.latency_s,
                "bandwidth_bytes_per_s": ab.bandwidth_bytes_per_s,
            }
            for k, n, ab in p.collectives
        ],
        "slowdown": [list(p) for p in p.slowdown],
        "pipeline_action_s": [list(p) for p in p.pipeline_action_s],
        "barrier_s": [list(p) for p in p.barrier_s],
        "dtensor_module_s": [list(p) for p in p.dtensor_module_s],
        "training_step_factor": p.training_step_factor,
        "elementwise": {kind: [list(p) for p in curve] for kind, curve in p.elementwise},
        "graph_op_overhead_s": p.graph_op_overhead_s,
        "cores": p.cores,
        "backend": p.backend,
        "host": p.host,
        "load_average": p.load_average,
        "measured_at": p.measured_at,
        "calibration_s": p.calibration_s,
        "engine": p.engine,
        **({"gpu": p.gpu.to_dict()} if p.gpu is not None else {}),
    }


def profile_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The profile's fields from its JSON form, checked."""
    if not isinstance(data, Mapping) or data.get("kind") != PROFILE_KIND:
        raise DeviceSpecError(
            f'a device profile is a JSON object with "kind": "{PROFILE_KIND}"; '
            "write one with `partition-explorer calibrate`"
        )
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DeviceSpecError(
            f"device profile schema_version must be {SCHEMA_VERSION} (got {version!r}); "
            "measure it again with `partition-explorer calibrate`"
        )
    name = str(data.get("name", ""))
    try:
        matmul = tuple(
            sorted(
                (str(dtype), check_curve(f"profile {name!r}", f"matmul[{dtype}]", curve))
                for dtype, curve in dict(data["matmul"]).items()
            )
        )
        collectives = tuple(
            sorted(
                (
                    str(c["kind"]),
                    int(c["processes"]),
                    AlphaBeta(float(c["latency_s"]), float(c["bandwidth_bytes_per_s"])),
                )
                for c in data.get("collectives", ())
            )
        )
        return dict(
            name=name,
            memory_bytes=int(data["memory_bytes"]),
            op_overhead_s=float(data["op_overhead_s"]),
            module_overhead_s=float(data["module_overhead_s"]),
            matmul=matmul,
            copy=check_curve(f"profile {name!r}", "copy", data["copy"]),
            collectives=collectives,
            sharded_module_overhead_s=float(data.get("sharded_module_overhead_s", 0.0)),
            slowdown=tuple(sorted((int(k), float(f)) for k, f in data.get("slowdown", [[1, 1.0]]))),
            pipeline_action_s=_pairs(data, "pipeline_action_s"),
            barrier_s=_pairs(data, "barrier_s"),
            dtensor_module_s=_pairs(data, "dtensor_module_s"),
            training_step_factor=float(data.get("training_step_factor", 3.0)),
            elementwise=tuple(
                sorted(
                    (str(k), check_curve(f"profile {name!r}", f"elementwise[{k}]", c))
                    for k, c in dict(data.get("elementwise", {})).items()
                )
            ),
            graph_op_overhead_s=float(data.get("graph_op_overhead_s", 0.0)),
            cores=int(data.get("cores", 1)),
            backend=str(data.get("backend", "gloo")),
            host=str(data.get("host", "")),
            load_average=float(data.get("load_average", 0.0)),
            measured_at=str(data.get("measured_at", "")),
            calibration_s=float(data.get("calibration_s", 0.0)),
            gpu=GpuKernels.from_dict(data["gpu"]) if data.get("gpu") is not None else None,
            engine=str(data.get("engine", "eager")),
        )
    except DeviceSpecError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise DeviceSpecError(
            f"device profile {name!r} is malformed ({type(exc).__name__}: {exc}); "
            "measure it again with `partition-explorer calibrate`"
        ) from None


def _pairs(data: Mapping[str, Any], key: str) -> tuple[tuple[int, float], ...]:
    pairs = tuple(sorted((int(k), float(f)) for k, f in data.get(key, [])))
    if any(not math.isfinite(f) for _, f in pairs):
        raise DeviceSpecError(f"device profile field {key} needs finite values (got {pairs[:4]!r})")
    return pairs
