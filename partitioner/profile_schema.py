"""The JSON form of a device profile (:class:`partitioner.device_profile.DeviceProfile`): the checks
every profile passes, writing one and reading one back with an error that names the field and the
fix. A key renamed since profiles were first written is still read under its former name
(:data:`KEY_ALIASES`); only the current name is written. Torch-free."""

from __future__ import annotations

import math
from typing import Any, Mapping

from partitioner.curves import MAX_PROFILE_POINTS, AlphaBeta, check_curve, check_length, named_items, real, text
from partitioner.errors import DeviceSpecError
from partitioner.gpu_kernels_json import gpu_kernels_from_json, gpu_kernels_to_json
from partitioner.kernels import ENGINES
from partitioner.profile_cache import NAME as _NAME
from partitioner.profile_cache import PROFILE_KIND

__all__ = [
    "SCHEMA_VERSION",
    "LIMITS",
    "MAX_PROFILE_BYTES",
    "KEY_ALIASES",
    "check_profile",
    "profile_dict",
    "profile_fields",
]

SCHEMA_VERSION = 1
_REMEDY = "partition-explorer calibrate"
# How long each list of a profile may be (NOTE: [Bounded profiles] in partitioner.curves): a
# measurement makes tens of each. Curves hold at most MAX_CURVE_POINTS points each.
LIMITS = {
    "matmul": 16,  # dtypes
    "elementwise": 64,  # op kinds
    "collectives": 4096,  # (kind, processes) fits
    "slowdown": 1024,  # (ranks, factor) pairs: one a rank count measured
    "pipeline_action_s": 4096,
    "barrier_s": 4096,
    "dtensor_module_s": 4096,
}
_UNITS = {"matmul": "dtypes", "elementwise": "kinds", "collectives": "fits"}
MAX_TEXT = 200  # characters of host, backend, measured_at
MAX_PROFILE_BYTES = 16 * 2**20  # a profile file; the largest accepted profile is about 3 MB
# Keys profiles written before were read under, each with the key written now: the same quantity
# under the name the code gives it (GpuKernels' ``launch_s`` and ``host_per_op_s``).
KEY_ALIASES = {"launch_s": "op_overhead_s", "host_per_op_s": "graph_op_overhead_s"}


