"""Run a pipeline plan for real with torch's own engine: ``torch.distributed.pipelining``.

Each stage of the plan becomes a ``PipelineStage`` around a ``GraphModule`` cut from the traced
graph, and ranks run ``ScheduleGPipe``, ``Schedule1F1B`` or ``ScheduleInterleaved1F1B`` over the
launcher of :mod:`partitioner.processes.launch` (gloo on CPU, NCCL on GPUs, the torchrun
environment), one process per rank. The outputs (and, when training, the loss and every
parameter's gradient) are checked against the single-process model; the measured step time of
each rank and each stage's forward time per microbatch come back beside the simulated ones.
The stages are built by :func:`partitioner.pipeline.stage_modules.build_stage_modules` (NOTE:
[Carrying values across cuts] there); each rank sends back a
:class:`~partitioner.processes.records.RankStep`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from partitioner.errors import PartitionError, RunError
from partitioner.graph import Graph
from partitioner.pipeline.schedules import SCHEDULES, MicrobatchError, check_microbatches, get_schedule
from partitioner.pipeline.stage_modules import build_stage_modules
from partitioner.pipeline.stages import PipelinePlan
from partitioner.processes.launch import default_backend, launch, report_progress
from partitioner.processes.records import RankStep
from partitioner.processes.timing import step_seconds

__all__ = ["PipelineRun", "run", "check_runnable", "build_stage_modules", "RUNNABLE"]

logger = logging.getLogger(__name__)

# The schedules a real run takes: read from the one schedule table.
RUNNABLE = tuple(name for name, s in SCHEDULES.items() if s.runs)


@dataclass(frozen=True)
class PipelineRun:
    """A pipeline plan as it ran on ``world_size`` processes."""

    outputs_equal: bool  # the merged microbatch outputs equal the model's (torch.testing.assert_close)
    gradients_equal: bool | None  # training: every parameter's gradient equals the model's; else None
    loss: float | None  # training: the mean microbatch loss on the last stage
    measured_step_s: float  # the slowest rank's median step (NOTE: [One statistic])
    simulated_step_s: float
    rank_step_s: tuple[float, ...]
    stage_forward_s: tuple[float, ...]  # measured forward per microbatch, per stage
    simulated_forward_s: tuple[float, ...]
    world_size: int
    backend: str
    schedule: str
    microbatches: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The training loss of a run: mean squared error against a fixed random target."""
    return torch.nn.functional.mse_loss(output.float(), target.float())


