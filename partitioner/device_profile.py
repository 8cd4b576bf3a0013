"""A device profile measured on the machine it describes: what the cost model needs in place of a
flat peak (torch-free; :mod:`partitioner.runtime.calibrate` measures one).

A profile holds curves, not single figures: matmul seconds by FLOPs per dtype (the efficiency
curve), elementwise seconds by bytes moved (the bandwidth curve), the dispatch overhead of one op
and of one module call, alpha-beta fits (latency + bytes / bandwidth) of point-to-point sends and
of collectives per process count, and how much slower a rank computes when several ranks share
the cores. Beside them, what torch's engines add as runs meet them, measured in place on every
rank at once after compute (NOTE: [Engine costs in place] in
:mod:`partitioner.runtime._engine_costs`): a barrier, a hand-off between computing ranks, DTensor's
dispatch of a sharded module, a row-parallel pair's all-reduce (alone and with groups side by
side), a pipelining action; the training step's time over the forward's; and curves of their
own for ops that compute more than a copy (gelu, layer_norm, softmax...). It is a device type like the presets: ``--devices 2xlocal`` (a profile cached under
:func:`cache_dir`) or ``--devices 2x/path/profile.json``; a :class:`~partitioner.devices.Device`
made from it carries it whole, so plans saved with it re-score the same anywhere.

# NOTE: [Op time from a profile]
An op costs overhead + max(FLOPs / throughput(FLOPs), bytes / bandwidth(bytes)), the roofline
with both roofs measured as curves (log-log interpolation between the measured points, held
flat beyond them). Throughput at F FLOPs is F / (t(F) - overhead), t the measured matmul
time, so the overhead is not counted twice. A ``call_module`` op pays the module-call overhead
(Python's ``nn.Module.__call__``), a function op the dispatch overhead; ops that only index or
view pay the overhead alone. Collectives: alpha-beta (Hockney 1994) per kind and process count,
the nearest measured count when the asked one was not measured.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from partitioner.errors import DeviceSpecError
from partitioner.kernels import ENGINES, MAX_CURVE_POINTS, GpuKernels, interp
from partitioner.profile_cache import (
    NAME as _NAME,
)  # noqa: E501
from partitioner.profile_cache import (
    PROFILE_KIND,
    cache_dir,
    cache_off,
    cached_profiles,
    is_profile_data,
    profile_path,
)

__all__ = [
    "DeviceProfile",
    "AlphaBeta",
    "PROFILE_KIND",
    "ELEMENTWISE_KINDS",
    "SCHEMA_VERSION",
    "cache_dir",
    "profile_path",
    "load_profile",
    "find_profile",
    "cached_profiles",
    "fit_alpha_beta",
    "is_profile_data",
]

SCHEMA_VERSION = 1
COLLECTIVE_KINDS = (
    "p2p",
    "handoff",
    "all_reduce",
    "all_gather",
    "dtensor_all_reduce",
    "concurrent_all_reduce",
    "concurrent_dtensor_all_reduce",
)  # concurrent_*: groups of that size side by side on every rank
# Ops that index, view or reshape: no bytes move, only the dispatch is paid.
_FREE_OPS = (
    "getitem",
    "getattr",
    "size",
    "view",
    "reshape",
    "flatten",
    "unflatten",
    "unsqueeze",
    "squeeze",
    "permute",
    "transpose",
    "t",
    "expand",
    "contiguous",
    "split",
    "chunk",
    "dim",
    "unbind",
)

Curve = tuple[tuple[float, float], ...]  # (x, seconds) sorted by x
# Ops that compute more than a copy per byte (transcendentals, reductions): each gets its own
# measured (bytes moved, seconds) curve; a module of that type (GELU, LayerNorm...) uses it too.
ELEMENTWISE_KINDS = ("gelu", "layer_norm", "softmax", "silu", "sigmoid", "tanh")


def _kind_key(name: str) -> str:
    return name.replace("_", "").lower()


@dataclass(frozen=True)
class AlphaBeta:
    """Seconds to move ``n`` bytes: ``latency_s + n / bandwidth_bytes_per_s``."""

    latency_s: float
    bandwidth_bytes_per_s: float

    def seconds(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s


def fit_alpha_beta(points: Sequence[tuple[float, float]]) -> AlphaBeta:
    """An alpha-beta fit robust to a noisy, shared machine: the latency is the median time of the
    smaller half of the messages, the per-byte time the median of (t - latency) / bytes over the
    larger half (at least 1 ns a MB). O(n log n). A least-squares line lets one slow large
    message move the latency by milliseconds."""
    if not points:
        raise DeviceSpecError("an alpha-beta fit needs at least one (bytes, seconds) point")
    ordered = sorted(points)
    half = max(1, len(ordered) // 2)
    alpha = statistics.median(y for _, y in ordered[:half])
    large = [(x, y) for x, y in ordered[half:] if x > 0] or ordered[-1:]
    per_byte = statistics.median(max(y - alpha, 0.0) / max(x, 1.0) for x, y in large)
    return AlphaBeta(max(alpha, 1e-9), 1.0 / max(per_byte, 1e-15))


def _interp(curve: Curve, x: float) -> float:
    """Seconds at ``x`` by log-log interpolation, held at the end points' throughput beyond them.
    O(log n): a bisection over the curve's x values (cached per curve)."""
    xs = _XS.get(id(curve))
    if xs is None or xs[0] is not curve:
        xs = (curve, [p[0] for p in curve])
        if len(_XS) > 4096:
            _XS.clear()
        _XS[id(curve)] = xs
    keys = xs[1]
    if x <= keys[0]:
        return curve[0][1] * x / keys[0]
    return interp(curve, x, keys)


