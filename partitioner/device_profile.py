"""A device profile measured on the machine it describes: what the cost model needs in place of a
flat peak (torch-free; :mod:`partitioner.calibration.host` measures one).

A profile holds curves, not single figures: matmul seconds by FLOPs per dtype (the efficiency
curve), elementwise seconds by bytes moved (the bandwidth curve), the dispatch overhead of one op
and of one module call, alpha-beta fits (latency + bytes / bandwidth) of point-to-point sends and
of collectives per process count, and how much slower a rank computes when several ranks share
the cores. Beside them, what torch's engines add as runs meet them, measured in place on every
rank at once after compute (NOTE: [Engine costs in place] in
:mod:`partitioner.calibration.distributed`): a barrier, a hand-off between computing ranks, DTensor's
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
view (the op table's views, :mod:`partitioner.op_table`; a module call of ``Identity``, ``Dropout``
or ``Flatten`` too) and casts to the dtype their input has (torch returns the input itself) pay the
overhead alone, as the cost model's kernels launch none for them.
Collectives: alpha-beta (Hockney 1994) per kind and process count, the nearest measured count when
the asked one was not measured.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from partitioner.curves import AlphaBeta, Curve, fit_alpha_beta, interp_through_zero
from partitioner.errors import DeviceSpecError
from partitioner.kernels import ENGINES, GpuKernels
from partitioner.op_table import is_view, module_op, op_name, returns_input
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
from partitioner.profile_schema import MAX_PROFILE_BYTES, SCHEMA_VERSION, check_profile, profile_dict, profile_fields

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

# Ops that compute more than a copy per byte (transcendentals, reductions): each gets its own
# measured (bytes moved, seconds) curve; a module of that type (GELU, LayerNorm...) uses it too.
ELEMENTWISE_KINDS = ("gelu", "layer_norm", "softmax", "silu", "sigmoid", "tanh")


def _kind_key(name: str) -> str:
    return name.replace("_", "").lower()


@dataclass(frozen=True)
class DeviceProfile:
    """What ``partition-explorer calibrate`` measured on one machine (see the module doc)."""

    name: str
    memory_bytes: int
    launch_s: float  # one function op on a tiny tensor, back to back (a GPU's: GpuKernels.launch_s)
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
    # one small op inside a traced module's forward (0: not measured; a GPU's: GpuKernels.host_per_op_s)
    host_per_op_s: float = 0.0
    cores: int = 1
    backend: str = "gloo"
    host: str = ""
    load_average: float = 0.0  # the machine's 1-minute load when it was measured
    measured_at: str = ""
    calibration_s: float = 0.0
    gpu: GpuKernels | None = None  # a GPU's kernel curves: ops are priced by them (NOTE: [Eager launch queue])
    engine: str = "eager"  # what the times assume (partitioner.kernels.ENGINES)

    def __post_init__(self) -> None:
        check_profile(self)

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
        return interp_through_zero(curve, flops)

    def flops_per_s(self, flops: float, dtype: str | None = None) -> float:
        """The efficiency curve: achieved FLOP/s at ``flops`` (NOTE: [Op time from a profile])."""
        t = self.matmul_seconds(flops, dtype)
        return flops / max(t - self.launch_s, 0.05 * t)

    def bandwidth_bytes_per_s(self, nbytes: float) -> float:
        t = interp_through_zero(self.copy, max(nbytes, 1.0))
        return max(nbytes, 1.0) / max(t - self.launch_s, 0.05 * t)

    def op_seconds(
        self,
        flops: float,
        moved_bytes: float,
        dtype: str | None = None,
        op: str = "call_function",
        target: str = "",
        kind: str = "",
        in_dtype: str | None = None,
    ) -> tuple[float, float]:
        """(memory seconds, compute seconds) of one op, each with its overhead (NOTE: [Op time
        from a profile]). ``kind``: a ``call_module``'s type name (``"GELU"``): the op it is, for its
        measured curve. ``in_dtype``: the dtype the op reads (None: unknown), by which a cast to the
        dtype it has costs its dispatch alone (torch returns its input: ``op_table.returns_input``)."""
        overhead = self.module_overhead_s + self.launch_s if op == "call_module" else self.launch_s
        # Inside a model's forward an op pays more than in a tight loop of one op (the generated
        # code's Python, allocations, caches shared with the ops around it): the measured extra.
        extra = max(0.0, self.host_per_op_s - self.launch_s)
        overhead += extra
        name = module_op(kind) if op == "call_module" else op_name(target)
        # No bytes move (NOTE: [One op table] in partitioner.op_table): a view, a cast to its own dtype.
        if is_view(name) or (op != "call_module" and returns_input(name, in_dtype, dtype)):
            return (overhead, overhead)
        curves = {_kind_key(k): c for k, c in self.elementwise}
        curve = curves.get(_kind_key(name))
        if curve is not None and moved_bytes > 0:  # measured through the op itself, its dispatch included
            t = (
                interp_through_zero(curve, moved_bytes)
                + extra
                + (self.module_overhead_s if op == "call_module" else 0.0)
            )
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
        return profile_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DeviceProfile":
        """A profile from its JSON form; :class:`DeviceSpecError` naming the field and the fix."""
        return cls(**profile_fields(data))

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


def _dtype_name(dtype: str | None) -> str:
    return (dtype or "float32").removeprefix("torch.")


def load_profile(path: str | Path) -> DeviceProfile:
    """A profile from a JSON file; :class:`DeviceSpecError` naming the file and the fix."""
    source = Path(path)
    try:
        size = source.stat().st_size if source.is_file() else 0
        if size > MAX_PROFILE_BYTES:
            raise DeviceSpecError(
                f"device profile {str(source)[:200]!r} is {size:,} bytes (at most {MAX_PROFILE_BYTES:,}; a "
                "measured one is about 20 KB); measure it again with `partition-explorer calibrate`"
            )
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
