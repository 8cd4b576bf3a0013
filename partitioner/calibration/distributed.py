"""What torch's distributed engines add on this machine, measured inside a calibration's ranks
the way runs meet them (NOTE: [Engine costs in place]): a process-group barrier, a point-to-point
hand-off between ranks that compute, a column-parallel Linear's DTensor dispatch and a
Colwise -> Rowwise pair's all-reduce through DTensor (``parallelize_module``), and one action of a
``torch.distributed.pipelining`` schedule, each on the first two ranks and on all of them.

Every rank runs the same number of timed calls (collectives must pair up), so the loops are
fixed here rather than sized by a first call.

# NOTE: [Engine costs in place]
A collective timed back to back after a barrier is cheap: every rank is awake and waiting. In a
run it follows compute, its peers arrive at different times and a waiting rank has slept; on
this 2-core machine shared by 4 ranks a gloo all-reduce of 64 KiB took 0.3 ms back to back and
0.7-1.6 ms between matmuls. So each cost is measured with compute before it, on every rank of
the group at once, as the difference between the loop with the engine and the same loop without
it: ``(mm; barrier)`` minus ``mm``; a ring where each rank receives, multiplies and sends, minus
the multiplies; a chain of K column-parallel Linears minus the same chain of plain Linears of
the local shape (DTensor's dispatch per sharded module); a chain of K Colwise -> ReLU -> Rowwise
pairs minus the plain chain and the column-parallel part (the row-parallel Linear's dispatch and
its all-reduce, as alpha-beta over the bytes reduced).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from partitioner.calibration.loops import loop_median_s
from partitioner.pipeline.steps import step_slots
from partitioner.processes.timing import step_seconds

__all__ = ["engine_costs", "EngineCosts"]

PAIR_ROWS = 16
PAIR_WIDTHS = (64, 512, 2048)  # a pair's shared width: 4 KiB to 128 KiB all-reduced (16 rows, fp32)
HANDOFF_BYTES = (1024, 65536, 1 << 20)
CHAIN = 4  # modules or pairs in a timed chain
PIPELINE_MICROBATCHES = 4


def _work() -> Callable[[], Any]:
    """A fixed piece of compute (a 96 x 96 matmul, tens of microseconds) to stand between calls."""
    import torch

    a, b = torch.randn(96, 96), torch.randn(96, 96)
    return lambda: torch.mm(a, b)


def _barrier(rank: int, ranks: list[int], group: Any) -> float:
    """Seconds a barrier of ``ranks`` adds after compute (NOTE: [Engine costs in place])."""
    import torch.distributed as dist

    extra = 0.0
    if rank in ranks:
        work = _work()

        def both() -> None:
            work()
            dist.barrier(group=group)

        dist.barrier(group=group)
        with_barrier = loop_median_s(both, 10, 5)
        dist.barrier(group=group)
        alone = loop_median_s(work, 10, 5)
        extra = max(with_barrier - alone, 1e-7)
    dist.barrier()
    return extra


def _handoff(rank: int, ranks: list[int], group: Any) -> list[tuple[float, float]]:
    """(bytes, seconds a hop adds) of a ring over ``ranks``: each receives, computes about half a
    millisecond (the receiver of the next hop has waited that long), sends on. The compute is
    timed where it runs and summed over the ring, so only the hand-offs remain."""
    import torch
    import torch.distributed as dist

    points: list[tuple[float, float]] = []
    if rank in ranks:
        a = torch.randn(192, 192)
        i, p = ranks.index(rank), len(ranks)
        nxt, prev = ranks[(i + 1) % p], ranks[(i - 1) % p]
        for nbytes in HANDOFF_BYTES:
            t = torch.ones(max(1, nbytes // 4))
            worked = [0.0]

            def work() -> None:
                start = time.perf_counter()
                for _ in range(4):
                    torch.mm(a, a)
                worked[0] += time.perf_counter() - start

            def ring() -> None:
                if i == 0:
                    work()
                    dist.send(t, nxt)
                    dist.recv(t, prev)
                else:
                    dist.recv(t, prev)
                    work()
                    dist.send(t, nxt)

            ring()  # the warm-up
            hops = []
            for _ in range(5):
                dist.barrier(group=group)
                worked[0] = 0.0
                start = time.perf_counter()
                for _ in range(4):
                    ring()
                took = torch.tensor([time.perf_counter() - start if i == 0 else 0.0, worked[0]])
                dist.all_reduce(took, group=group)
                hops.append((float(took[0]) - float(took[1])) / (4 * p))
            points.append((float(t.nbytes), max(step_seconds(hops), 1e-7)))
    dist.barrier()
    return points


def _chains(rank: int, groups: list[list[int]], device: str) -> tuple[float, list[tuple[float, float]]]:
    """(seconds of DTensor dispatch a column-parallel Linear adds, [(bytes all-reduced, seconds a
    row-parallel Linear adds beyond its local compute)]) on this rank's group of ``groups``, every
    group at once (NOTE: [Engine costs in place])."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    meshes = [DeviceMesh(device, torch.tensor(g)) for g in groups]  # every rank joins every mesh's groups
    mine = [k for k, g in enumerate(groups) if rank in g]
    points: list[tuple[float, float]] = []
    column = 0.0
    if mine:
        mesh, ranks = meshes[mine[0]], groups[mine[0]]
        group, n = mesh.get_group(), len(ranks)
        nn = torch.nn
        with torch.no_grad():
            width = PAIR_WIDTHS[1]
            x = torch.ones(PAIR_ROWS, width)
            cols = nn.Sequential(*(nn.Linear(width, width * n) for _ in range(CHAIN)))
            parallelize_module(cols, mesh, {str(k): ColwiseParallel() for k in range(CHAIN)})
            plain = nn.Sequential(*(nn.Linear(width, width) for _ in range(CHAIN)))
            dist.barrier(group=group)
            sharded_s = loop_median_s(lambda: cols(x), 5, 5)
            dist.barrier(group=group)
            column = max((sharded_s - loop_median_s(lambda: plain(x), 5, 5)) / CHAIN, 1e-7)
            for width in PAIR_WIDTHS:
                x = torch.ones(PAIR_ROWS, width)
                layers: list[nn.Module] = []
                local: list[nn.Module] = []
                for _ in range(CHAIN):
                    layers += [nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)]
                    local += [nn.Linear(width, width // n), nn.ReLU(), nn.Linear(width // n, width)]
                pairs = nn.Sequential(*layers)
                parallelize_module(
                    pairs,
                    mesh,
                    {str(3 * k): ColwiseParallel() for k in range(CHAIN)}
                    | {str(3 * k + 2): RowwiseParallel() for k in range(CHAIN)},
                )
                plain = nn.Sequential(*local)
                dist.barrier(group=group)
                sharded_s = loop_median_s(lambda: pairs(x), 5, 5)
                dist.barrier(group=group)
                extra = (sharded_s - loop_median_s(lambda: plain(x), 5, 5)) / CHAIN - column
                points.append((float(PAIR_ROWS * width * 4), max(extra, 1e-7)))
    dist.barrier()
    return column, points


def _back_to_back(rank: int, groups: list[list[int]], handles: list[Any]) -> list[tuple[float, float]]:
    """(bytes, seconds) of all-reduces called back to back on this rank's group of ``groups``,
    every group at once (a data-parallel gradient sync beside its peers in the other groups)."""
    import torch
    import torch.distributed as dist

    points: list[tuple[float, float]] = []
    mine = [k for k, g in enumerate(groups) if rank in g]
    if mine:
        group = handles[mine[0]]
        for nbytes in HANDOFF_BYTES:
            t = torch.ones(max(1, nbytes // 4))
            dist.barrier()
            points.append((float(t.nbytes), loop_median_s(lambda: dist.all_reduce(t, group=group), 8, 5)))
    dist.barrier()
    return points


def _pipeline_action(rank: int, ranks: list[int]) -> float:
    """Seconds a GPipe action costs on ``ranks`` stages of a tiny Linear: the slowest stage's
    median step over the schedule's slots (:func:`partitioner.pipeline.steps.step_slots`, m + p - 1
    for GPipe; as the pipeline runner measures a step)."""
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
            for _ in range(8):
                dist.barrier(group=group)
                start = time.perf_counter()
                schedule.step(x) if i == 0 else schedule.step()
                times.append(time.perf_counter() - start)
        per_action = step_seconds(times[1:]) / step_slots("gpipe", p, PIPELINE_MICROBATCHES)
    dist.barrier()
    return per_action


Points = list[tuple[float, float]]  # (bytes, seconds)


@dataclass(frozen=True)
class EngineCosts:
    """One calibration rank's engine costs, by group size n (2 and the world size): this rank's
    figures (the caller takes the slowest rank's)."""

    barrier: dict[int, float] = field(default_factory=dict)  # seconds a barrier adds after compute
    handoff: dict[int, Points] = field(default_factory=dict)  # a hop between computing ranks
    column: dict[int, float] = field(default_factory=dict)  # DTensor dispatch of a column-parallel Linear
    row: dict[int, Points] = field(default_factory=dict)  # a row-parallel Linear's all-reduce and dispatch
    action: dict[int, float] = field(default_factory=dict)  # one pipelining action (CPU)
    concurrent_row: dict[int, Points] = field(default_factory=dict)  # groups of 2 side by side (4+ ranks)
    concurrent_all_reduce: dict[int, Points] = field(default_factory=dict)


def engine_costs(rank: int, world_size: int) -> EngineCosts:
    """On every rank of a calibration: the barrier, hand-off, column and row figures and (on the
    CPU) a pipelining action, for n = 2 and ``world_size``, and with 4 or more ranks the groups of
    two covering every rank, all at once (:class:`EngineCosts`)."""
    import torch.distributed as dist

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    counts = sorted({2, world_size})
    groups = {n: dist.new_group(list(range(n))) if n < world_size else None for n in counts}
    out = EngineCosts()
    for n in counts:
        ranks = list(range(n))
        out.barrier[n] = _barrier(rank, ranks, groups[n])
        out.handoff[n] = _handoff(rank, ranks, groups[n])
        out.column[n], out.row[n] = _chains(rank, [ranks], device)
        if device == "cpu":
            out.action[n] = _pipeline_action(rank, ranks)
    if world_size >= 4 and world_size % 2 == 0:  # groups of two side by side, as dp x tp runs them
        pairs = [[k, k + 1] for k in range(0, world_size, 2)]
        handles = [dist.new_group(p) for p in pairs]
        out.concurrent_row[2] = _chains(rank, pairs, device)[1]
        out.concurrent_all_reduce[2] = _back_to_back(rank, pairs, handles)
    return out
