"""Pipeline stages composed with tensor and data parallelism on one three-dimensional mesh, as
torchtitan composes them: ``init_device_mesh(device, (pp, dp, tp), mesh_dim_names=("pp", "dp",
"tp"))``; each rank builds its stage (``build_stage_modules``: the traced model cut after whole
Linear pairs, NOTE: [Linear pairs] in :mod:`partitioner.cluster.run.tp_plans`), applies
``parallelize_module`` on its ``"tp"`` sub-mesh, wraps it in a ``PipelineStage`` on its ``"pp"``
group and runs the layout's schedule (:func:`~partitioner.cluster.run.runnable.run_schedule`)
over its replica's share of the batch in microbatches; the loss is the sum of the outputs (``scale_grads=False``: microbatch gradients
add up to the batch's); data parallelism all-reduces and averages each gradient's local shard
over ``"dp"`` (ZeRO 0 and 1; FSDP2 with pipeline stages is refused). Rank ``r`` sits at
``(pp, dp, tp) = unravel(r, (pp, dp, tp))``; it sends back a
:class:`~partitioner.processes.records.RankStep` with those coordinates.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

from partitioner.cluster.layouts import Layout
from partitioner.cluster.run.records import measure_step
from partitioner.cluster.run.runnable import run_schedule
from partitioner.errors import PartitionError
from partitioner.processes.records import RankStep
from partitioner.processes.timing import step_seconds

if TYPE_CHECKING:
    import torch

    from partitioner.graph import Graph

__all__ = ["coordinates", "role", "stage_cuts", "pipelined_entry", "run_schedule"]  # run_schedule: from .runnable


def coordinates(rank: int, layout: Layout) -> tuple[int, int, int]:
    """``(pp, dp, tp)`` of ``rank`` on the layout's mesh (row-major, tp fastest)."""
    s, rest = divmod(rank, layout.dp * layout.tp)
    i, j = divmod(rest, layout.tp)
    return s, i, j


def role(rank: int, layout: Layout) -> str:
    s, i, j = coordinates(rank, layout)
    return (
        f"rank {rank} (pp={s}, dp={i}, tp={j}: pipeline stage {s + 1} of {layout.pp}, "
        f"tensor shard {j + 1} of {layout.tp}, replica {i + 1} of {layout.dp})"
    )


def stage_cuts(graph: Graph, plan: Sequence[tuple[str, str]], linears: Sequence[str], pp: int) -> list[list[str]]:
    """Op names of each stage: contiguous in the traced order, each ending after the last op of
    its share of the units (Linear pairs when tensor parallel, else single Linears), which
    must divide by ``pp``. O(N)."""
    units = [b for (b, style) in plan if style == "rowwise"] if plan else list(linears)
    if not units or len(units) % pp:
        raise PartitionError(
            f"pipeline stages take whole {'Linear pairs' if plan else 'Linear layers'}: the model "
            f"has {len(units)}, which pp={pp} does not divide; choose a pp that divides it"
        )
    ends = set(units[len(units) // pp - 1 :: len(units) // pp][:-1])
    stages: list[list[str]] = [[]]
    for v in graph.op_indices:
        node = graph.nodes[v]
        stages[-1].append(node.name)
        if node.op == "call_module" and node.target in ends:
            stages.append([])
    return stages


def _loss(output: Any, target: Any) -> Any:
    return output.float().sum()


def pipelined_entry(
    rank: int,
    world_size: int,
    stages: list[Any],
    inputs: tuple[torch.Tensor, ...],
    layout: Layout,
    plan: tuple[tuple[str, str], ...],
    repeats: int,
) -> RankStep:
    """One rank's training step of its stage (a failure is named by the parent from the rank's
    number: :func:`role`)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage, schedules
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    s, i, j = coordinates(rank, layout)
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    if device == "cuda":
        torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
    mesh = init_device_mesh(device, (layout.pp, layout.dp, layout.tp), mesh_dim_names=("pp", "dp", "tp"))
    module = stages[s].to(device)
    here = {n: style for n, style in plan if any(n == m for m, _ in module.named_modules())}
    if here and layout.tp > 1:
        parallelize_module(
            module,
            mesh["tp"],
            {n: ColwiseParallel() if st == "colwise" else RowwiseParallel() for n, st in here.items()},
        )
    stage = PipelineStage(module, s, layout.pp, torch.device(device), group=mesh["pp"].get_group())
    shard = tuple(x.chunk(layout.dp, dim=0)[i].to(device) for x in inputs)
    rows = int(shard[0].shape[0])
    m = max(1, rows // layout.microbatch_size)
    cls = getattr(schedules, run_schedule(layout).torch_class)
    schedule = cls(stage, n_microbatches=m, loss_fn=_loss, scale_grads=False)
    target = torch.zeros(rows, 1, device=device)
    dp_group = mesh["dp"].get_group() if layout.dp > 1 else None
    params = list(module.named_parameters())
    last = s == layout.pp - 1
    synced: list[float] = []  # seconds of each step's gradient all-reduce over dp

    def step() -> Any:
        module.zero_grad(set_to_none=True)
        losses: list[Any] = []
        if s == 0:
            out = schedule.step(*shard, target=target if last else None, losses=losses if last else None)
        elif last:
            out = schedule.step(target=target, losses=losses)
        else:
            out = schedule.step()
        if dp_group is not None:  # DDP's gradient all-reduce, averaged
            began = time.perf_counter()
            for _, p in params:
                if p.grad is not None:
                    local = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
                    dist.all_reduce(local, group=dp_group)
                    local.div_(layout.dp)
            synced.append(time.perf_counter() - began)
        return out, losses

    out, losses = step()
    grads, held, median = measure_step(step, params, repeats, device)
    outputs = None
    if last and j == 0:
        outputs = tuple(t.detach().cpu() for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
    return RankStep(
        rank,
        step_s=median,
        outputs=outputs,
        grads=grads if (i == 0 and j == 0) else None,
        loss=float(sum(float(x) for x in losses)) if last and losses else None,
        coords=(s, i, j),
        parameter_bytes=held[0],
        gradient_bytes=held[1],
        sync_s=step_seconds(synced[1:]),
    )
