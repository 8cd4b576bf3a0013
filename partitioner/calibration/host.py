"""Measure this machine as a device profile (``partition-explorer calibrate``): matmul throughput
by size and dtype, memory bandwidth by size, the dispatch overhead of an op and of a module call,
how much slower ranks compute when several share the cores, and point-to-point, all-reduce and
all-gather latency and bandwidth between processes.

Everything runs on ranks started by :func:`partitioner.processes.launch.launch` (fresh interpreters,
one thread each, as every real run here starts them), so the figures are those a run's ranks see:
rank 0 times the ops alone while the others wait in a barrier, then 1, 2 and all ranks time the
same matmuls at once (the slowdown), then the collectives run on 2 ranks (a subgroup) and on all, raw and through DTensor, and a
pipelining schedule's action is timed (:mod:`partitioner.calibration.distributed`).
Each figure is the median of several timed repeats. The result is a
:class:`~partitioner.device_profile.DeviceProfile`, cached under
:func:`~partitioner.device_profile.cache_dir` by :func:`local_profile`. About 15 s of timing on top
of the processes' start (torch's import).
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from partitioner.calibration.distributed import EngineCosts, engine_costs
from partitioner.calibration.loops import budget_median_s, loop_median_s
from partitioner.calibration.naming import load_now, utc_now
from partitioner.calibration.ops import measure_ops
from partitioner.curves import AlphaBeta
from partitioner.device_profile import (
    DeviceProfile,
    cache_off,
    find_profile,
    fit_alpha_beta,
    profile_path,
)
from partitioner.errors import PartitionError
from partitioner.units import GiB

__all__ = ["calibrate", "local_profile", "host_memory_bytes", "CalibrationRank", "MESSAGE_BYTES"]

MESSAGE_BYTES = (4, 1024, 16384, 1 << 20, 1 << 21, 1 << 22)


SLOWDOWN_REPEATS = 5


def _slowdown(rank: int, world_size: int) -> dict[int, list[float]]:
    """This rank's seconds for one fixed loop of 128 x 128 matmuls, with 1, 2 and all ranks
    computing it at once (NOTE: [A robust shared-core factor]): ``{ranks at once: [seconds per
    repeat]}``, for the counts this rank took part in."""
    import torch
    import torch.distributed as dist

    x, y = torch.randn(128, 128), torch.randn(128, 128)
    loops = torch.zeros(1, dtype=torch.int64)
    if rank == 0:  # one loop size for every rank: about 20 ms alone
        one = loop_median_s(lambda: torch.mm(x, y), 20, 3)
        loops[0] = max(5, min(5000, int(0.02 / max(one, 1e-7))))
    dist.broadcast(loops, 0)
    n = int(loops[0])
    counts = sorted({1, 2, world_size} & set(range(1, world_size + 1)))
    busy: dict[int, list[float]] = {k: [] for k in counts if rank < k}
    torch.mm(x, y)
    for _ in range(SLOWDOWN_REPEATS):  # interleaved: the machine's load moves between repeats
        for k in counts:
            dist.barrier()
            if rank < k:
                start = time.perf_counter()
                for _ in range(n):
                    torch.mm(x, y)
                busy[k].append(time.perf_counter() - start)
            dist.barrier()
    return busy


def _messages(rank: int, ranks: list[int], group: Any, kind: str) -> list[tuple[float, float]]:
    """(bytes, seconds) of ``kind`` among ``ranks`` (the group), median of repeats; p2p is half a
    ping-pong between the first two."""
    import torch
    import torch.distributed as dist

    points = []
    for nbytes in MESSAGE_BYTES:
        t = torch.ones(max(1, nbytes // 4))
        out = [torch.empty_like(t) for _ in ranks]
        times = []
        for i in range(12 if nbytes < 1 << 20 else 6):
            dist.barrier(group=group)
            start = time.perf_counter()
            if kind == "p2p":
                if rank == ranks[0]:
                    dist.send(t, ranks[1])
                    dist.recv(t, ranks[1])
                else:
                    dist.recv(t, ranks[0])
                    dist.send(t, ranks[0])
                took = (time.perf_counter() - start) / 2
            elif kind == "all_reduce":
                dist.all_reduce(t, group=group)
                took = time.perf_counter() - start
            else:
                dist.all_gather(out, t, group=group)
                took = time.perf_counter() - start
            if i:  # the first is a warm-up
                times.append(took)
        points.append((float(t.nbytes), statistics.median(times)))
    return points


@dataclass(frozen=True)
class CalibrationRank:
    """What one calibration rank sends back across the process boundary: its op timings (rank 0),
    its slowdown with the others computing, its message curves and DTensor overhead (ranks 0
    and 1) and what torch's engines cost in place."""

    busy: Any
    engines: EngineCosts
    ops: dict[str, Any] | None = None
    collectives: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    sharded: float = 0.0


