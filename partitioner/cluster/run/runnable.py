"""What a local composed run can run, asked before any process starts: the planner prices more
(context and expert parallelism, HSDP, offload, recomputation, interleaved schedules) than
:func:`partitioner.cluster.run.compose.run_layout` runs. Torch-free."""

from __future__ import annotations

from typing import Any, Sequence

from partitioner.cluster.layouts import Layout
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import NO_SCHEDULE, SCHEDULES, get_schedule

__all__ = ["check_runnable"]


def check_runnable(layout: Layout, inputs: Sequence[Any]) -> None:
    """Raise :class:`PartitionError` naming every part of ``layout`` a local run cannot run on these
    example inputs (the planner prices more than the run runs), before any process starts."""
    _check(layout, tuple(inputs))


def _check(layout: Layout, inputs: tuple[Any, ...]) -> None:
    problems = []
    if layout.pp > 1 and layout.zero >= 2:
        problems.append(
            f"pipeline stages run here with ZeRO 0 or 1 (a gradient all-reduce over dp), not with "
            f"FSDP (got pp={layout.pp} zero{layout.zero}): choose zero0 or zero1, or pp1"
        )
    if layout.pp > 1 and layout.schedule != NO_SCHEDULE and not get_schedule(layout.schedule).runs_composed:
        runs = " or ".join(name for name, s in SCHEDULES.items() if s.runs_composed)
        problems.append(
            f"pipeline stages run here with one stage a rank, {runs} (got {layout.schedule}): choose {runs}"
        )
    if layout.recompute != "none":
        problems.append(f"recomputation is not run here (got recompute={layout.recompute!r}): drop it")
    unrun = [
        word
        for word, on in (
            (f"cp{layout.cp}", layout.cp > 1),
            (f"ep{layout.ep}", layout.ep > 1),
            (f"shard{layout.shard}", layout.shard > 0),
            ("fp32-grads", layout.grad_fp32),
            ("offload", layout.offload),
        )
        if on
    ]
    if unrun:
        problems.append(
            f"{', '.join(unrun)} {'is' if len(unrun) == 1 else 'are'} planned but not run here "
            "(context and expert parallelism, HSDP, DeepSpeed's fp32 gradients and offload): drop "
            f"{'it' if len(unrun) == 1 else 'them'} to run the rest"
        )
    if not inputs or not all(hasattr(x, "shape") and x.dim() >= 1 for x in inputs):
        problems.append("every example input must be a tensor with a batch dimension to split over dp")
    else:
        rows = {int(x.shape[0]) for x in inputs}
        per = min(rows) // layout.dp
        if len(rows) != 1 or min(rows) % layout.dp or per % layout.microbatch_size:
            problems.append(
                f"the batch ({sorted(rows)} rows) must divide over dp={layout.dp} and each replica's "
                f"share into microbatches of {layout.microbatch_size}: choose dp and mb that divide it"
            )
    if problems:
        raise PartitionError("; ".join(problems))
