"""``partition-explorer run``: run a plan on local processes with torch.distributed and put the
measurement beside the prediction."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli.arguments import add_model_arguments, bounded, time_limit
from cli.commands import COMMON_EPILOG
from cli.inputs import EXIT_FAIL, EXIT_OK, CLIError, load_model, load_plan, other_model
from cli.report import format_table
from partitioner.accelerator.api import evaluate_plan
from partitioner.calibration.naming import calibrated_words
from partitioner.device_profile import DeviceProfile
from partitioner.devices import with_profile
from partitioner.runtime.calibrate import local_profile
from partitioner.units import format_bytes, format_seconds, format_signed

__all__ = ["register"]

EXAMPLES = """examples:
  partition-explorer plan mlp --devices 4x1536KiB --out plan.json
  partition-explorer run plan.json mlp
  partition-explorer run plan.json mlp --calibrate
  partition-explorer run plan.json mlp --timeout 60 --json

Starts one process per device of the plan that holds a partition (gloo on CPU, NCCL on GPUs;
an idle device gets none), each running its partitions; checks the outputs against the model in one process; prints each partition's
measured compute time and input wait beside the plan's prediction. Exit 1 when the outputs
differ. Across hosts, run the same plan under torchrun (see docs/running.md).
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "run",
        help="run a plan on local processes and compare with its prediction",
        description="run a plan on local processes and compare with its prediction",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES + COMMON_EPILOG,
    )
    p.add_argument("plan", metavar="PLAN.json", help="the plan file (- for stdin)")
    add_model_arguments(p)
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=time_limit,
        default=120.0,
        help="end the run (and every process) after this long (default 120)",
    )
    p.add_argument(
        "--repeats", type=bounded(int, 1, 100), default=3, help="timed walks after a warm-up (default 3, at most 100)"
    )
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="re-score the plan with this machine's device profile (the one `partition-explorer "
        "calibrate` cached; measured first when there is none) before comparing",
    )
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument(
        "--torchrun",
        action="store_true",
        help="this process is one rank of a torchrun job (RANK, WORLD_SIZE and the "
        "rendezvous come from torchrun): run this rank's partitions, rank 0 reports",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan)
    model = load_model(args.model, args.set)
    why = other_model(plan, model)
    if why:  # before any process starts, as check and export refuse it
        raise CLIError(f"plan file {args.plan}: {why}", EXIT_FAIL)
    inputs = model.graph.example_inputs or ()
    from partitioner.runtime.execute import run as run_plan  # torch: after the plan and model are read

    if args.torchrun:
        return _torchrun(args, plan, model.graph, inputs)
    progress = None if args.json else (lambda text: print(f"  {text}", file=sys.stderr))
    profile: DeviceProfile | None = None
    if args.calibrate:  # this machine's profile (cached, or measured now) as every device's type
        profile = local_profile(progress=progress)
        plan = evaluate_plan(
            model.graph,
            with_profile(plan.devices, profile),
            plan.node_to_partition(),
            plan.partition_to_devices(),
            None,
            mode=plan.mode,
            edited=plan.provenance.edited,
            cost_model=plan.cost_model,
            keep_ids=True,
        )
    result = run_plan(
        plan, model.graph, inputs, timeout_s=args.timeout, repeats=max(1, args.repeats), progress=progress
    )
    if args.json:
        print(
            json.dumps(
                {"plan": args.plan, "model": model.label, "calibrated": args.calibrate, "run": result.to_dict()},
                indent=2,
            )
        )
    else:
        rows = [
            [
                f"P{p.id}",
                ",".join(map(str, p.ranks)),
                format_seconds(p.predicted_s),
                format_seconds(p.compute_s),
                format_seconds(p.wait_s),
                format_bytes(p.received_bytes),
                f"{p.ratio:.3g}x",
                _error(p.compute_s, p.predicted_s),
            ]
            for p in result.partitions
        ]
        print(
            format_table(
                ["partition", "ranks", "predicted", "measured", "waiting", "received", "measured/predicted", "error"],
                rows,
                right=(2, 3, 4, 5, 6, 7),
            )
        )
        how = (
            ", ".join(filter(None, ("calibrated on this machine", calibrated_words(profile))))
            if profile
            else "roofline"
        )
        print(
            f"\nend to end ({how}): predicted {format_seconds(result.predicted_latency_s)}, measured "
            f"{format_seconds(result.measured_latency_s)} "
            f"(error {_error(result.measured_latency_s, result.predicted_latency_s)}) on {result.world_size} processes "
            f"({result.backend}); outputs {'equal the model' if result.outputs_equal else 'DIFFER from the model'}"
        )
    return EXIT_OK if result.outputs_equal else EXIT_FAIL


def _error(measured: float, predicted: float) -> str:
    return format_signed((measured - predicted) / predicted) if predicted > 0 else "-"


def _torchrun(args: argparse.Namespace, plan: Any, graph: Any, inputs: Any) -> int:
    """One rank of ``torchrun --nproc-per-node N [--nnodes M --rdzv-endpoint HOST:PORT] -m cli run
    plan.json MODEL --torchrun``: every rank runs its partitions; rank 0 checks the outputs."""
    import os

    import torch

    from partitioner.runtime.execute import prepare, ranked_devices, run_rank

    world = int(os.environ.get("WORLD_SIZE", "0"))
    busy = len(ranked_devices(plan))  # one rank per device that holds a partition
    if world != busy:
        raise CLIError(
            f"the plan runs on {busy} devices (those holding a partition) but torchrun started "
            f"{world or 'no'} processes; start it with {busy} in all (--nnodes x --nproc-per-node)"
        )
    prepared = prepare(plan, graph, inputs)
    result = run_rank(prepared, repeats=max(1, args.repeats))
    if int(os.environ["RANK"]) != 0:
        return EXIT_OK
    try:
        torch.testing.assert_close(result.outputs, prepared.reference)
        equal = True
    except AssertionError:
        equal = False
    print(
        json.dumps(
            {
                "rank": 0,
                "world_size": world,
                "outputs_equal": equal,
                "measured_latency_s": result.latency_s,
                "predicted_latency_s": plan.latency_s,
            }
        )
    )
    return EXIT_OK if equal else EXIT_FAIL