def _entry(rank: int, world_size: int) -> CalibrationRank:
    import torch.distributed as dist

    dist.barrier()
    ops = measure_ops() if rank == 0 else None
    dist.barrier()
    busy = _slowdown(rank, world_size)
    pair = dist.new_group([0, 1]) if world_size > 2 else None
    collectives: dict[str, list[tuple[float, float]]] = {}
    for kind in ("p2p", "all_reduce", "all_gather"):
        if rank < 2:
            collectives[f"{kind}:2"] = _messages(rank, [0, 1], pair, kind)
        dist.barrier()
        if world_size > 2 and kind != "p2p":
            collectives[f"{kind}:{world_size}"] = _messages(rank, list(range(world_size)), None, kind)
    sharded = _sharded_overhead(rank, world_size)
    engines = engine_costs(rank, world_size)
    if rank not in (0, 1):
        return CalibrationRank(busy, engines)
    return CalibrationRank(busy, engines, ops, collectives, sharded)


def _sharded_overhead(rank: int, world_size: int) -> float:
    """What a tensor-parallel module call costs beyond the plain one: DTensor's wrapping of the
    input and unwrapping of the output (a column-parallel Linear with a sharded output moves no
    data), timed on rank 0 while the others wait."""
    import copy

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    mesh = init_device_mesh("cuda" if dist.get_backend() == "nccl" else "cpu", (world_size,))
    plain = torch.nn.Linear(8, 8 * world_size)
    sharded = parallelize_module(copy.deepcopy(plain), mesh, ColwiseParallel(output_layouts=Shard(-1)))
    x = torch.ones(2, 8)
    extra = 0.0
    dist.barrier()
    if rank == 0:
        with torch.no_grad():
            extra = statistics.median(
                budget_median_s(lambda: sharded(x), 0.03) - budget_median_s(lambda: plain(x), 0.03) for _ in range(3)
            )
    dist.barrier()
    return max(0.0, extra)


