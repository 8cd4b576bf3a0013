"""What a local composed run can run, asked before any process starts: the planner prices more
(context and expert parallelism, HSDP, offload, recomputation, interleaved schedules) than
:func:`partitioner.cluster.run.compose.run_layout` runs. The one rule and its one wording, read by
``partition-explorer cluster --run`` (the layout as written: :func:`check_runnable`) and by the
app's *Run this layout* (the layout reduced to this machine: :func:`local_layout`). Torch-free."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from partitioner.cluster.layouts import Layout
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import NO_SCHEDULE, SCHEDULES, Schedule, get_schedule

__all__ = ["check_runnable", "local_layout", "run_schedule", "EXPORTED_PIPELINE"]

# A Hugging Face model runs as built (its exported graph cannot be pickled for the ranks), and the
# pipelined run cuts a traced graph into stages.
EXPORTED_PIPELINE = (
    "pipeline stages of a Hugging Face model are not run here (its exported graph cannot be sent "
    "to other processes): run it with pp1"
)


def run_schedule(layout: Layout) -> Schedule:
    """The schedule a composed run runs ``layout``'s stages with: its own, GPipe for ``"none"``
    (a layout without a schedule named). The one place that default is written."""
    return get_schedule("gpipe" if layout.schedule == NO_SCHEDULE else layout.schedule)


def check_runnable(layout: Layout, inputs: Sequence[Any], *, exported: bool = False) -> None:
    """Raise :class:`PartitionError` naming every part of ``layout`` a local run cannot run on these
    example inputs (the planner prices more than the run runs), before any process starts;
    ``exported``: the model is a Hugging Face model run as built. O(inputs)."""
    problems = _layout_problems(layout, exported) + _batch_problems(layout, tuple(inputs))
    if problems:
        raise PartitionError("; ".join(problems))


def local_layout(layout: Layout, inputs: Sequence[Any], processes: int, *, exported: bool = False) -> Layout:
    """``layout`` as this machine runs it on at most ``processes`` processes: the same tensor and
    pipeline degrees, ZeRO stage and schedule; data parallelism reduced to the processes left and
    to a divisor of the example's rows, microbatches that divide a replica's share, recomputation
    dropped (ZeRO 0 where one replica is left). Raises :class:`PartitionError` naming every part
    it cannot run (:func:`check_runnable`'s rules and words). O(dp + microbatch size)."""
    wanted = dataclasses.replace(layout, recompute="none")
    problems = _layout_problems(wanted, exported)
    ranks = layout.tp * layout.pp
    if ranks > processes:
        problems.append(
            f"tp{layout.tp} x pp{layout.pp} needs {ranks} processes and this machine runs at most "
            f"{processes}: choose fewer tensor-parallel ranks or stages"
        )
    inputs = tuple(inputs)
    if not _batched(inputs):
        problems.append(_NO_BATCH)
    if problems:
        raise PartitionError("; ".join(problems))
    batch = int(inputs[0].shape[0])
    dp = max(d for d in range(1, min(layout.dp, processes // ranks) + 1) if batch % d == 0)
    share = batch // dp
    mb = max(d for d in range(1, min(layout.microbatch_size, share) + 1) if share % d == 0)
    fitted = dataclasses.replace(wanted, dp=dp, microbatch_size=mb, zero=layout.zero if dp > 1 else 0)
    check_runnable(fitted, inputs, exported=exported)
    return fitted


_NO_BATCH = "every example input must be a tensor with a batch dimension to split over dp"


def _batched(inputs: tuple[Any, ...]) -> bool:
    return bool(inputs) and all(hasattr(x, "shape") and x.dim() >= 1 for x in inputs)


def _layout_problems(layout: Layout, exported: bool) -> list[str]:
    """What the layout asks that a local run does not run, whatever the inputs."""
    problems = []
    if exported and layout.pp > 1:
        problems.append(EXPORTED_PIPELINE)
    if layout.pp > 1 and layout.zero >= 2:
        problems.append(
            f"pipeline stages run here with ZeRO 0 or 1 (a gradient all-reduce over dp), not with "
            f"FSDP (got pp={layout.pp} zero{layout.zero}): choose zero0 or zero1, or pp1"
        )
    if layout.pp > 1 and not run_schedule(layout).runs_composed:
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
    return problems


def _batch_problems(layout: Layout, inputs: tuple[Any, ...]) -> list[str]:
    """Whether the example's batch splits over dp and into microbatches."""
    if not _batched(inputs):
        return [_NO_BATCH]
    rows = {int(x.shape[0]) for x in inputs}
    per = min(rows) // layout.dp
    if len(rows) != 1 or min(rows) % layout.dp or per % layout.microbatch_size:
        return [
            f"the batch ({sorted(rows)} rows) must divide over dp={layout.dp} and each replica's "
            f"share into microbatches of {layout.microbatch_size}: choose dp and mb that divide it"
        ]
    return []
