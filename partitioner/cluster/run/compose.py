"""Run one training step of a composed layout (data x tensor parallel, ZeRO) on local processes,
as torchtitan composes them, and check it against one process.

Every rank builds one two-dimensional mesh, ``init_device_mesh(device, (dp, tp),
mesh_dim_names=("dp", "tp"))``; tensor parallelism applies DTensor's ``ColwiseParallel`` /
``RowwiseParallel`` on the ``"tp"`` dimension (``parallelize_module``) to the model's Linear layers
in pairs (NOTE: [Linear pairs] in :mod:`.tp_plans`); data parallelism on the ``"dp"`` dimension is FSDP2's
``fully_shard`` (each planned Linear, then the root) with ZeRO 2 and 3 (3 reshards the parameters
after the forward, 2 keeps them gathered until the backward ends), or with ZeRO 0 and 1 a
DDP-style all-reduce of every gradient's local shard over the dp group, averaged (ZeRO-1 shards
only optimizer state, and one step here runs no optimizer). The example
batch is split over dp along dimension 0, each replica's part into microbatches of
``layout.microbatch_size`` rows (gradients accumulate); the loss is the sum of the outputs.
The outputs (gathered over dp) and every parameter's gradient (``full_tensor()``, times dp for
the mean over replicas) are compared with one process's by ``torch.testing.assert_close`` (absolute
tolerance 1e-5 of each tensor's largest magnitude: fp32 sums in another order); each
rank reports its mesh coordinates, the bytes of the parameter and gradient shards it holds and
its median step time after a warm-up (a :class:`~partitioner.processes.records.RankStep`). Processes start as the other real runs start
(:mod:`partitioner.processes.launch`); a failure names the rank and its coordinates.
Pipeline stages (``pp > 1``) compose on a three-dimensional mesh (:mod:`partitioner.cluster.run.pipelined`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from partitioner.cluster.layouts import Layout
from partitioner.cluster.run.records import (
    ComposedRun,
    RankReport,
    all_reduce_gradients,
    compare,
    launch_named,
    measure_step,
)
from partitioner.cluster.run.runnable import check_runnable
from partitioner.cluster.run.tp_plans import linear_pairs_plan
from partitioner.cluster.words import parse_layout
from partitioner.errors import PartitionError
from partitioner.processes.records import RankStep
from partitioner.processes.timing import step_seconds

if TYPE_CHECKING:
    import torch

    from partitioner.sharding.tensor_parallel import TPPlan

__all__ = [
    "ComposedRun",
    "RankReport",
    "run_layout",
    "parse_layout",
    "linear_pairs_plan",
]


def _leaves(out: Any) -> list[torch.Tensor]:
    """The tensors of a model's output (a DTensor as its full value)."""
    import torch
    from torch.distributed.tensor import DTensor

    return [
        t.full_tensor() if isinstance(t, DTensor) else t
        for t in torch.utils._pytree.tree_leaves(out)
        if isinstance(t, torch.Tensor)
    ]


def _split_kwargs(kwargs: dict[str, Any], dp: int, i: int, m: int) -> list[dict[str, Any]]:
    """Keyword inputs cut as the positional ones: replica ``i`` of ``dp`` along dimension 0, then
    ``m`` microbatches; anything without a batch dimension goes to each as it is."""
    import torch

    cuts: list[dict[str, Any]] = [{} for _ in range(m)]
    for key, value in kwargs.items():
        parts = (
            value.chunk(dp, dim=0)[i].chunk(m, dim=0)
            if isinstance(value, torch.Tensor) and value.dim()
            else [value] * m
        )
        for cut, part in zip(cuts, parts):
            cut[key] = part
    return cuts


