"""The parent's side of a pipelined composed run (pp x dp x tp): cut the traced model into
stages, start the ranks (:func:`partitioner.cluster.run.pipelined.pipelined_entry`), and check
outputs, loss and every gradient against one process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from partitioner.cluster.layouts import Layout
from partitioner.cluster.run.pipelined import pipelined_entry, role, stage_cuts
from partitioner.cluster.run.records import ComposedRun, RankReport, compare, launch_named
from partitioner.processes.records import RankStep

if TYPE_CHECKING:
    import torch

__all__ = ["run_pipelined"]


def run_pipelined(
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    layout: Layout,
    plan: tuple[tuple[str, str], ...],
    expected: list[Any],
    expected_grads: dict[str, Any],
    *,
    timeout_s: float,
    backend: str,
    repeats: int,
    progress: Callable[[str], None] | None,
) -> ComposedRun:
    stages = _stages(module, inputs, layout, plan)
    args = (stages, inputs, layout, plan, repeats)
    results = launch_named(
        pipelined_entry,
        layout.devices,
        args,
        lambda rank: role(rank, layout),
        timeout_s=timeout_s,
        backend=backend,
        progress=progress,
    )
    last = sorted((r for r in results if r.coords[0] == layout.pp - 1 and r.coords[2] == 0), key=lambda r: r.coords[1])
    outputs = _last_outputs(last)
    grads = _summed_gradients(results, layout.dp)
    outputs_equal, out_diff, out_why = compare(outputs, expected, "output")
    names = sorted(set(grads) | set(expected_grads))
    gradients_equal, grad_diff, grad_why = compare(
        [grads.get(n) for n in names], [expected_grads.get(n) for n in names], "gradient", names
    )
    loss, loss_equal, want = _loss_check(last, expected)
    ranks = tuple(RankReport.of(r) for r in results)
    why = out_why or grad_why or ("" if loss_equal else f"loss {loss:.6g}, one process {want:.6g}")
    return ComposedRun(
        layout,
        outputs_equal,
        gradients_equal,
        max(out_diff, grad_diff),
        ranks,
        max(r.step_s for r in ranks),
        plan,
        "all-reduce" if layout.dp > 1 else "none",
        backend,
        why,
        loss,
        loss_equal,
    )


def _stages(
    module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], layout: Layout, plan: tuple[tuple[str, str], ...]
) -> list[Any]:
    """The traced model cut into ``layout.pp`` stage modules after whole Linear pairs (or Linears)."""
    import torch

    import partitioner
    from partitioner.pipeline.stage_modules import build_stage_modules

    graph = partitioner.trace(module, inputs, name=type(module).__name__)
    linears = [n for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)]
    return build_stage_modules(graph, stage_cuts(graph, plan, linears, layout.pp), inputs)


def _last_outputs(last: list[RankStep]) -> list[Any]:
    """The model's outputs: the last stage's of each replica (first tensor shard), in replica order."""
    import torch

    return [torch.cat([r.outputs[k] for r in last if r.outputs]) for k in range(len(last[0].outputs or ()))]


def _summed_gradients(results: list[RankStep], dp: int) -> dict[str, Any]:
    """Every parameter's gradient from the stages that hold it, times ``dp`` (the mean over replicas)."""
    grads: dict[str, Any] = {}
    for r in results:
        if r.grads is not None:
            for name, g in r.grads.items():
                grads[name] = grads[name] + g * dp if name in grads else g * dp
    return grads


def _loss_check(last: list[RankStep], expected: list[Any]) -> tuple[float, bool, float]:
    """(the last stages' loss over every replica, whether it equals one process's, that one's)."""
    import math

    loss = sum(r.loss for r in last if r.loss is not None)
    want = float(sum(t.float().sum() for t in expected))
    return loss, math.isclose(loss, want, rel_tol=1e-5, abs_tol=1e-4 * max(1.0, abs(want))), want