def _microbatches(inputs: Sequence[torch.Tensor], m: int) -> list[tuple[torch.Tensor, ...]]:
    """The example batch cut into ``m`` equal microbatches along dimension 0, as the schedule
    cuts it (the plan's costs are per microbatch of the same batch)."""
    sizes = {x.shape[0] for x in inputs}
    if len(sizes) != 1:
        raise PartitionError(
            f"the inputs' first dimensions differ ({sorted(sizes)}); a pipelined run cuts "
            "every input into microbatches along dimension 0, which must be the batch"
        )
    batch = sizes.pop()
    if batch % m:
        bigger = m * max(1, -(-batch // m))
        divisors = tuple(d for d in range(1, batch + 1) if batch % d == 0)
        raise MicrobatchError(
            f"microbatches must divide the example batch's first dimension: {batch} does not split into {m} "
            f"equal microbatches; choose microbatches in {', '.join(map(str, divisors))}, or an example batch "
            f"whose first dimension is a multiple of {m} (e.g. {bigger})",
            "",
            m,
            divisors,
            batch,
        )
    chunks = [x.chunk(m) for x in inputs]
    return [tuple(c[k] for c in chunks) for k in range(m)]


def _entry(
    rank: int,
    world_size: int,
    modules: list[fx.GraphModule],
    schedule: str,
    m: int,
    inputs: tuple[Any, ...],
    target: torch.Tensor | None,
    repeats: int,
) -> RankStep:
    """What each rank runs: its stages (stage s on rank s mod world size) under torch's schedule."""
    count = len(modules)
    local = [s for s in range(count) if s % world_size == rank]
    forward_times: dict[int, list[float]] = {s: [] for s in local}
    built = _local_stages(modules, local, _rank_device(rank), forward_times)
    sched = _torch_schedule(schedule, built, m, target)
    last_here = (count - 1) in local
    args = inputs if 0 in local else ()
    steps, outputs, losses = _timed_steps(sched, built, forward_times, args, target, last_here, repeats)
    grads = _local_grads(built) if target is not None else {}
    return RankStep(
        rank,
        step_s=step_seconds(steps),
        outputs=tuple(tree_flatten(outputs)[0]) if last_here else None,
        grads=grads,
        loss=float(torch.stack(losses).detach().mean()) if losses else None,
        stage_forward_s={s: (sum(t) / len(t) if t else 0.0) for s, t in forward_times.items()},
    )


def _rank_device(rank: int) -> torch.device:
    if torch.cuda.is_available() and default_backend() == "nccl":
        return torch.device(f"cuda:{rank}")
    return torch.device("cpu")


def _local_stages(
    modules: list[fx.GraphModule], local: list[int], device: torch.device, forward_times: dict[int, list[float]]
) -> list[Any]:
    """This rank's ``PipelineStage``s, each timing its forwards into ``forward_times``."""
    from torch.distributed.pipelining import PipelineStage

    built = []
    for s in local:
        module = modules[s].to(device).eval()  # dropout off: the run must equal the model exactly
        started: list[float] = []
        module.register_forward_pre_hook(lambda *_, started=started: started.append(time.perf_counter()))
        module.register_forward_hook(
            lambda *_, s=s, started=started: forward_times[s].append(time.perf_counter() - started.pop())
        )
        built.append(PipelineStage(module, s, len(modules), device))
    return built


def _torch_schedule(schedule: str, built: list[Any], m: int, target: torch.Tensor | None) -> Any:
    """torch's schedule class of ``schedule`` over this rank's stages (a loss when training)."""
    from torch.distributed.pipelining import schedules as torch_schedules

    record = get_schedule(schedule)
    cls = getattr(torch_schedules, record.torch_class)
    loss_fn = _mse if target is not None else None
    return cls(built if len(built) > 1 or record.interleaved else built[0], n_microbatches=m, loss_fn=loss_fn)


def _timed_steps(
    sched: Any,
    built: list[Any],
    forward_times: dict[int, list[float]],
    args: tuple[Any, ...],
    target: torch.Tensor | None,
    last_here: bool,
    repeats: int,
) -> tuple[list[float], Any, list[torch.Tensor]]:
    """The timed steps' seconds, then the last step's outputs (the last stage's rank) and
    microbatch losses; the first step infers shapes and warms up when there are timed ones."""
    steps: list[float] = []
    outputs: Any = None
    losses: list[torch.Tensor] = []
    for attempt in range(repeats + 1):
        for st in built:
            st.submod.zero_grad(set_to_none=True)
        for times in forward_times.values():
            times.clear()
        losses = []
        kwargs: dict[str, Any] = {}
        if target is not None and last_here:
            kwargs = {"target": target, "losses": losses}
        torch.distributed.barrier()
        t0 = time.perf_counter()
        if target is None:
            with torch.no_grad():
                out = sched.step(*args, **kwargs)
        else:
            out = sched.step(*args, **kwargs)
        took = time.perf_counter() - t0
        torch.distributed.barrier()
        if attempt > 0 or not repeats:
            steps.append(took)
        if last_here:
            outputs = out
        report_progress(f"step {attempt + 1} of {repeats + 1}")
    return steps, outputs, losses


def _local_grads(built: list[Any]) -> dict[str, torch.Tensor]:
    """Every gradient this rank's stages hold, by the model's parameter names."""
    grads = {}
    for st in built:
        for name, p in st.submod.named_parameters():
            if p.grad is not None:
                grads[name] = p.grad.detach().cpu()
    return grads


def _close(a: Any, b: Any) -> bool:
    try:
        torch.testing.assert_close(a, b)
        return True
    except (AssertionError, TypeError, ValueError):
        return False


def check_runnable(pp: PipelinePlan, example_inputs: Sequence[Any] | torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The inputs as a tuple, or :class:`PartitionError` saying why ``pp`` cannot run on them (a
    schedule that is simulated only, inputs without a batch dimension; :class:`MicrobatchError`
    for a microbatch count torch's schedule class refuses, or one that does not divide the example
    batch's first dimension): cheap, for a page to ask before it offers the run, and asked again
    by :func:`run` before any process starts."""
    if pp.schedule not in RUNNABLE:
        raise PartitionError(
            f"schedule {pp.schedule!r} is simulated only; a real run takes "
            f"{', '.join(RUNNABLE)} (torch's {', '.join(SCHEDULES[n].torch_class for n in RUNNABLE)})"
        )
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    inputs = tuple(example_inputs)
    if not inputs or not all(isinstance(x, torch.Tensor) and x.dim() > 0 for x in inputs):
        raise PartitionError(
            "a pipelined run splits every input along dimension 0 into microbatches: "
            "the model's inputs must all be tensors with a batch dimension"
        )
    per_rank = get_schedule(pp.schedule).stages_per_rank
    if len(pp.stages) % per_rank:
        raise PartitionError(f"{pp.schedule} runs {per_rank} stages per process; the plan has {len(pp.stages)}")
    check_microbatches(pp.schedule, len(pp.stages) // per_rank, pp.microbatches)  # torch's own rule
    _microbatches(inputs, pp.microbatches)
    return inputs


def _reference(
    gm: fx.GraphModule, mbs: list[tuple[torch.Tensor, ...]], training: bool
) -> tuple[list[torch.Tensor], dict[str, torch.Tensor], torch.Tensor | None]:
    """The same microbatches through the whole model in this process: its outputs (merged over the
    microbatches), and when ``training`` every parameter's gradient of the mean-squared loss
    against a fixed random target, and that target."""
    m = len(mbs)
    gm.eval()
    reference_outs: list[list[torch.Tensor]] = []
    reference_grads: dict[str, torch.Tensor] = {}
    target = None
    if training:
        with torch.no_grad():
            first = tree_flatten(gm(*mbs[0]))[0]
        if len(first) != 1:
            raise RunError(f"a training run needs a model with one output tensor (this one returns {len(first)})")
        gen = torch.Generator().manual_seed(0)
        target = torch.randn((first[0].shape[0] * m, *first[0].shape[1:]), generator=gen)
        gm.zero_grad(set_to_none=True)
        for k, mb in enumerate(mbs):
            out = tree_flatten(gm(*mb))[0][0]
            rows = out.shape[0]
            (_mse(out, target[k * rows : (k + 1) * rows]) / m).backward()
            reference_outs.append([out.detach()])
        reference_grads = {n: p.grad.detach().clone() for n, p in gm.named_parameters() if p.grad is not None}
        gm.zero_grad(set_to_none=True)
    else:
        with torch.no_grad():
            reference_outs = [tree_flatten(gm(*mb))[0] for mb in mbs]
    reference = [torch.cat([outs[i] for outs in reference_outs]) for i in range(len(reference_outs[0]))]
    return reference, reference_grads, target


def _gradients_equal(gm: fx.GraphModule, results: Sequence[RankStep], reference: dict[str, torch.Tensor]) -> bool:
    """Whether the ranks' gradients, gathered under the model's names, equal the reference's."""
    grads = _gathered_grads(gm, results)
    return set(grads) == set(reference) and all(_close(grads[n], reference[n]) for n in reference)


def _gathered_grads(gm: fx.GraphModule, results: Sequence[RankStep]) -> dict[str, torch.Tensor]:
    """Every rank's gradients under the model's own names. A tied weight (an LM head sharing the
    embedding) held by two stages gets its gradient in two pieces, under either name: they add up."""
    canonical: dict[int, str] = {}
    alias = {}
    for name, p in gm.named_parameters(remove_duplicate=False):
        alias[name] = canonical.setdefault(id(p), name)
    grads: dict[str, torch.Tensor] = {}
    for r in results:
        for name, g in (r.grads or {}).items():
            key = alias.get(name, name)
            grads[key] = grads[key] + g if key in grads else g
    return grads


def run(
    pp: PipelinePlan,
    graph: Graph,
    example_inputs: Sequence[Any] | torch.Tensor,
    *,
    backend: str | None = None,
    timeout_s: float = 180.0,
    repeats: int = 2,
    progress: Callable[[str], None] | None = None,
) -> PipelineRun:
    """Run ``pp`` on ``example_inputs`` (the batch, cut into ``pp.microbatches`` microbatches
    along dimension 0) on ``len(pp.stages) / stages-per-rank`` processes. Training plans (``pp.training``) run forward and backward with a mean-squared
    loss and compare every gradient. Raises :class:`RunError` when a rank fails or the run passes
    ``timeout_s``; no process outlives the call."""
    inputs = check_runnable(pp, example_inputs)
    count = len(pp.stages)
    world = count // get_schedule(pp.schedule).stages_per_rank
    modules = build_stage_modules(graph, pp.stages, inputs)
    m = pp.microbatches
    mbs = _microbatches(inputs, m)
    gm = graph.graph_module
    assert gm is not None
    training = pp.training is not None
    reference, reference_grads, target = _reference(gm, mbs, training)
    backend = backend or default_backend()
    if progress:
        progress(f"{count} stages on {world} processes, {m} microbatches, {pp.schedule}")
    args = (modules, pp.schedule, m, inputs, target, repeats)
    results = _launch_ranks(args, count, world, backend, timeout_s, progress)
    last = results[(count - 1) % world]
    got = list(last.outputs or ())
    outputs_equal = len(got) == len(reference) and all(_close(a, b) for a, b in zip(got, reference))
    gradients_equal = _gradients_equal(gm, results, reference_grads) if training else None
    forward = {s: t for r in results for s, t in r.stage_forward_s.items()}
    return PipelineRun(
        outputs_equal=outputs_equal,
        gradients_equal=gradients_equal,
        loss=last.loss,
        measured_step_s=max(r.step_s for r in results),
        simulated_step_s=pp.step_time_s,
        rank_step_s=tuple(r.step_s for r in results),
        stage_forward_s=tuple(float(forward[s]) for s in range(count)),
        simulated_forward_s=tuple(pp.stage_forward_s),
        world_size=world,
        backend=backend,
        schedule=pp.schedule,
        microbatches=m,
    )


def _launch_ranks(
    args: tuple[Any, ...],
    count: int,
    world: int,
    backend: str,
    timeout_s: float,
    progress: Callable[[str], None] | None,
) -> list[RankStep]:
    """Every rank's :func:`_entry` on ``args``, one process each; a failure names the failing
    rank's stages."""
    try:
        return launch(_entry, world, args, timeout_s=timeout_s, backend=backend, progress=progress)
    except RunError as exc:
        where = ""
        if exc.rank is not None:
            held = [s for s in range(count) if s % world == exc.rank]
            where = f" (rank {exc.rank} runs stage(s) {held})"
        raise RunError(f"{exc}{where}", rank=exc.rank) from None