def _mesh_and_model(
    module: torch.nn.Module,
    device: str,
    dp: int,
    tp: int,
    zero: int,
    plan: tuple[tuple[str, str], ...],
    styles: dict[str, dict[str, str]] | None = None,
) -> Any:
    """The (dp, tp) mesh, ``module`` tensor-parallel on "tp" (the Linear pairs of ``plan``, or the
    sharding package's ``styles`` with their layouts: attention by heads, embeddings, lone layers;
    every other parameter replicated) and FSDP2 on "dp" with ZeRO 2 and 3."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device, (dp, tp), mesh_dim_names=("dp", "tp"))
    if styles:

        def layout(name: str) -> Any:
            return Shard(-1) if name == "shard" else Replicate()

        parallelize_module(
            module,
            mesh["tp"],
            {
                path: (ColwiseParallel if s["style"] == "colwise" else RowwiseParallel)(
                    input_layouts=layout(s["input"]), output_layouts=layout(s["output"])
                )
                for path, s in styles.items()
            },
        )
    elif plan:
        parallelize_module(
            module, mesh["tp"], {n: ColwiseParallel() if s == "colwise" else RowwiseParallel() for n, s in plan}
        )
    if zero >= 2 and dp > 1:
        for name, _ in plan:
            fully_shard(module.get_submodule(name), mesh=mesh["dp"], reshard_after_forward=zero == 3)
        fully_shard(module, mesh=mesh["dp"], reshard_after_forward=zero == 3)
    return mesh


def _entry(
    rank: int,
    world_size: int,
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    layout: Layout,
    plan: tuple[tuple[str, str], ...],
    repeats: int,
    styles: dict[str, dict[str, str]] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> RankStep:
    """One rank's training step (a failure is named by the parent from the rank's number)."""
    return _rank_step(rank, module, inputs, layout, plan, repeats, styles, kwargs or {})


def _rank_step(
    rank: int,
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    layout: Layout,
    plan: tuple[tuple[str, str], ...],
    repeats: int,
    styles: dict[str, dict[str, str]] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> RankStep:
    import torch

    dp, tp = layout.dp, layout.tp
    i, j = divmod(rank, tp)
    device, module, inputs = _on_device(rank, module, inputs)
    mesh = _mesh_and_model(module, device, dp, tp, layout.zero, plan, styles)
    micro = _microbatches(inputs, kwargs or {}, dp, i, layout.microbatch_size)
    group = mesh.get_group("dp") if dp > 1 else None
    params = list(module.named_parameters())
    synced: list[float] = []  # seconds of each step's gradient all-reduce over dp

    def step() -> list[torch.Tensor]:
        module.zero_grad(set_to_none=True)
        outs = []
        for mb, kw in micro:
            out = _leaves(module(*mb, **kw))
            sum(t.float().sum() for t in out).backward()  # type: ignore[union-attr]
            outs.append(out)
        if layout.zero <= 1 and group is not None:  # DDP's gradient all-reduce, averaged
            synced.append(all_reduce_gradients(params, group, dp))
        return [torch.cat([o[k].detach() for o in outs]) for k in range(len(outs[0]))]

    outputs = step()
    grads, held, median = measure_step(step, params, repeats, device)
    return RankStep(
        rank,
        step_s=median,
        outputs=tuple(o.cpu() for o in outputs) if j == 0 else None,
        grads=grads if rank == 0 else None,
        coords=(i, j),
        parameter_bytes=held[0],
        gradient_bytes=held[1],
        sync_s=step_seconds(synced[1:]),
    )


def _on_device(
    rank: int, module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]
) -> tuple[str, torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The rank's device ("cuda" under NCCL, its local GPU; else "cpu"), the module and the
    inputs moved there."""
    import os

    import torch
    import torch.distributed as dist

    if dist.get_backend() != "nccl":
        return "cpu", module, inputs
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    return "cuda", module.to("cuda"), tuple(x.to("cuda") for x in inputs)


def _microbatches(
    inputs: tuple[torch.Tensor, ...], kwargs: dict[str, Any], dp: int, i: int, size: int
) -> list[tuple[tuple[torch.Tensor, ...], dict[str, Any]]]:
    """Replica ``i`` of ``dp``'s part of the inputs along dimension 0, cut into microbatches of
    ``size`` rows: each as (positional inputs, keyword inputs)."""
    shard = tuple(x.chunk(dp, dim=0)[i] for x in inputs)
    m = shard[0].shape[0] // size
    micro = list(zip(*(x.chunk(m, dim=0) for x in shard)))
    return list(zip(micro, _split_kwargs(kwargs, dp, i, m)))


def _reference(
    module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], kwargs: dict[str, Any] | None = None
) -> tuple[list[Any], dict[str, Any]]:
    import copy

    ref = copy.deepcopy(module)
    ref.zero_grad(set_to_none=True)
    out = _leaves(ref(*inputs, **(kwargs or {})))
    sum(t.float().sum() for t in out).backward()  # type: ignore[union-attr]
    return [t.detach() for t in out], {n: p.grad.detach() for n, p in ref.named_parameters() if p.grad is not None}


