"""What a composed run reports: each rank's place, bytes and step, and the comparison with one
process (shared by the dp x tp run of :mod:`partitioner.cluster.run.compose` and the pipelined one)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from partitioner.cluster.layouts import Layout
from partitioner.errors import RunError
from partitioner.processes.records import RankStep
from partitioner.processes.timing import step_seconds

__all__ = ["RankReport", "ComposedRun", "compare", "all_reduce_gradients", "launch_named"]


@dataclass(frozen=True)
class RankReport:
    rank: int
    dp: int  # the rank's coordinate on the "dp" mesh dimension
    tp: int  # and on "tp"
    parameter_bytes: int  # the local shards of the parameters it holds after the step
    gradient_bytes: int  # the local shards of the gradients
    step_s: float  # its median timed step (NOTE: [One statistic] in partitioner.processes.timing)
    pp: int = 0  # and on "pp": its pipeline stage
    sync_s: float = 0.0  # the median over its timed steps of the gradient all-reduce over dp (ZeRO 0 and 1)

    @property
    def memory_bytes(self) -> int:
        return self.parameter_bytes + self.gradient_bytes

    @classmethod
    def of(cls, step: RankStep) -> "RankReport":
        """The report of a rank's :class:`RankStep`, its coordinates ``(pp, dp, tp)`` or ``(dp, tp)``."""
        *pp, dp, tp = step.coords
        return cls(
            step.rank, dp, tp, step.parameter_bytes, step.gradient_bytes, step.step_s, pp[0] if pp else 0, step.sync_s
        )


@dataclass(frozen=True)
class ComposedRun:
    layout: Layout
    outputs_equal: bool
    gradients_equal: bool
    max_abs_diff: float  # outputs and gradients against one process
    ranks: tuple[RankReport, ...]
    step_s: float  # the slowest rank's median step
    tp_plan: tuple[tuple[str, str], ...]  # (Linear, "colwise" or "rowwise")
    data_parallel: str  # "fully_shard (ZeRO-3)", "all-reduce", ... or "none"
    backend: str
    mismatch: str = ""  # the first difference found, when not equal
    loss: float | None = None  # pipelined runs: the last stages' loss (the outputs' sum), all replicas
    loss_equal: bool | None = None  # that loss against one process's

    @property
    def memory_bytes(self) -> tuple[int, ...]:
        """Each rank's parameter and gradient bytes, in rank order."""
        return tuple(r.memory_bytes for r in self.ranks)


def _module(label: str) -> str:
    """``"gradient blocks.0.attn.k_proj"`` of ``"gradient blocks.0.attn.k_proj.bias"``."""
    return label.rpartition(".")[0] or label


def compare(got: list[Any], want: list[Any], what: str, names: Sequence[str] | None = None) -> tuple[bool, float, str]:
    import torch

    if len(got) != len(want):
        return False, float("inf"), f"{len(got)} {what}s, one process gives {len(want)}"
    diff, why = 0.0, ""
    module_scale: dict[str, float] = {}
    for k, b in enumerate(want):
        if b is not None and b.numel():
            key = _module(f"{what} {names[k] if names else k}")
            module_scale[key] = max(module_scale.get(key, 0.0), float(b.abs().max()))
    for k, (a, b) in enumerate(zip(got, want)):
        label = f"{what} {names[k] if names else k}"
        if a is None or b is None:
            why = why or f"{label} is missing on one side"
            continue
        if a.shape != b.shape:
            why = why or f"{label}: shape {tuple(a.shape)}, one process {tuple(b.shape)}"
            continue
        if a.numel():
            diff = max(diff, float((a.float() - b.float().to(a.device)).abs().max()))
        # fp32 sums in another order: absolute error relative to the largest element of the
        # tensor and of its module's other tensors (a sum-of-logits loss gives gradients in the
        # thousands beside ones near zero; a key projection's bias has a gradient that is zero but
        # for rounding, on the scale of its weight's).
        scale = max(1.0, float(b.abs().max()) if b.numel() else 1.0, module_scale.get(_module(label), 0.0))
        try:
            torch.testing.assert_close(a.float(), b.float().to(a.device), rtol=1.3e-6, atol=1e-5 * scale)
        except AssertionError as exc:
            why = why or f"{label}: {str(exc).splitlines()[0]}"
    return not why, diff, why


def measure_step(
    step: Callable[[], Any], params: Sequence[tuple[str, Any]], repeats: int, device: str
) -> tuple[dict[str, Any], tuple[int, int], float]:
    """On a rank, after one step: every parameter's full gradient (on the CPU), the bytes this
    rank holds of the parameters and of their gradients (its shards), and the median of ``repeats``
    more steps, each started together (a barrier) and finished on the device. Torch, imported here."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    grads = {
        n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).detach().cpu()
        for n, p in params
        if p.grad is not None
    }

    def local_bytes(t: Any) -> int:
        return 0 if t is None else int((t.to_local() if isinstance(t, DTensor) else t).nbytes)

    held = (sum(local_bytes(p) for _, p in params), sum(local_bytes(p.grad) for _, p in params))
    steps = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        steps.append(time.perf_counter() - start)
    return grads, held, step_seconds(steps)


def all_reduce_gradients(params: Sequence[tuple[str, Any]], group: Any, dp: int) -> float:
    """DDP's gradient all-reduce over ``group``, averaged over its ``dp`` replicas: each gradient's
    local shard (a DTensor's own) summed in place, then divided; its seconds. Torch, imported here."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    began = time.perf_counter()
    for _, p in params:
        if p.grad is not None:
            local = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
            dist.all_reduce(local, group=group)
            local.div_(dp)
    return time.perf_counter() - began


def launch_named(
    entry: Callable[..., Any],
    ranks: int,
    args: tuple[Any, ...],
    name: Callable[[int], str],
    *,
    timeout_s: float,
    backend: str,
    progress: Callable[[str], None] | None,
) -> list[Any]:
    """``entry(*args)`` on ``ranks`` processes of their own (:func:`partitioner.processes.launch.launch`);
    a failed rank named by ``name(rank)`` (its mesh coordinates, its stage role: the ranks do not
    name themselves)."""
    from partitioner.processes.launch import launch

    try:
        return launch(entry, ranks, args, timeout_s=timeout_s, backend=backend, progress=progress)
    except RunError as exc:
        if exc.rank is None:
            raise
        raise RunError(f"{name(exc.rank)}: {exc}", rank=exc.rank) from None