def check_profile(p: Any) -> None:
    """Every rule a profile's fields obey (a profile checks itself when made); O(curve points)."""
    if not isinstance(p.name, str) or not _NAME.match(p.name):
        raise DeviceSpecError(f"profile name must be 1-64 letters, digits, '_', '.', '-' (got {p.name!r})")
    for field in ("launch_s", "module_overhead_s", "sharded_module_overhead_s", "host_per_op_s"):
        value = getattr(p, field)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise DeviceSpecError(f"profile {p.name!r}: {field} must be seconds in [0, 1) (got {value!r})")
    if not isinstance(p.memory_bytes, int) or not 0 < p.memory_bytes <= 2**60:
        raise DeviceSpecError(
            f"profile {p.name!r}: memory_bytes must be an integer in [1, 2**60] (got {p.memory_bytes!r})"
        )
    for field, limit in LIMITS.items():
        check_length(f"profile {p.name!r}", field, getattr(p, field), limit, _UNITS.get(field, "pairs"), _REMEDY)
    points = (
        sum(len(c) for _, c in p.matmul)
        + len(p.copy)
        + sum(len(c) for _, c in p.elementwise)
        + sum(
            len(getattr(p, f))
            for f in ("collectives", "slowdown", "pipeline_action_s", "barrier_s", "dtensor_module_s")
        )
    )
    if points > MAX_PROFILE_POINTS:
        raise DeviceSpecError(
            f"profile {p.name!r}: its curves and pairs hold {points:,} points together (at most "
            f"{MAX_PROFILE_POINTS:,}; a measurement makes a few hundred); measure it again with `{_REMEDY}`"
        )
    if not p.matmul:
        raise DeviceSpecError(f"profile {p.name!r}: matmul needs at least one dtype's curve")
    if not p.slowdown or any(not (k >= 1 and 0 < f < 1e6) for k, f in p.slowdown):
        raise DeviceSpecError(
            f"profile {p.name!r}: slowdown needs (ranks >= 1, factor in (0, 1e6)) pairs (got {p.slowdown[:4]!r}...)"
        )
    ts = p.training_step_factor
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not 1 <= ts <= 100:
        raise DeviceSpecError(
            f"profile {p.name!r}: training_step_factor must be in [1, 100] (a step over "
            f"its forward; 3 by the FLOP count) (got {ts!r})"
        )
    for field in ("pipeline_action_s", "barrier_s", "dtensor_module_s"):
        pairs = getattr(p, field)
        if any(not (1 <= k <= 1_000_000 and 0 <= t < 60) for k, t in pairs):
            raise DeviceSpecError(
                f"profile {p.name!r}: {field} needs (count in [1, 1e6], seconds in "
                f"[0, 60)) pairs (got {pairs[:4]!r}...)"
            )
    for kind, n, ab in p.collectives:
        if not (1 <= n <= 1_000_000 and 0 <= ab.latency_s < 60 and 1e3 <= ab.bandwidth_bytes_per_s < 1e16):
            raise DeviceSpecError(
                f"profile {p.name!r}: collective {kind[:40]!r} at {n} processes needs latency_s in [0, 60) and "
                f"bandwidth_bytes_per_s in [1e3, 1e16) (got {ab.latency_s!r}, {ab.bandwidth_bytes_per_s!r})"
            )
    if isinstance(p.cores, bool) or not isinstance(p.cores, int) or not 1 <= p.cores <= 100_000:
        raise DeviceSpecError(f"profile {p.name!r}: cores must be an integer in [1, 100000] (got {p.cores!r})")
    for field in ("backend", "host", "measured_at"):
        given = getattr(p, field)
        if not isinstance(given, str) or len(given) > MAX_TEXT:
            raise DeviceSpecError(
                f"profile {p.name!r}: {field} must be text of at most {MAX_TEXT} characters "
                f"(got {type(given).__name__} of {len(str(given)):,}); measure it again with `{_REMEDY}`"
            )
    if p.engine not in ENGINES:
        raise DeviceSpecError(
            f"profile {p.name!r}: engine must be one of {', '.join(ENGINES)} (got {str(p.engine)[:40]!r})"
        )


