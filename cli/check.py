"""``check``: validate a plan against the model and devices, for CI (exit 1 on any violation).

The command re-traces MODEL (torch is imported then, not before: a plan file that cannot be read
is refused without it).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cli.arguments import add_cost_arguments, add_model_arguments, positive_float
from cli.inputs import EXIT_FAIL, EXIT_OK, load_model, load_plan, read_node_latency, refuse_other_model
from cli.report import describe_devices, format_cost_models
from partitioner import parse_devices
from partitioner.accelerator.check import check_plan
from partitioner.units import format_seconds

__all__ = ["cmd_check", "add_check_arguments", "as_flags"]


def cmd_check(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan)
    devices = parse_devices(args.devices) if args.devices else list(plan.devices)  # before the trace
    model = load_model(args.model, args.set)
    rate = args.transfer_rate  # None: the rate the plan was made with
    node_latency = read_node_latency(args.node_latency) if args.node_latency else None
    models = ["physical", "torch"] if args.cost_model == "both" else [args.cost_model or plan.cost_model]
    results = {
        m: check_plan(
            plan,
            model.graph,
            devices,
            rate,
            node_latency,
            args.max_latency,
            args.max_memory_utilisation,
            args.strict,
            cost_model=m,
        )
        for m in models
    }
    results = {m: refuse_other_model(r, plan, model) for m, r in results.items()}  # as run and export refuse it
    for note in dict.fromkeys(n for r in results.values() for n in r.notes):
        print(f"note: {as_flags(note)}", file=sys.stderr)
    where = f"{model.label} on {describe_devices(devices)}"
    name = "<stdin>" if args.plan == "-" else args.plan
    if len(models) > 1:
        print(format_cost_models(results))
        print()
    code = EXIT_OK
    for m, result in results.items():
        tag = f"[{m} cost model] " if len(models) > 1 else ""
        code = max(code, _report_check(result, args, f"{tag}{name}", where))
    return code


def _report_check(result: Any, args: argparse.Namespace, name: str, where: str) -> int:
    if result.ok:
        ev = result.evaluated
        assert ev is not None  # no violation means the plan was scored
        budgets = []
        if args.max_latency is not None:
            budgets.append(f"--max-latency {args.max_latency:g} s")
        if args.max_memory_utilisation is not None:
            budgets.append(f"--max-memory-utilisation {args.max_memory_utilisation:g}")
        within = f"; within {' and '.join(budgets)}" if budgets else ""
        print(
            f"OK: {name} is valid for {where}: {len(ev.partitions)} partition(s), latency "
            f"{format_seconds(ev.latency_s)}, peak memory utilisation {ev.memory_utilisation():.1%}{within}"
        )
        return EXIT_OK
    count = len(result.violations)
    print(f"FAIL: {name} is not valid for {where}: {count} violation{'s' if count != 1 else ''}")
    for i, v in enumerate(result.violations, start=1):
        print(f"  {i}. {as_flags(str(v))}")
    return EXIT_FAIL


# The library names its own parameters; the command line says the flags that set them.
_FLAGS = {
    "max_latency_s = ": "--max-latency ",
    "max_latency_s": "--max-latency",
    "max_memory_utilisation = ": "--max-memory-utilisation ",
    "max_memory_utilisation": "--max-memory-utilisation",
    "check with strict=False": "drop --strict",
}


def as_flags(message: str) -> str:
    """``message`` from :func:`check_plan` with its parameter names as this command's flags."""
    for name, flag in _FLAGS.items():
        message = message.replace(name, flag)
    return message


def add_check_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``check`` (its parser is made with the other plan commands', in order)."""
    p.add_argument("plan", metavar="PLAN.json", help="the plan file (- for stdin)")
    add_model_arguments(p)
    p.add_argument(
        "--devices", metavar="SPEC", help="devices to check against (default: the devices recorded in the plan)"
    )
    add_cost_arguments(p, partitioning=False)
    p.add_argument(
        "--max-latency",
        metavar="SECONDS",
        type=positive_float,
        help="fail when the end-to-end latency exceeds this many seconds",
    )
    p.add_argument(
        "--max-memory-utilisation",
        metavar="FRACTION",
        type=positive_float,
        help="fail when any device uses more than this fraction of its memory, e.g. 0.9",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="also fail when the model's graph changed since the plan was made, even if the plan still fits",
    )
