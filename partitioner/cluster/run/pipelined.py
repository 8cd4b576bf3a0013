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

from typing import TYPE_CHECKING, Any, Sequence

from partitioner.cluster.layouts import Layout
from partitioner.cluster.run.records import all_reduce_gradients, measure_step
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
    from torch.distributed.device_mesh import init_device_mesh

    s, i, j = coordinates(rank, layout)
    device = _rank_device(rank)
    mesh = init_device_mesh(device, (layout.pp, layout.dp, layout.tp), mesh_dim_names=("pp", "dp", "tp"))
    module = stages[s].to(device)
    _tensor_parallel(module, mesh, plan, layout.tp)
    shard = tuple(x.chunk(layout.dp, dim=0)[i].to(device) for x in inputs)
    rows = int(shard[0].shape[0])
    schedule = _stage_schedule(module, s, layout, mesh, device, rows)
    target = torch.zeros(rows, 1, device=device)
    dp_group = mesh["dp"].get_group() if layout.dp > 1 else None
    params = list(module.named_parameters())
    last = s == layout.pp - 1
    synced: list[float] = []  # seconds of each step's gradient all-reduce over dp

    def step() -> Any:
        module.zero_grad(set_to_none=True)
        out, losses = _schedule_step(schedule, s == 0, last, shard, target)
        if dp_group is not None:  # DDP's gradient all-reduce, averaged
            synced.append(all_reduce_gradients(params, dp_group, layout.dp))
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


def _rank_device(rank: int) -> str:
    """The rank's device: "cuda" under NCCL (a GPU a rank, set as the current one), else "cpu"."""
    import torch
    import torch.distributed as dist

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    if device == "cuda":
        torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
    return device


def _tensor_parallel(module: torch.nn.Module, mesh: Any, plan: tuple[tuple[str, str], ...], tp: int) -> None:
    """Shard the Linear pairs of ``plan`` that are in this stage's ``module`` over the mesh's "tp"."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    here = {n: style for n, style in plan if any(n == m for m, _ in module.named_modules())}
    if here and tp > 1:
        parallelize_module(
            module,
            mesh["tp"],
            {n: ColwiseParallel() if st == "colwise" else RowwiseParallel() for n, st in here.items()},
        )


def _stage_schedule(module: torch.nn.Module, s: int, layout: Layout, mesh: Any, device: str, rows: int) -> Any:
    """Stage ``s`` of the layout's pipeline on the mesh's "pp" group, under the layout's schedule
    over ``rows`` rows in microbatches; the loss the sum of the outputs, gradients not scaled."""
    import torch
    from torch.distributed.pipelining import PipelineStage, schedules

    stage = PipelineStage(module, s, layout.pp, torch.device(device), group=mesh["pp"].get_group())
    m = max(1, rows // layout.microbatch_size)
    cls = getattr(schedules, run_schedule(layout).torch_class)
    return cls(stage, n_microbatches=m, loss_fn=_loss, scale_grads=False)


def _schedule_step(
    schedule: Any, first: bool, last: bool, shard: tuple[torch.Tensor, ...], target: torch.Tensor
) -> tuple[Any, list[Any]]:
    """One step of the stage's schedule: the first stage feeds the inputs, the last the target
    (its losses collected); (the stage's output, the losses)."""
    losses: list[Any] = []
    if first:
        out = schedule.step(*shard, target=target if last else None, losses=losses if last else None)
    elif last:
        out = schedule.step(target=target, losses=losses)
    else:
        out = schedule.step()
    return out, losses
