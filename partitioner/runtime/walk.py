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
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class _Route:
    """What every walk of one rank follows: the split module's nodes in their one global order,
    who owns each partition, the shapes that cross, each node's position (the tags) and the ranks
    that need each value."""

    rank: int
    gm: fx.GraphModule
    nodes: list[fx.Node]
    owners: dict[str, tuple[int, ...]]
    shapes: dict[str, Any]
    position: dict[str, int]
    need: dict[str, set[int]]


@dataclass
class _Sample:
    """One walk's figures: seconds computing each owned submodule, seconds waiting for each value
    received, and the bytes of each."""

    compute: dict[str, float] = field(default_factory=dict)
    wait: dict[str, float] = field(default_factory=dict)
    received: dict[str, int] = field(default_factory=dict)


def _walk(
    rank: int,
    world_size: int,
    gm: fx.GraphModule,
    owners: dict[str, tuple[int, ...]],
    inputs: tuple[Any, ...],
    shapes: dict[str, Any],
    repeats: int,
) -> RankResult:
    route = _route(rank, gm, owners, shapes)
    walks: list[float] = []
    samples: list[_Sample] = []
    outputs: Any = None
    for attempt in range(repeats + 1):  # the first walk warms up (allocations, lazy init)
        took, sample, outputs = _one_walk(route, inputs)
        if attempt > 0 or not repeats:  # the first walk is a warm-up when there are timed ones
            walks.append(took)
            samples.append(sample)
        report_progress(f"walk {attempt + 1} of {repeats + 1} done")
    return RankResult(outputs, step_seconds(walks), _median_timings(samples))


def _route(rank: int, gm: fx.GraphModule, owners: dict[str, tuple[int, ...]], shapes: dict[str, Any]) -> _Route:
    nodes = list(gm.graph.nodes)
    position = {n.name: i for i, n in enumerate(nodes)}
    return _Route(rank, gm, nodes, owners, shapes, position, _needs(nodes, owners))


def _needs(nodes: list[fx.Node], owners: dict[str, tuple[int, ...]]) -> dict[str, set[int]]:
    """Ranks that need each value: a partition's owners, rank 0 for the model's outputs, and for
    glue (getitem on a partition's tuple) whoever needs the glue's result."""
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
    return need


def _one_walk(route: _Route, inputs: tuple[Any, ...]) -> tuple[float, _Sample, Any]:
    """One walk between two barriers: its seconds, its figures and (rank 0) the model's outputs."""
    sample = _Sample()
    env: dict[str, Any] = {}
    pending: list[Any] = []
    outputs: Any = None
    args = iter(inputs)
    dist.barrier()
    start = time.perf_counter()
    for n in route.nodes:
        if n.op == "placeholder":
            env[n.name] = next(args)
            continue
        if n.op == "output":
            if route.rank == 0:
                outputs = fx.graph.map_arg(n.args[0], lambda a: env[a.name])
            break
        if n.op != "call_module":  # glue: runs wherever its input is
            if all(a.name in env for a in n.all_input_nodes):
                env[n.name] = _glue(route.gm, n, env)
            continue
        _visit_partition(route, n, env, pending, sample)
    for work in pending:
        work.wait()
    dist.barrier()
    return time.perf_counter() - start, sample, outputs


def _visit_partition(route: _Route, n: fx.Node, env: dict[str, Any], pending: list[Any], sample: _Sample) -> None:
    """A partition's turn: its owners compute it, its first owner sends it to the ranks that need
    it, and each of those receives it."""
    own = route.owners[n.name]
    if route.rank in own:
        env[n.name] = _compute(route, n, env, sample)
    to = sorted(route.need[n.name] - set(own))
    if route.rank == own[0]:
        for dst in to:
            for j, t in enumerate(_tensors(env[n.name])):
                pending.append(dist.isend(t.contiguous(), dst, tag=route.position[n.name] * 64 + j))
    elif route.rank in to:
        env[n.name] = _receive(route, n, own[0], sample)


def _compute(route: _Route, n: fx.Node, env: dict[str, Any], sample: _Sample) -> Any:
    a = fx.graph.map_arg(n.args, lambda x: env[x.name])
    k = fx.graph.map_arg(n.kwargs, lambda x: env[x.name])
    t0 = time.perf_counter()
    try:
        value = route.gm.get_submodule(str(n.target))(*a, **k)
    except Exception as exc:
        raise RunError(
            f"partition {str(n.target).rsplit('_', 1)[1]} failed on rank {route.rank}: {type(exc).__name__}: {exc}",
            rank=route.rank,
        ) from exc
    sample.compute[n.name] = time.perf_counter() - t0
    return value


def _receive(route: _Route, n: fx.Node, src: int, sample: _Sample) -> Any:
    meta, spec = route.shapes[n.name]
    t0 = time.perf_counter()
    parts = []
    for j, (shape, dtype) in enumerate(meta):
        buf = torch.empty(shape, dtype=dtype)
        dist.recv(buf, src, tag=route.position[n.name] * 64 + j)
        parts.append(buf)
    sample.wait[n.name] = time.perf_counter() - t0
    sample.received[n.name] = sum(t.numel() * t.element_size() for t in parts)
    return tree_unflatten(parts, spec)


def _median_timings(samples: list[_Sample]) -> RankTimings:
    return RankTimings(
        median_by_key([s.compute for s in samples]),
        median_by_key([s.wait for s in samples]),
        samples[-1].received if samples else {},
    )
