"""What torch's distributed engines add on this machine, measured inside a calibration's ranks:
a row-parallel Linear's all-reduce through DTensor (``parallelize_module``), and one action of a
``torch.distributed.pipelining`` schedule (a microbatch's forward on a stage with its send and
receive), each on the first two ranks and on all of them.

Every rank runs the same number of timed calls (collectives must pair up), so the loops are
fixed here rather than sized by a first call.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from partitioner.runtime.timing import step_seconds

__all__ = ["engine_costs", "loop_median_s"]

ROW_WIDTHS = (16, 1024, 16384)  # a row-parallel Linear's output features: 256 B to 256 KiB reduced
PIPELINE_MICROBATCHES = 4


def loop_median_s(fn: Callable[[], Any], loops: int = 10, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean time of ``loops`` calls of ``fn`` (called once first:
    the warm-up; NOTE: [One statistic] in :mod:`partitioner.runtime.timing`)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        times.append((time.perf_counter() - start) / loops)
    return step_seconds(times)


def _row_parallel(rank: int, ranks: list[int], device: str) -> list[tuple[float, float]]:
    """(bytes reduced, seconds beyond the local Linear) of a row-parallel Linear over ``ranks``."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

    mesh = DeviceMesh(device, torch.tensor(ranks))  # every rank joins the mesh's groups
    points: list[tuple[float, float]] = []
    if rank in ranks:
        x = torch.ones(4, 8)
        for width in ROW_WIDTHS:
            plain = torch.nn.Linear(8, width)
            row = parallelize_module(torch.nn.Linear(8 * len(ranks), width), mesh, RowwiseParallel())
            with torch.no_grad():
                dist.barrier(group=mesh.get_group())
                extra = loop_median_s(lambda: row(x)) - loop_median_s(lambda: plain(x))
            points.append((float(4 * width * 4), max(extra, 1e-7)))
    dist.barrier()
    return points


def _pipeline_action(rank: int, ranks: list[int]) -> float:
    """Seconds a GPipe action costs on ``ranks`` stages of a tiny Linear: the slowest stage's
    median step over the schedule's m + p - 1 slots (as the pipeline runner measures a step)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    group = dist.new_group(ranks)
    per_action = 0.0
    if rank in ranks:
        p, i = len(ranks), ranks.index(rank)
        stage = PipelineStage(torch.nn.Linear(4, 4), i, p, torch.device("cpu"), group=group)
        schedule = ScheduleGPipe(stage, n_microbatches=PIPELINE_MICROBATCHES)
        x = torch.ones(2 * PIPELINE_MICROBATCHES, 4)
        times = []
        with torch.no_grad():
            for _ in range(6):
                dist.barrier(group=group)
                start = time.perf_counter()
                schedule.step(x) if i == 0 else schedule.step()
                times.append(time.perf_counter() - start)
        per_action = step_seconds(times[1:]) / (PIPELINE_MICROBATCHES + p - 1)
    dist.barrier()
    return per_action


def engine_costs(rank: int, world_size: int) -> dict[str, Any]:
    """On every rank of a calibration: ``{"row": {processes: points}, "action": {processes: s}}``
    (this rank's figures; the caller takes the slowest rank's)."""
    import torch.distributed as dist

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    counts = sorted({2, world_size})
    row = {n: _row_parallel(rank, list(range(n)), device) for n in counts}
    action = {n: _pipeline_action(rank, list(range(n))) for n in counts} if device == "cpu" else {}
    return {"row": row, "action": action}