_XS: dict[int, tuple[Curve, list[float]]] = {}


def _check_curve(name: str, what: str, curve: Any) -> Curve:
    try:
        points = tuple(sorted((float(x), float(y)) for x, y in curve))
    except (TypeError, ValueError):
        raise DeviceSpecError(
            f"profile {name!r}: {what} must be a list of [x, seconds] pairs (got {curve!r})"
        ) from None
    if len(points) > MAX_CURVE_POINTS:
        raise DeviceSpecError(
            f"profile {name!r}: {what} has {len(points)} points (at most {MAX_CURVE_POINTS}); a "
            "measured curve has tens: measure it again with `partition-explorer calibrate`"
        )
    if not points or any(not (x > 0 and 0 < y < 3600 and math.isfinite(x) and math.isfinite(y)) for x, y in points):
        raise DeviceSpecError(
            f"profile {name!r}: {what} needs positive, finite [x, seconds] pairs (got {curve!r}); "
            "measure it again with `partition-explorer calibrate`"
        )
    return points


@dataclass(frozen=True)
class DeviceProfile:
    """What ``partition-explorer calibrate`` measured on one machine (see the module doc)."""

    name: str
    memory_bytes: int
    op_overhead_s: float  # one function op on a tiny tensor
    module_overhead_s: float  # one nn.Module call of a tiny Linear, beyond its op
    matmul: tuple[tuple[str, Curve], ...]  # dtype -> (FLOPs, seconds) of square Linear ops (addmm)
    copy: Curve  # (bytes moved, seconds) of an elementwise op reading and writing
    collectives: tuple[tuple[str, int, AlphaBeta], ...] = ()  # (kind, processes, fit)
    sharded_module_overhead_s: float = 0.0  # a tensor-parallel module call beyond a plain one (DTensor)
    pipeline_action_s: tuple[tuple[int, float], ...] = ()  # (stages, seconds a pipelining action costs)
    slowdown: tuple[tuple[int, float], ...] = ((1, 1.0),)  # (ranks computing at once, time factor)
    barrier_s: tuple[tuple[int, float], ...] = ()  # (processes, seconds a barrier adds after compute)
    dtensor_module_s: tuple[
        tuple[int, float], ...
    ] = ()  # (processes, DTensor dispatch of a sharded Linear, all ranks at once)
    training_step_factor: float = 3.0  # forward + backward over forward, measured (3: the FLOP count's rule)
    elementwise: tuple[tuple[str, Curve], ...] = ()  # kind (ELEMENTWISE_KINDS) -> (bytes moved, seconds)
    graph_op_overhead_s: float = 0.0  # one small op inside a traced module's forward (0: not measured)
    cores: int = 1
    backend: str = "gloo"
    host: str = ""
    load_average: float = 0.0  # the machine's 1-minute load when it was measured
    measured_at: str = ""
    calibration_s: float = 0.0
    gpu: GpuKernels | None = None  # a GPU's kernel curves: ops are priced by them (NOTE: [Eager launch queue])
    engine: str = "eager"  # what the times assume (partitioner.kernels.ENGINES)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise DeviceSpecError(f"profile name must be 1-64 letters, digits, '_', '.', '-' (got {self.name!r})")
        for field in ("op_overhead_s", "module_overhead_s", "sharded_module_overhead_s", "graph_op_overhead_s"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise DeviceSpecError(f"profile {self.name!r}: {field} must be seconds in [0, 1) (got {value!r})")
        if not isinstance(self.memory_bytes, int) or not 0 < self.memory_bytes <= 2**60:
            raise DeviceSpecError(
                f"profile {self.name!r}: memory_bytes must be an integer in [1, 2**60] (got {self.memory_bytes!r})"
            )
        if not self.matmul:
            raise DeviceSpecError(f"profile {self.name!r}: matmul needs at least one dtype's curve")
        if not self.slowdown or any(not (k >= 1 and 0 < f < 1e6) for k, f in self.slowdown):
            raise DeviceSpecError(
                f"profile {self.name!r}: slowdown needs (ranks >= 1, factor in (0, 1e6)) pairs (got {self.slowdown!r})"
            )
        ts = self.training_step_factor
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not 1 <= ts <= 100:
            raise DeviceSpecError(
                f"profile {self.name!r}: training_step_factor must be in [1, 100] (a step over "
                f"its forward; 3 by the FLOP count) (got {ts!r})"
            )
        for field in ("pipeline_action_s", "barrier_s", "dtensor_module_s"):
            pairs = getattr(self, field)
            if len(pairs) > 4096 or any(not (1 <= k <= 1_000_000 and 0 <= t < 60) for k, t in pairs):
                raise DeviceSpecError(
                    f"profile {self.name!r}: {field} needs (count in [1, 1e6], seconds in "
                    f"[0, 60)) pairs (got {pairs[:4]!r}...)"
                )
        for kind, n, ab in self.collectives:
            if not (1 <= n <= 1_000_000 and 0 <= ab.latency_s < 60 and 1e3 <= ab.bandwidth_bytes_per_s < 1e16):
                raise DeviceSpecError(
                    f"profile {self.name!r}: collective {kind!r} at {n} processes needs latency_s in [0, 60) and "
                    f"bandwidth_bytes_per_s in [1e3, 1e16) (got {ab.latency_s!r}, {ab.bandwidth_bytes_per_s!r})"
                )
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or not 1 <= self.cores <= 100_000:
            raise DeviceSpecError(
                f"profile {self.name!r}: cores must be an integer in [1, 100000] (got {self.cores!r})"
            )
        if (
            self.engine not in ENGINES
            or len(self.collectives) > 4096
            or len(self.elementwise) > 64
            or len(self.matmul) > 16
        ):
            raise DeviceSpecError(
                f"profile {self.name!r}: engine must be one of {', '.join(ENGINES)} (got {self.engine!r}) "
                "and its curves as many as a measurement makes"
            )

    @property
    def assumes(self) -> str:
        """What this profile's times assume, in words (for the page and reports)."""
        if self.gpu is None:
            return f"measured on this host ({self.cores} cores, {self.backend}): ops as timed in place, unfused"
        return f"{ENGINES[self.engine]}; {self.gpu.derived_from or f'kernel curves measured on {self.gpu.gpu}'}"

    def with_engine(self, engine: str) -> "DeviceProfile":
        """The same profile under another engine (:data:`partitioner.kernels.ENGINES`)."""
        if engine not in ENGINES:
            raise DeviceSpecError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
        return dataclasses.replace(self, engine=engine)

    # --- the curves
    def matmul_seconds(self, flops: float, dtype: str | None = None) -> float:
        """Measured time of a matmul of ``flops`` (overhead included) at ``dtype`` (float32 when
        the profile has not measured it)."""
        curves = dict(self.matmul)
        curve = curves.get(_dtype_name(dtype)) or curves.get("float32") or self.matmul[0][1]
        return _interp(curve, flops)

    def flops_per_s(self, flops: float, dtype: str | None = None) -> float:
        """The efficiency curve: achieved FLOP/s at ``flops`` (NOTE: [Op time from a profile])."""
        t = self.matmul_seconds(flops, dtype)
        return flops / max(t - self.op_overhead_s, 0.05 * t)

    def bandwidth_bytes_per_s(self, nbytes: float) -> float:
        t = _interp(self.copy, max(nbytes, 1.0))
        return max(nbytes, 1.0) / max(t - self.op_overhead_s, 0.05 * t)

    def op_seconds(
        self,
        flops: float,
        moved_bytes: float,
        dtype: str | None = None,
        op: str = "call_function",
        target: str = "",
        kind: str = "",
    ) -> tuple[float, float]:
        """(memory seconds, compute seconds) of one op, each with its overhead (NOTE: [Op time
        from a profile]). ``kind``: a module's type name (``"GELU"``), for its measured curve."""
        overhead = self.module_overhead_s + self.op_overhead_s if op == "call_module" else self.op_overhead_s
        # Inside a model's forward an op pays more than in a tight loop of one op (the generated
        # code's Python, allocations, caches shared with the ops around it): the measured extra.
        extra = max(0.0, self.graph_op_overhead_s - self.op_overhead_s)
        overhead += extra
        short = target.rpartition(".")[2].strip("_").removesuffix(".default").lower()
        if op != "call_module" and (short in _FREE_OPS or short.split(".")[0] in _FREE_OPS):
            return (overhead, overhead)
        curves = {_kind_key(k): c for k, c in self.elementwise}
        curve = curves.get(_kind_key(kind or ("" if op == "call_module" else short.split(".")[0])))
        if curve is not None and moved_bytes > 0:  # measured through the op itself, its dispatch included
            t = _interp(curve, moved_bytes) + extra + (self.module_overhead_s if op == "call_module" else 0.0)
            return (t, t)
        mem = moved_bytes / self.bandwidth_bytes_per_s(moved_bytes) if moved_bytes > 0 else 0.0
        compute = flops / self.flops_per_s(flops, dtype) if flops > 0 else 0.0
        return (overhead + mem, overhead + compute)

    def elementwise_rate(self, kind: str) -> float:
        """Bytes moved a second by ``kind`` at the largest size measured (0 when not measured)."""
        curve = dict(self.elementwise).get(kind)
        return curve[-1][0] / curve[-1][1] if curve else 0.0

    def collective(self, kind: str, processes: int) -> AlphaBeta | None:
        """The alpha-beta fit of ``kind`` at ``processes`` (the nearest measured count), or None."""
        fits = [(abs(n - processes), n, ab) for k, n, ab in self.collectives if k == kind]
        return min(fits, key=lambda f: (f[0], -f[1]))[2] if fits else None

    def collective_s(self, kind: str, nbytes: float, processes: int) -> float:
        if processes <= 1:
            return 0.0
        fit = self.collective(kind, processes)
        return fit.seconds(nbytes) if fit else 0.0

    def slowdown_for(self, ranks: int) -> float:
        """How much longer each rank computes when ``ranks`` compute at once on these cores
        (interpolated linearly between measured counts, held beyond the last one's per-rank rate)."""
        points = sorted(self.slowdown)
        if ranks <= points[0][0]:
            return points[0][1]
        for (k0, f0), (k1, f1) in zip(points, points[1:]):
            if ranks <= k1:
                return f0 + (f1 - f0) * (ranks - k0) / (k1 - k0)
        k, f = points[-1]
        return f * ranks / k

    def barrier_for(self, processes: int) -> float:
        """Seconds a process-group barrier of ``processes`` adds after compute, at the nearest
        measured count (0 when none was measured, or for one process)."""
        return _nearest(self.barrier_s, processes) if processes > 1 else 0.0

    def dtensor_module_for(self, processes: int) -> float:
        """DTensor's dispatch of one sharded module call (its input wrapped, its op dispatched,
        its output unwrapped) on ``processes`` ranks at once: measured in place at the nearest
        count, else the one-rank figure ``sharded_module_overhead_s`` times the slowdown."""
        if self.dtensor_module_s:
            return _nearest(self.dtensor_module_s, processes)
        return self.sharded_module_overhead_s * self.slowdown_for(processes)

    def pipeline_action_for(self, stages: int) -> float:
        """Seconds one action of a pipelining schedule costs beyond its compute and transfer, at
        the nearest measured stage count (0 when none was measured)."""
        return _nearest(self.pipeline_action_s, stages)

    # --- the figures a flat-peak consumer reads
    @property
    def peak_flops(self) -> float:
        """The best measured FLOP/s of any dtype and size."""
        return max(self.flops_per_s(x, dtype) for dtype, curve in self.matmul for x, _ in curve)

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return max(self.bandwidth_bytes_per_s(x) for x, _ in self.copy)

    @property
    def link(self) -> AlphaBeta | None:
        """Point-to-point between two ranks: the hand-off measured between computing ranks where
        the profile has it (what a run's transfer costs), else the ping-pong fit."""
        return self.collective("handoff", 2) or self.collective("p2p", 2)

    # --- JSON
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": PROFILE_KIND,
            "schema_version": SCHEMA_VERSION,
            "name": self.name,
            "memory_bytes": self.memory_bytes,
            "op_overhead_s": self.op_overhead_s,
            "module_overhead_s": self.module_overhead_s,
            "sharded_module_overhead_s": self.sharded_module_overhead_s,
            "matmul": {dtype: [list(p) for p in curve] for dtype, curve in self.matmul},
            "copy": [list(p) for p in self.copy],
            "collectives": [
                {
                    "kind": k,
                    "processes": n,
                    "latency_s": ab.latency_s,
                    "bandwidth_bytes_per_s": ab.bandwidth_bytes_per_s,
                }
                for k, n, ab in self.collectives
            ],
            "slowdown": [list(p) for p in self.slowdown],
            "pipeline_action_s": [list(p) for p in self.pipeline_action_s],
            "barrier_s": [list(p) for p in self.barrier_s],
            "dtensor_module_s": [list(p) for p in self.dtensor_module_s],
            "training_step_factor": self.training_step_factor,
            "elementwise": {kind: [list(p) for p in curve] for kind, curve in self.elementwise},
            "graph_op_overhead_s": self.graph_op_overhead_s,
            "cores": self.cores,
            "backend": self.backend,
            "host": self.host,
            "load_average": self.load_average,
            "measured_at": self.measured_at,
            "calibration_s": self.calibration_s,
            "engine": self.engine,
            **({"gpu": self.gpu.to_dict()} if self.gpu is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DeviceProfile":
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
                    (str(dtype), _check_curve(name, f"matmul[{dtype}]", curve))
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
            return cls(
                name=name,
                memory_bytes=int(data["memory_bytes"]),
                op_overhead_s=float(data["op_overhead_s"]),
                module_overhead_s=float(data["module_overhead_s"]),
                matmul=matmul,
                copy=_check_curve(name, "copy", data["copy"]),
                collectives=collectives,
                sharded_module_overhead_s=float(data.get("sharded_module_overhead_s", 0.0)),
                slowdown=tuple(sorted((int(k), float(f)) for k, f in data.get("slowdown", [[1, 1.0]]))),
                pipeline_action_s=_pairs(data, "pipeline_action_s"),
                barrier_s=_pairs(data, "barrier_s"),
                dtensor_module_s=_pairs(data, "dtensor_module_s"),
                training_step_factor=float(data.get("training_step_factor", 3.0)),
                elementwise=tuple(
                    sorted(
                        (str(k), _check_curve(name, f"elementwise[{k}]", c))
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

    def save(self, path: str | Path) -> Path:
        """Write the profile as JSON (atomically: a temporary file renamed over the target)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(target)
        return target


def _nearest(points: Sequence[tuple[int, float]], count: int) -> float:
    """The value at the measured count nearest ``count`` (the larger on a tie); 0 when none."""
    return min(points, key=lambda p: (abs(p[0] - count), -p[0]))[1] if points else 0.0


def _pairs(data: Mapping[str, Any], key: str) -> tuple[tuple[int, float], ...]:
    pairs = tuple(sorted((int(k), float(f)) for k, f in data.get(key, [])))
    if any(not math.isfinite(f) for _, f in pairs):
        raise DeviceSpecError(f"device profile field {key} needs finite values (got {pairs[:4]!r})")
    return pairs


def _dtype_name(dtype: str | None) -> str:
    return (dtype or "float32").removeprefix("torch.")


def load_profile(path: str | Path) -> DeviceProfile:
    """A profile from a JSON file; :class:`DeviceSpecError` naming the file and the fix."""
    source = Path(path)
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeviceSpecError(
            f"device profile {str(source)!r} does not exist; write it with "
            f"`partition-explorer calibrate --out {source}`"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DeviceSpecError(f"cannot read device profile {str(source)!r} ({type(exc).__name__}: {exc})") from None
    return DeviceProfile.from_dict(data)


def find_profile(name: str) -> DeviceProfile | None:
    """The cached profile called ``name``, or None when there is none."""
    if not _NAME.match(name) or cache_off():
        return None
    path = cache_dir() / f"{name}.json"
    return load_profile(path) if path.is_file() else None