def run_layout(
    module: torch.nn.Module,
    example_inputs: Sequence[Any] | torch.Tensor,
    layout: Layout,
    *,
    timeout_s: float = 180.0,
    backend: str | None = None,
    repeats: int = 3,
    progress: Callable[[str], None] | None = None,
    tp_plan: TPPlan | None = None,
    example_kwargs: dict[str, Any] | None = None,
) -> ComposedRun:
    """One training step of ``layout`` on ``layout.devices`` local processes (see the module
    doc), checked against one process. Tensor parallelism shards the Linear pairs (NOTE: [Linear
    pairs]) or, given ``tp_plan`` (:func:`partitioner.sharding.tensor_parallel.tp_plan` over
    ``layout.tp`` devices: a Hugging Face model's own plan, attention by heads, embeddings),
    its styles, every other parameter replicated; ``module`` is then the model as built and
    ``example_kwargs`` its keyword inputs (split over dp like the positional ones). Raises
    :class:`PartitionError` for a layout or model it cannot run and :class:`RunError` naming the
    rank and its mesh coordinates when a rank fails."""
    import torch
    import torch.fx as fx

    from partitioner.processes.portable import picklable

    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    kwargs = dict(example_kwargs or {})
    check_runnable(layout, inputs)
    plan, styles, transposed = _shards(module, layout, tp_plan)
    if isinstance(module, fx.GraphModule):
        module = picklable(module)
    backend = _backend(backend, layout.devices)
    expected, expected_grads = _reference(module, inputs, kwargs)
    if layout.pp > 1:
        from partitioner.cluster.run.piped import run_pipelined

        return run_pipelined(
            module,
            inputs,
            layout,
            plan,
            expected,
            expected_grads,
            timeout_s=timeout_s,
            backend=backend,
            repeats=repeats,
            progress=progress,
        )
    if transposed:  # GPT-2's Conv1D as the equal Linear, which DTensor's styles take
        module = _as_linear(module, transposed)
    args = (module, inputs, layout, plan, repeats, styles, kwargs)
    results = launch_named(
        _entry,
        layout.devices,
        args,
        lambda rank: _mesh_name(rank, layout),
        timeout_s=timeout_s,
        backend=backend,
        progress=progress,
    )
    return _checked(layout, results, expected, expected_grads, plan, transposed, backend)


def _backend(backend: str | None, devices: int) -> str:
    """The process group's backend: the one named, else the machine's default; gloo where NCCL
    would lack a GPU per rank (gloo runs every rank on the CPU)."""
    import torch

    from partitioner.processes.launch import default_backend

    backend = backend or default_backend()
    if backend == "nccl" and torch.cuda.device_count() < devices:
        backend = "gloo"
    return backend


def _as_linear(module: torch.nn.Module, transposed: tuple[str, ...]) -> torch.nn.Module:
    """A copy of ``module`` with the Conv1D layers at ``transposed`` as the equal Linear layers."""
    import copy

    from partitioner.sharding.tp_run import as_linear

    module = copy.deepcopy(module)
    as_linear(module, transposed)
    return module


def _mesh_name(rank: int, layout: Layout) -> str:
    """A rank as a failure names it: its number and its mesh coordinates."""
    i, j = divmod(rank, layout.tp)
    return f"rank {rank} (dp={i}, tp={j})"


_DATA_PARALLEL = {
    0: "all-reduce",
    1: "all-reduce (ZeRO-1: no optimizer state to shard)",
    2: "fully_shard, parameters kept until the backward (ZeRO-2)",
    3: "fully_shard (ZeRO-3)",
}


def _shards(
    module: torch.nn.Module, layout: Layout, tp_plan: TPPlan | None
) -> tuple[tuple[tuple[str, str], ...], dict[str, dict[str, str]] | None, tuple[str, ...]]:
    """(the (module, style) pairs tensor parallelism shards, the sharding package's styles with
    their layouts or None for Linear pairs, the Conv1D paths run as Linear)."""
    if tp_plan is None or layout.tp < 2:
        return (linear_pairs_plan(module, layout.tp) if layout.tp > 1 else ()), None, ()
    if tp_plan.world_size != layout.tp or layout.pp > 1:
        raise PartitionError(
            f"a tensor-parallel plan runs here over the layout's tp ({layout.tp}, the plan has "
            f"{tp_plan.world_size}) and without pipeline stages (pp={layout.pp}): make the "
            "plan for that many devices, or run pipeline stages with Linear pairs"
        )
    styles = dict(tp_plan.styles)
    return tuple((path, s["style"]) for path, s in styles.items()), styles, tuple(tp_plan.transposed)


def _checked(
    layout: Layout,
    results: Sequence[RankStep],
    expected: list[Any],
    expected_grads: dict[str, Any],
    plan: tuple[tuple[str, str], ...],
    transposed: tuple[str, ...],
    backend: str,
) -> ComposedRun:
    """The ranks' outputs (gathered over dp) and gradients (times dp: the mean over replicas)
    against one process's."""
    import torch

    gathered = [r.outputs for r in results if r.coords[1] == 0 and r.outputs is not None]
    outputs = [torch.cat([g[k] for g in gathered]) for k in range(len(gathered[0]))]
    grads = {n: g * layout.dp for n, g in (results[0].grads or {}).items()}
    for path in transposed:  # back to Conv1D's (in, out) weight
        grads[f"{path}.weight"] = grads[f"{path}.weight"].t()
    outputs_equal, out_diff, out_why = compare(outputs, expected, "output")
    names = sorted(set(grads) | set(expected_grads))
    gradients_equal, grad_diff, grad_why = compare(
        [grads.get(n) for n in names], [expected_grads.get(n) for n in names], "gradient", names
    )
    ranks = tuple(RankReport.of(r) for r in results)
    return ComposedRun(
        layout,
        outputs_equal,
        gradients_equal,
        max(out_diff, grad_diff),
        ranks,
        max(r.step_s for r in ranks),
        plan,
        _DATA_PARALLEL[layout.zero] if layout.dp > 1 else "none",
        backend,
        out_why or grad_why,
    )
