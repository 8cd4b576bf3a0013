"""``partition-explorer pipeline``: contiguous stages for a pipeline schedule, the simulated step
time and bubbles, each stage's memory, against the splits people use today."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Sequence

from cli.arguments import add_model_arguments, rate, time_limit
from cli.commands import COMMON_EPILOG
from cli.inputs import EXIT_FAIL, EXIT_OK, CLIError, load_model, resolve_devices, write_output
from cli.report import format_table
from partitioner import pipeline
from partitioner.cost.model import device_profile
from partitioner.cost.training import OPTIMIZERS
from partitioner.interop.export import to_pipeline_split_spec
from partitioner.pipeline.schedules import SCHEDULES, MicrobatchError, check_microbatches, stages_per_rank
from partitioner.pipeline.stages import BOTTLENECK_NOTE, MAX_MICROBATCHES
from partitioner.units import format_bytes, format_change, format_seconds, format_share, format_signed

if TYPE_CHECKING:  # the runner imports torch: only for the type hints
    from partitioner.pipeline.runner import PipelineRun
    from partitioner.pipeline.stages import PipelinePlan

__all__ = ["register"]

EXAMPLES = """examples:
  partition-explorer pipeline transformer --stages 4 --microbatches 8 --schedule 1f1b
  partition-explorer pipeline gpt2_small --devices 4x1GiB --stages 4 --microbatches 16 --training adam
  partition-explorer pipeline transformer --stages 4 --schedule zero_bubble --training sgd --out pipe.json
  partition-explorer pipeline mlp --stages 2 --microbatches 4 --training adam --run
  partition-explorer pipeline mlp --stages 2 --microbatches 4 --run --out -
  partition-explorer pipeline transformer --stages 2 --split-spec-out split.json

The split minimises the slowest stage (forward + backward + outgoing transfer per microbatch)
under each device's memory, exactly, by dynamic programming over cut points; the step time and
bubble fraction come from simulating the schedule's per-rank action lists (the same order as
torch.distributed.pipelining's schedules). Equal-layer and by-parameter splits are shown beside it.

--run runs the split for real with torch.distributed.pipelining (gpipe, 1f1b, interleaved_1f1b),
one process per rank over gloo, on the model's example batch cut into the microbatches; it checks
the outputs (and, with --training, every gradient) against the model in one process and prints
the measured step time beside the simulated one. Exit 1 when they differ.
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "pipeline",
        help="split a model into pipeline stages and simulate a schedule",
        description="split a model into pipeline stages and simulate a schedule",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES + COMMON_EPILOG,
    )
    add_model_arguments(p)
    p.add_argument("--devices", metavar="SPEC", help="devices, one per stage (default: the model's)")
    p.add_argument("--stages", type=int, default=4, help="pipeline stages (default 4)")
    p.add_argument("--microbatches", type=int, default=8, help="microbatches per step (default 8)")
    p.add_argument("--schedule", choices=list(SCHEDULES), default="1f1b", help="schedule (default 1f1b)")
    p.add_argument(
        "--training",
        choices=list(OPTIMIZERS),
        metavar="OPTIMIZER",
        help="train with this optimizer (gradients, its state, the backward; none: no state): " + ", ".join(OPTIMIZERS),
    )
    p.add_argument(
        "--transfer-rate",
        metavar="BYTES_PER_S",
        type=rate,
        default=25e9,
        help="link rate between stages (default 25GB)",
    )
    p.add_argument("--out", metavar="FILE", help="write the pipeline plan JSON here (- for stdout)")
    p.add_argument(
        "--split-spec-out",
        metavar="FILE",
        help="write the split_spec of torch.distributed.pipelining.pipeline for these stages",
    )
    p.add_argument(
        "--run", action="store_true", help="run the stages on local processes with torch's schedules and compare"
    )
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=time_limit,
        default=180.0,
        help="with --run: end the run (and every process) after this long (default 180)",
    )
    p.set_defaults(func=run)