def profile_dict(p: Any) -> dict[str, Any]:
    """``p`` as JSON-ready data (the form :func:`profile_fields` reads back)."""
    return {
        "kind": PROFILE_KIND,
        "schema_version": SCHEMA_VERSION,
        "name": p.name,
        "memory_bytes": p.memory_bytes,
        "launch_s": p.launch_s,
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
        "host_per_op_s": p.host_per_op_s,
        "cores": p.cores,
        "backend": p.backend,
        "host": p.host,
        "load_average": p.load_average,
        "measured_at": p.measured_at,
        "calibration_s": p.calibration_s,
        "engine": p.engine,
        **({"gpu": gpu_kernels_to_json(p.gpu)} if p.gpu is not None else {}),
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
    name = data.get("name", "")
    if not isinstance(name, str) or not _NAME.match(name):
        raise DeviceSpecError(
            f"profile name must be 1-64 letters, digits, '_', '.', '-' (got {str(name)[:80]!r}); "
            f"name it again with `{_REMEDY} --name NAME`"
        )
    owner = f"profile {name!r}"
    # Every list's length first, before a value of any is read (NOTE: [Bounded profiles]).
    points = 0
    for field, limit in LIMITS.items():
        if field in data:
            length = check_length(owner, field, data[field], limit, _UNITS.get(field, "pairs"), _REMEDY)
            points += 0 if field in ("matmul", "elementwise") else length
    for field in ("matmul", "elementwise"):
        if isinstance(data.get(field), dict):
            points += sum(
                check_length(owner, f"{field}[{k!s:.40}]", c, 10**9, "points", _REMEDY) for k, c in data[field].items()
            )
    if "copy" in data:
        points += check_length(owner, "copy", data["copy"], 10**9, "points", _REMEDY)
    if points > MAX_PROFILE_POINTS:
        raise DeviceSpecError(
            f"{owner}: its curves and pairs hold {points:,} points together (at most "
            f"{MAX_PROFILE_POINTS:,}; a measurement makes a few hundred); measure it again with `{_REMEDY}`"
        )
    try:
        matmul = tuple(
            sorted(
                (text(owner, "a matmul dtype", dtype), check_curve(owner, f"matmul[{dtype}]", curve))
                for dtype, curve in named_items(owner, "matmul", data["matmul"])
            )
        )
        collectives = tuple(
            sorted(
                (
                    text(owner, "a collective's kind", c["kind"]),
                    _integer(owner, "a collective's processes", c["processes"]),
                    AlphaBeta(
                        real(owner, "latency_s", c["latency_s"]),
                        real(owner, "bandwidth_bytes_per_s", c["bandwidth_bytes_per_s"]),
                    ),
                )
                for c in data.get("collectives", ())
            )
        )
        return dict(
            name=name,
            memory_bytes=_integer(owner, "memory_bytes", data["memory_bytes"]),
            launch_s=real(owner, "launch_s", _aliased(data, "launch_s")),
            module_overhead_s=real(owner, "module_overhead_s", data["module_overhead_s"]),
            matmul=matmul,
            copy=check_curve(owner, "copy", data["copy"]),
            collectives=collectives,
            sharded_module_overhead_s=real(
                owner, "sharded_module_overhead_s", data.get("sharded_module_overhead_s", 0.0)
            ),
            slowdown=_pairs(data, "slowdown", [[1, 1.0]]),
            pipeline_action_s=_pairs(data, "pipeline_action_s"),
            barrier_s=_pairs(data, "barrier_s"),
            dtensor_module_s=_pairs(data, "dtensor_module_s"),
            training_step_factor=real(owner, "training_step_factor", data.get("training_step_factor", 3.0)),
            elementwise=tuple(
                sorted(
                    (text(owner, "an elementwise kind", k), check_curve(owner, f"elementwise[{k}]", c))
                    for k, c in named_items(owner, "elementwise", data.get("elementwise", {}))
                )
            ),
            host_per_op_s=real(owner, "host_per_op_s", _aliased(data, "host_per_op_s", 0.0)),
            cores=_integer(owner, "cores", data.get("cores", 1)),
            backend=text(owner, "backend", data.get("backend", "gloo")),
            host=text(owner, "host", data.get("host", "")),
            load_average=real(owner, "load_average", data.get("load_average", 0.0)),
            measured_at=text(owner, "measured_at", data.get("measured_at", "")),
            calibration_s=real(owner, "calibration_s", data.get("calibration_s", 0.0)),
            gpu=gpu_kernels_from_json(data["gpu"]) if data.get("gpu") is not None else None,
            engine=text(owner, "engine", data.get("engine", "eager")),
        )
    except DeviceSpecError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise DeviceSpecError(
            f"device profile {name!r} is malformed ({type(exc).__name__}: {str(exc)[:200]}); "
            "measure it again with `partition-explorer calibrate`"
        ) from None


def _aliased(data: Mapping[str, Any], key: str, *default: Any) -> Any:
    """``data[key]``, else the value under its former name (:data:`KEY_ALIASES`), else ``default``
    (a KeyError, read as a malformed profile, when there is none)."""
    for name in (key, KEY_ALIASES[key]):
        if name in data:
            return data[name]
    if default:
        return default[0]
    raise KeyError(key)


def _integer(owner: str, what: str, value: Any) -> int:
    """A JSON integer (or a float with no fraction, 8e10); a boolean, a string or a fraction is refused."""
    number = real(owner, what, value)
    if not number.is_integer():
        raise DeviceSpecError(f"{owner}: {what} must be an integer (got {value!r})")
    return int(number)


def _pairs(data: Mapping[str, Any], key: str, default: Any = ()) -> tuple[tuple[int, float], ...]:
    owner = f"profile {data.get('name')!r}"
    pairs = tuple(sorted((_integer(owner, key, k), real(owner, key, f)) for k, f in data.get(key, default)))
    if any(not math.isfinite(f) for _, f in pairs):
        raise DeviceSpecError(f"device profile field {key} needs finite values (got {pairs[:4]!r})")
    return pairs
