"""Run a shard spec for real: DTensor's tensor parallelism over local processes.

Each rank builds a one-dimensional device mesh (``init_device_mesh``), applies the styles of
:func:`partitioner.sharding.tensor_parallel.tp_plan` with ``parallelize_module`` (``ColwiseParallel``,
``RowwiseParallel``, the layouts the plan chose), runs the example inputs under
``CommDebugMode`` and sends back the output, the collectives counted (forward, and with
``training`` the backward of the sum of the outputs) and each parameter's local shape. The
outputs are compared with the model run in one process. Processes start as the other real runs
start (:mod:`partitioner.processes.launch`): time-limited, none left behind, a failure named by
rank; each rank sends back a :class:`~partitioner.processes.records.RankStep`.

Hugging Face models run as they are built (not their exported graph, which cannot be pickled),
with their keyword inputs; a GPT-2 ``Conv1D`` the plan shards becomes the equal ``nn.Linear``
(its weight transposed) on each rank first, since DTensor's styles take Linear and Embedding
only; local shapes are reported in the original layout. Attention runs on each rank's own heads
(NOTE: [Attention sharded by heads] in :mod:`.model_plan`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch

from partitioner.errors import RunError, ShardingError
from partitioner.processes.launch import default_backend, launch
from partitioner.processes.records import RankStep
from partitioner.processes.timing import step_seconds
from partitioner.sharding.tensor_parallel import TPPlan

__all__ = ["ShardRun", "run_sharded", "as_linear"]

_COLLECTIVES = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter_tensor",
}


@dataclass(frozen=True)
class ShardRun:
    outputs_equal: bool
    max_abs_diff: float
    forward_counts: dict[str, int]  # collectives CommDebugMode counted in the forward, by kind
    backward_counts: dict[str, int] | None  # in the backward (training only)
    predicted_forward: dict[str, int]
    predicted_backward: dict[str, int] | None
    local_shapes: dict[str, tuple[int, ...]]  # rank 0's local shard of each parameter
    local_parameter_bytes: list[int]  # each rank's parameter bytes
    world_size: int
    backend: str
    forward_s: float  # rank 0's forward, measured

    def counted(self) -> str:
        """The collectives counted, in words: "2 all_reduce forward, 4 all_reduce backward";
        "none forward" when nothing is sharded."""

        def words(counts: dict[str, int]) -> str:
            return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "none"

        text = f"{words(self.forward_counts)} forward"
        return text + (f", {words(self.backward_counts)} backward" if self.backward_counts is not None else "")

    @property
    def counts_match(self) -> bool:
        return self.forward_counts == self.predicted_forward and (
            self.backward_counts is None or self.backward_counts == self.predicted_backward
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["local_shapes"] = {k: list(v) for k, v in self.local_shapes.items()}
        out["counts_match"] = self.counts_match
        return out


def _kinds(counts: dict[Any, int]) -> dict[str, int]:
    names = {v: k for k, v in _COLLECTIVES.items()}
    out: dict[str, int] = {}
    for op, n in counts.items():
        leaf = str(op).rsplit(".", 1)[-1]
        kind = names.get(leaf, leaf)
        out[kind] = out.get(kind, 0) + int(n)
    return out


def as_linear(module: torch.nn.Module, paths: Sequence[str]) -> None:
    """Replace each Conv1D at ``paths`` (weight (in, out), ``x @ W + b``) by the equal Linear, in
    place (GPT-2's Conv1D as the Linear that DTensor's styles take). O(parameters)."""
    for path in paths:
        conv = module.get_submodule(path)
        weight, bias = conv.get_parameter("weight"), getattr(conv, "bias", None)
        fan_in, fan_out = weight.shape
        linear = torch.nn.Linear(fan_in, fan_out, bias=bias is not None, dtype=weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(weight.t())
            if isinstance(bias, torch.Tensor):
                linear.bias.copy_(bias)
        parent, _, leaf = path.rpartition(".")
        setattr(module.get_submodule(parent) if parent else module, leaf, linear)


def _entry(
    rank: int,
    world_size: int,
    module: torch.nn.Module,
    inputs: tuple[Any, ...],
    styles: dict[str, dict[str, str]],
    training: bool,
    kwargs: dict[str, Any] | None = None,
    transposed: Sequence[str] = (),
    repeats: int = 0,
) -> RankStep:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def layout(name: str) -> Any:
        return Shard(-1) if name == "shard" else Replicate()

    torch.set_num_threads(1)
    as_linear(module, transposed)
    mesh = init_device_mesh("cpu", (world_size,))
    plan: dict[str, Any] = {}
    for path, s in styles.items():
        if s["style"] == "colwise":
            plan[path] = ColwiseParallel(input_layouts=layout(s["input"]), output_layouts=layout(s["output"]))
        else:
            plan[path] = RowwiseParallel(input_layouts=layout(s["input"]), output_layouts=layout(s["output"]))
    parallelize_module(module, mesh, plan)
    local = {
        n: tuple(p.to_local().shape) if isinstance(p, DTensor) else tuple(p.shape) for n, p in module.named_parameters()
    }
    local.update({f"{m}.weight": local[f"{m}.weight"][::-1] for m in transposed})
    nbytes = sum((p.to_local() if isinstance(p, DTensor) else p).nbytes for p in module.parameters())
    forward = CommDebugMode()
    start = time.perf_counter()
    with forward, torch.set_grad_enabled(training):
        out = module(*inputs, **(kwargs or {}))
    seconds = time.perf_counter() - start
    leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    full = [t.full_tensor() if isinstance(t, DTensor) else t for t in leaves]
    backward = None
    if training:
        loss = sum(t.float().sum() for t in leaves if t.requires_grad)
        counter = CommDebugMode()
        with counter:
            loss.backward()  # type: ignore[union-attr]
        backward = _kinds(counter.get_comm_counts())
    if repeats:  # warm forwards, started together: their median is the measured forward
        import torch.distributed as dist

        times = []
        with torch.no_grad():
            for _ in range(repeats):
                dist.barrier()
                start = time.perf_counter()
                module(*inputs, **(kwargs or {}))
                times.append(time.perf_counter() - start)
        seconds = step_seconds(times)
    return RankStep(
        rank,
        step_s=seconds,
        outputs=tuple(t.detach() for t in full),
        parameter_bytes=int(nbytes),
        forward_collectives=_kinds(forward.get_comm_counts()),
        backward_collectives=backward,
        local_shapes=local,
    )


def run_sharded(
    module: torch.nn.Module,
    example_inputs: Sequence[Any] | torch.Tensor,
    plan: TPPlan,
    *,
    training: bool = False,
    timeout_s: float = 120.0,
    backend: str | None = None,
    progress: Callable[[str], None] | None = None,
    example_kwargs: dict[str, Any] | None = None,
    repeats: int = 0,
) -> ShardRun:
    """Run ``module`` (the model as built: a Hugging Face model itself, not its exported graph)
    tensor-parallel as ``plan`` says on ``plan.world_size`` local processes and compare its
    outputs with one process's. ``repeats`` warm forwards after the counted one make
    ``forward_s`` their median (else it is the first, cold forward). Raises :class:`ShardingError` when the weights are on the meta
    device (nothing to run) and :class:`RunError` when a rank fails."""
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    kwargs = dict(example_kwargs or {})
    meta = [n for n, p in module.named_parameters() if p.is_meta]
    if meta:
        raise ShardingError(
            f"the model's weights are on the meta device (shapes only, no values: {len(meta)} "
            f"parameters, e.g. {meta[0]}), so it cannot run; the prediction stands without a run. "
            "To run it, build it small enough to get real weights (fewer layers and a smaller "
            "hidden size) or load real weights"
        )
    backend = backend or default_backend()
    module = module.eval()
    with torch.no_grad():
        expected = [
            t for t in torch.utils._pytree.tree_leaves(module(*inputs, **kwargs)) if isinstance(t, torch.Tensor)
        ]
    results = launch(
        _entry,
        plan.world_size,
        (module, inputs, plan.styles, training, kwargs, plan.transposed, repeats),
        timeout_s=timeout_s,
        backend=backend,
        progress=progress,
    )
    first = results[0]
    got = first.outputs or ()
    if len(got) != len(expected):
        raise RunError(f"the sharded model returned {len(got)} tensors, the model {len(expected)}")
    diff = max((float((a.float() - b.float()).abs().max()) for a, b in zip(got, expected) if a.numel()), default=0.0)
    equal = all(torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5) for a, b in zip(got, expected))
    return ShardRun(
        outputs_equal=equal,
        max_abs_diff=diff,
        forward_counts=dict(first.forward_collectives),
        backward_counts=None if first.backward_collectives is None else dict(first.backward_collectives),
        predicted_forward=plan.counts(False),
        predicted_backward=plan.counts(True) if training else None,
        local_shapes=dict(first.local_shapes),
        local_parameter_bytes=[r.parameter_bytes for r in results],
        world_size=plan.world_size,
        backend=backend,
        forward_s=first.step_s,
    )