def _check_schedule(args: argparse.Namespace) -> None:
    """torch's microbatch rule for the schedule, before the (slow) load and trace."""
    per_rank = stages_per_rank(args.schedule)
    if args.stages < 1 or args.stages % per_rank:
        raise CLIError(
            f"--stages {args.stages}: {args.schedule} runs {per_rank} stages per device; give a "
            f"positive multiple of {per_rank}"
        )
    if args.microbatches > MAX_MICROBATCHES:
        raise CLIError(
            f"--microbatches {args.microbatches}: at most {MAX_MICROBATCHES:,} microbatches are simulated; "
            "split the batch into fewer, larger microbatches"
        )
    try:
        check_microbatches(args.schedule, args.stages // per_rank, args.microbatches)
    except MicrobatchError as exc:
        raise CLIError(f"--microbatches {args.microbatches}: {exc}") from None


def _check_runnable(pp: Any, model: Any) -> None:
    """Why the plan cannot run, in the command line's words, before any process starts."""
    from partitioner.pipeline.runner import check_runnable

    try:
        check_runnable(pp, model.graph.example_inputs or ())
    except MicrobatchError as exc:
        hint = ""
        if exc.batch is not None:
            bigger = exc.microbatches * max(1, -(-exc.batch // exc.microbatches))
            hint = f" (sample models: --set batch_size={bigger})"
        raise CLIError(f"--microbatches {exc.microbatches}: {exc}{hint}") from None


def run(args: argparse.Namespace) -> int:
    _check_schedule(args)
    model = load_model(args.model, args.set, args.devices)
    devices = resolve_devices(args.devices, model)
    pp = pipeline.plan(
        model.graph,
        devices,
        stages=args.stages,
        microbatches=args.microbatches,
        schedule=args.schedule,
        training=args.training,
        transfer_rate_bytes_per_s=args.transfer_rate,
    )
    if args.run:
        _check_runnable(pp, model)
    if args.out == "-" and args.split_spec_out == "-":
        raise CLIError("--out - and --split-spec-out - both write to stdout; send one to a file")
    if args.split_spec_out:
        _write_split_spec(args, pp, model, devices)
    result = _run_stages(args, pp, model) if args.run else None
    if args.out:
        _write_plan(args.out, pp, result)
    status = EXIT_OK if result is None or _agrees(result) else EXIT_FAIL
    if args.out == "-":  # the JSON is the whole of stdout
        return status
    _print_stages(args, model.label, pp, devices)
    _print_step(pp)
    if result is not None:
        _print_run(result, devices)
    sys.stdout.flush()
    return status


def _write_split_spec(args: argparse.Namespace, pp: PipelinePlan, model: Any, devices: Sequence[Any]) -> None:
    """``--split-spec-out``: the stages as torch.distributed.pipelining's split_spec."""
    spec = to_pipeline_split_spec(pp.as_plan(model.graph, devices, args.transfer_rate), model.graph)
    write_output(args.split_spec_out, json.dumps(spec, indent=2), "split spec")


def _run_stages(args: argparse.Namespace, pp: PipelinePlan, model: Any) -> PipelineRun:
    """``--run``: the stages on local processes; progress goes to stderr unless the JSON goes to
    stdout."""
    quiet = args.out == "-"
    return pipeline.run(
        pp,
        model.graph,
        model.graph.example_inputs or (),
        timeout_s=args.timeout,
        progress=None if quiet else (lambda text: print(f"  {text}", file=sys.stderr)),
    )


def _write_plan(out: str, pp: PipelinePlan, result: PipelineRun | None) -> None:
    """``--out``: the plan as JSON, with the run's figures under "run" when it ran."""
    data = pp.to_dict()
    if result is not None:
        data["run"] = result.to_dict()
    write_output(out, json.dumps(data, indent=2), "pipeline plan")


def _print_stages(args: argparse.Namespace, label: str, pp: PipelinePlan, devices: Sequence[Any]) -> None:
    """What was asked, then each stage's nodes, times and memory against its device's capacity."""
    caps = {d.logical_id: d.memory_bytes for d in devices}
    rows = [
        [
            s,
            len(nodes),
            format_seconds(f),
            format_seconds(b) if pp.training else "-",
            format_bytes(mem),
            format_bytes(stash),
            format_share(mem, caps[d]),
        ]
        for s, (nodes, f, b, mem, stash, d) in enumerate(
            zip(
                pp.stages,
                pp.stage_forward_s,
                pp.stage_backward_s,
                pp.stage_memory_bytes,
                pp.stage_stash_bytes,
                pp.device_ids,
            )
        )
    ]
    print(
        f"model {label}: {args.stages} stages, {args.microbatches} microbatches, {args.schedule}"
        + (f", training with {args.training}" if args.training else ", inference")
    )
    print(
        format_table(
            ["stage", "nodes", "forward/mb", "backward/mb", "memory", "of which stash", "of device"],
            rows,
            right=(1, 2, 3, 4, 5, 6),
        )
    )
    held = pp.device_memory_bytes()
    if len(held) < len(pp.stages):  # several stages a device: what each device holds in all
        print(
            "devices hold: "
            + ", ".join(f"{d}: {format_bytes(b)} ({format_share(b, caps[d])})" for d, b in sorted(held.items()))
        )


def _print_step(pp: PipelinePlan) -> None:
    """The simulated step and bubble, against the equal-layer and by-parameter splits."""
    print(f"\nstep time {format_seconds(pp.step_time_s)}, bubble {pp.bubble_fraction:.1%}")
    for name, step, sizes in pp.baselines:
        gain = step / pp.step_time_s - 1 if pp.step_time_s else 0.0
        change = format_change(
            gain, "slower than this split", "faster than this split", "the same step time as this split"
        )
        print(f"  {name} split {list(sizes)}: {format_seconds(step)} ({change})")
    # A simple split faster than this one must be one that does not fit memory: say so.
    if any(step < pp.step_time_s * (1 - 0.0005) for _, step, _ in pp.baselines):
        print(f"  ({BOTTLENECK_NOTE})")


def _print_run(result: PipelineRun, devices: Sequence[Any]) -> None:
    """``--run``: the measured step and each stage's forward beside the simulation, and whether
    the outputs (and gradients) equal the model's in one process."""
    profile = device_profile(devices)
    how = f"on profile {profile.name!r}" if profile is not None else "roofline estimates"
    if profile is not None and profile.measured_at:
        from partitioner.calibration.naming import calibrated_words

        how += f" ({calibrated_words(profile)})"
    print(
        f"\nran on {result.world_size} processes ({result.backend}): step measured "
        f"{format_seconds(result.measured_step_s)} against {format_seconds(result.simulated_step_s)} "
        f"simulated ({how}): error {_error(result.measured_step_s, result.simulated_step_s)}; "
        "per-stage forward below"
    )
    rows = [
        [s, format_seconds(sim), format_seconds(got), _error(got, sim)]
        for s, (sim, got) in enumerate(zip(result.simulated_forward_s, result.stage_forward_s))
    ]
    print(format_table(["stage", "forward/mb simulated", "forward/mb measured", "error"], rows, right=(1, 2, 3)))
    print(
        f"outputs {'equal' if result.outputs_equal else 'DIFFER from'} the model in one process"
        + (
            ""
            if result.gradients_equal is None
            else f"; gradients {'equal' if result.gradients_equal else 'DIFFER from'} the model's"
            f" (loss {result.loss:.4g})"
        )
    )


def _error(measured: float, predicted: float) -> str:
    return format_signed((measured - predicted) / predicted) if predicted > 0 else "-"


def _agrees(result: Any) -> bool:
    return bool(result.outputs_equal) and result.gradients_equal is not False
