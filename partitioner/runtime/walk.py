"""What each rank of a plan's run executes: one walk of the split module's graph, computing the
partitions it owns, sending their outputs to the ranks that read them and receiving what it reads
(:func:`partitioner.runtime.execute.run` starts the ranks).

# NOTE: [One walk, every rank]
Send and receive pair up because every rank visits the producer of a value at the same point of
one global order, and tags carry the producer's position. Shapes of what crosses come from one
run of the split module in the parent (the reference outputs), so receivers allocate exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from partitioner.errors import RunError
from partitioner.processes.launch import report_progress
from partitioner.processes.timing import median_by_key, step_seconds

__all__ = ["rank_entry", "RankResult", "RankTimings"]


@dataclass(frozen=True)
class RankTimings:
    """One rank's median walk: seconds computing each submodule it owns, seconds waiting for each
    value it receives, and the bytes of each."""

    compute_s: dict[str, float]
    wait_s: dict[str, float]
    received_bytes: dict[str, int]


@dataclass(frozen=True)
class RankResult:
    """What a rank sends back: the outputs (rank 0), its median end-to-end walk, its timings."""

    outputs: Any
    latency_s: float
    timings: RankTimings


def _tensors(value: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(value)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def _glue(gm: fx.GraphModule, n: fx.Node, env: dict[str, Any]) -> Any:
    """Run a node of the split module's own graph that is not a partition (getitem, a method on
    a partition's output, an attribute)."""
    a = fx.graph.map_arg(n.args, lambda x: env[x.name])
    k = fx.graph.map_arg(n.kwargs, lambda x: env[x.name])
    if n.op == "call_function":
        return n.target(*a, **k)  # type: ignore[operator]
    if n.op == "call_method":
        return getattr(a[0], str(n.target))(*a[1:], **k)
    if n.op == "get_attr":
        value = gm
        for part in str(n.target).split("."):
            value = getattr(value, part)
        return value
    raise RunError(f"node {n.name} ({n.op}) cannot run in a split module")


def rank_entry(
    rank: int,
    world_size: int,
    gm: fx.GraphModule,
    owners: dict[str, tuple[int, ...]],
    inputs: tuple[Any, ...],
    shapes: dict[str, Any],
    repeats: int,
) -> RankResult:
    """What each rank runs (see NOTE: [One walk, every rank])."""
    with torch.no_grad():
        return _walk(rank, world_size, gm, owners, inputs, shapes, repeats)


def _walk(
    rank: int,
    world_size: int,
    gm: fx.GraphModule,
    owners: dict[str, tuple[int, ...]],
    inputs: tuple[Any, ...],
    shapes: dict[str, Any],
    repeats: int,
) -> RankResult:
    nodes = list(gm.graph.nodes)
    position = {n.name: i for i, n in enumerate(nodes)}
    # Ranks that need each value: a partition's owners, rank 0 for the model's outputs, and for
    # glue (getitem on a partition's tuple) whoever needs the glue's result.
    need: dict[str, set[int]] = {n.name: set() for n in nodes}
    for n in reversed(nodes):
        if n.op == "output":
            ranks = {0}
        elif n.op == "call_module":
            ranks = set(owners[n.name])
        else:
            ranks = need[n.name]
        for arg in n.all_input_nodes:
            need[arg.name] |= ranks
    walks: list[float] = []
    samples: list[tuple[dict[str, float], dict[str, float], dict[str, int]]] = []
    outputs: Any = None
    for attempt in range(repeats + 1):  # the first walk warms up (allocations, lazy init)
        env: dict[str, Any] = {}
        pending: list[Any] = []
        compute: dict[str, float] = {}
        wait: dict[str, float] = {}
        received: dict[str, int] = {}
        args = iter(inputs)
        dist.barrier()
        start = time.perf_counter()
        for n in nodes:
            if n.op == "placeholder":
                env[n.name] = next(args)
                continue
            if n.op == "output":
                if rank == 0:
                    outputs = fx.graph.map_arg(n.args[0], lambda a: env[a.name])
                break
            if n.op != "call_module":  # glue: runs wherever its input is
                if all(a.name in env for a in n.all_input_nodes):
                    env[n.name] = _glue(gm, n, env)
                continue
            own = owners[n.name]
            if rank in own:
                a = fx.graph.map_arg(n.args, lambda x: env[x.name])
                k = fx.graph.map_arg(n.kwargs, lambda x: env[x.name])
                t0 = time.perf_counter()
                try:
                    env[n.name] = gm.get_submodule(str(n.target))(*a, **k)
                except Exception as exc:
                    raise RunError(
                        f"partition {str(n.target).rsplit('_', 1)[1]} failed on rank {rank}: "
                        f"{type(exc).__name__}: {exc}",
                        rank=rank,
                    ) from exc
                compute[n.name] = time.perf_counter() - t0
            to = sorted(need[n.name] - set(own))
            if rank == own[0]:
                for dst in to:
                    for j, t in enumerate(_tensors(env[n.name])):
                        pending.append(dist.isend(t.contiguous(), dst, tag=position[n.name] * 64 + j))
            elif rank in to:
                meta, spec = shapes[n.name]
                t0 = time.perf_counter()
                parts = []
                for j, (shape, dtype) in enumerate(meta):
                    buf = torch.empty(shape, dtype=dtype)
                    dist.recv(buf, own[0], tag=position[n.name] * 64 + j)
                    parts.append(buf)
                wait[n.name] = time.perf_counter() - t0
                received[n.name] = sum(t.numel() * t.element_size() for t in parts)
                env[n.name] = tree_unflatten(parts, spec)
        for work in pending:
            work.wait()
        dist.barrier()
        took = time.perf_counter() - start
        if attempt > 0 or not repeats:  # the first walk is a warm-up when there are timed ones
            walks.append(took)
            samples.append((compute, wait, received))
        report_progress(f"walk {attempt + 1} of {repeats + 1} done")
    timings = RankTimings(
        median_by_key([c for c, _, _ in samples]),
        median_by_key([w for _, w, _ in samples]),
        samples[-1][2] if samples else {},
    )
    return RankResult(outputs, step_seconds(walks), timings)
