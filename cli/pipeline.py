"""``partition-explorer pipeline``: contiguous stages for a pipeline schedule, the simulated step
time and bubbles, each stage's memory, against the splits people use today."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from partitioner import pipeline
from partitioner.pipeline.schedules import SCHEDULES
from partitioner.units import format_bytes, format_seconds

from .inputs import EXIT_OK, add_model_arguments, load_model, rate, resolve_devices, write_output
from .report import format_table

__all__ = ["register"]

EXAMPLES = """examples:
  partition-explorer pipeline transformer --stages 4 --microbatches 8 --schedule 1f1b
  partition-explorer pipeline gpt2_small --devices 4x1GiB --stages 4 --microbatches 16 --training adam
  partition-explorer pipeline transformer --stages 4 --schedule zero_bubble --training sgd --out pipe.json

The split minimises the slowest stage (forward + backward + outgoing transfer per microbatch)
under each device's memory, exactly, by dynamic programming over cut points; the step time and
bubble fraction come from simulating the schedule's per-rank action lists (the same order as
torch.distributed.pipelining's schedules). Equal-layer and by-parameter splits are shown beside it.
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("pipeline", help="split a model into pipeline stages and simulate a schedule",
                       description="split a model into pipeline stages and simulate a schedule",
                       parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES)
    add_model_arguments(p)
    p.add_argument("--devices", metavar="SPEC", help="devices, one per stage (default: the model's)")
    p.add_argument("--stages", type=int, default=4, help="pipeline stages (default 4)")
    p.add_argument("--microbatches", type=int, default=8, help="microbatches per step (default 8)")
    p.add_argument("--schedule", choices=list(SCHEDULES), default="1f1b", help="schedule (default 1f1b)")
    p.add_argument("--training", choices=["sgd", "adam"], help="train (gradients, optimizer state, backward)")
    p.add_argument("--transfer-rate", metavar="BYTES_PER_S", type=rate, default=25e9,
                   help="link rate between stages (default 25GB)")
    p.add_argument("--out", metavar="FILE", help="write the pipeline plan JSON here (- for stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.set, args.devices)
    devices = resolve_devices(args.devices, model)
    pp = pipeline.plan(model.graph, devices, stages=args.stages, microbatches=args.microbatches,
                       schedule=args.schedule, training=args.training, transfer_rate_bytes_per_s=args.transfer_rate)
    if args.out:
        write_output(args.out, pp.to_json(), "pipeline plan")
    if args.out == "-":
        return EXIT_OK
    caps = {d.logical_id: d.memory_bytes for d in devices}
    rows = [[s, len(nodes), format_seconds(f), format_seconds(b), format_bytes(mem), format_bytes(stash),
             f"{mem / caps[d]:.1%}"]
            for s, (nodes, f, b, mem, stash, d) in enumerate(zip(pp.stages, pp.stage_forward_s, pp.stage_backward_s,
                                                                 pp.stage_memory_bytes, pp.stage_stash_bytes,
                                                                 pp.device_ids))]
    print(f"model {model.label}: {args.stages} stages, {args.microbatches} microbatches, {args.schedule}"
          + (f", training with {args.training}" if args.training else ", inference"))
    print(format_table(["stage", "nodes", "forward/mb", "backward/mb", "memory", "of which stash", "of device"],
                       rows, right=(1, 2, 3, 4, 5, 6)))
    print(f"\nstep time {format_seconds(pp.step_time_s)}, bubble {pp.bubble_fraction:.1%}")
    for name, step, sizes in pp.baselines:
        gain = step / pp.step_time_s - 1 if pp.step_time_s else 0.0
        print(f"  {name} split {list(sizes)}: {format_seconds(step)} ({gain:+.1%} slower than this split)")
    sys.stdout.flush()
    return EXIT_OK