def host_memory_bytes() -> int:
    """This machine's physical memory (16 GiB where the system does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 16 * GiB


def calibrate(
    name: str = "local", processes: int = 4, *, timeout_s: float = 180.0, progress: Callable[[str], None] | None = None
) -> DeviceProfile:
    """Measure this machine on ``processes`` local ranks (2 to 8) and return its profile (not
    saved: see :func:`local_profile`). Raises :class:`RunError` when a rank fails."""
    from partitioner.processes.launch import launch

    if not 2 <= processes <= 8:
        raise PartitionError(
            f"calibration runs on 2 to 8 processes (got {processes}); 4 measures what runs of 2 and 4 processes see"
        )
    began = time.perf_counter()
    load = load_now()  # before the ranks add their own
    # NOTE: [Calibration measures the host] The ops, collectives and engine costs are timed on CPU
    # tensors over gloo, what runs here use; a GPU's profile (CUDA tensors, NCCL, one GPU a rank)
    # is not measured yet, so on a GPU machine this still describes its host.
    backend = "gloo"
    results = launch(_entry, processes, (), timeout_s=timeout_s, backend=backend, progress=progress)
    return _profile(name, results, backend, load, began)


def _profile(name: str, results: list[CalibrationRank], backend: str, load: float, began: float) -> DeviceProfile:
    """The profile the ranks' measurements make: rank 0's ops, the shared-core factors, the
    collective fits and the engines' costs at the slowest rank, and this machine's description."""
    ops = results[0].ops
    assert ops is not None  # rank 0 always times the ops
    engines = [r.engines for r in results]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return DeviceProfile(
        name=name,
        memory_bytes=host_memory_bytes(),
        launch_s=ops["launch"],
        module_overhead_s=ops["module"],
        training_step_factor=ops["backward"],
        elementwise=tuple(sorted((k, tuple(sorted(c))) for k, c in ops["elementwise"].items())),
        host_per_op_s=ops["host_per_op"],
        sharded_module_overhead_s=results[0].sharded,
        matmul=tuple(sorted((d, tuple(sorted(c))) for d, c in ops["matmul"].items())),
        copy=tuple(sorted(ops["copy"])),
        collectives=tuple(sorted(_collective_fits(results))),
        slowdown=_shared_core_factors([r.busy for r in results]),
        pipeline_action_s=_slowest(engines, "action"),
        barrier_s=_slowest(engines, "barrier"),
        dtensor_module_s=_slowest(engines, "column"),
        cores=cores,
        backend=backend,
        host=socket.gethostname(),
        load_average=load,
        measured_at=utc_now(),
        calibration_s=round(time.perf_counter() - began, 2),
    )


# NOTE: [A robust shared-core factor] Each repeat's factor is the mean of the k ranks' loop
# times over rank 0's time alone in the same repeat (the load seen a moment apart), and the
# profile keeps the median over repeats: one repeat disturbed by another job moves nothing.
# Ranks sharing the cores never compute faster than one alone: a factor below 1 is the other
# jobs' load falling between repeats, held at 1.
def _shared_core_factors(busy: list[dict[int, list[float]]]) -> tuple[tuple[int, float], ...]:
    """(ranks computing at once, how much longer each computes) from every rank's loop times
    (NOTE: [A robust shared-core factor]); 1 rank: 1."""
    repeats = range(len(busy[0][1]))
    factors = [
        (k, max(1.0, statistics.median(statistics.mean(b[k][r] for b in busy[:k]) / busy[0][1][r] for r in repeats)))
        for k in sorted(busy[0])
        if k > 1
    ]
    return ((1, 1.0), *factors)


def _collective_fits(results: list[CalibrationRank]) -> list[tuple[str, int, AlphaBeta]]:
    """(kind, processes, alpha-beta fit) of each collective ranks 0 and 1 timed (the slower of the
    two at each size), then of each engine cost measured in place (the slowest rank's)."""
    collectives = []
    for key, points in sorted(results[0].collectives.items()):
        kind, _, count = key.partition(":")
        other = results[1].collectives.get(key, points)
        worst = [(x, max(y, y2)) for (x, y), (_, y2) in zip(points, other)]
        collectives.append((kind, int(count), fit_alpha_beta(worst)))
    engines = [r.engines for r in results]
    for key, kind in (
        ("row", "dtensor_all_reduce"),
        ("handoff", "handoff"),
        ("concurrent_row", "concurrent_dtensor_all_reduce"),
        ("concurrent_all_reduce", "concurrent_all_reduce"),
    ):
        for n in sorted(getattr(engines[0], key)):  # the slowest rank's time at each size
            points = [
                (x, max(getattr(e, key)[n][i][1] for e in engines if getattr(e, key).get(n)))
                for i, (x, _) in enumerate(getattr(engines[0], key)[n])
            ]
            collectives.append((kind, n, fit_alpha_beta(points)))
    return collectives


def _slowest(engines: list[EngineCosts], key: str) -> tuple[tuple[int, float], ...]:
    """(count, seconds) of the engine cost ``key`` at each count rank 0 measured, the slowest rank's."""
    return tuple(
        (n, max(getattr(e, key)[n] for e in engines if n in getattr(e, key))) for n in sorted(getattr(engines[0], key))
    )


def local_profile(
    name: str = "local", *, refresh: bool = False, processes: int = 4, progress: Callable[[str], None] | None = None
) -> DeviceProfile:
    """The cached profile ``name``; measured (and cached) when there is none or ``refresh``. With
    the cache off (``PARTITION_EXPLORER_CACHE=off``) measured each time and kept nowhere."""
    if not refresh:
        found = find_profile(name)
        if found is not None:
            return found
    profile = calibrate(name, processes, progress=progress)
    if not cache_off():
        profile.save(profile_path(name))
    return profile
