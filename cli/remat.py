"""``partition-explorer remat``: what functorch's min-cut saves for the backward and what it
recomputes, at one activation memory budget or over a sweep."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli.arguments import add_model_arguments, time_limit
from cli.commands import COMMON_EPILOG
from cli.inputs import EXIT_OK, EXIT_RUN, CLIError, load_model, write_output
from cli.report import format_table
from partitioner import remat
from partitioner.errors import RunError
from partitioner.units import format_bytes, format_flops, format_seconds

__all__ = ["register"]

EXAMPLES = """examples:
  partition-explorer remat mlp --budget 0.5
  partition-explorer remat transformer --sweep
  partition-explorer remat transformer --budget 0.3 --loss mean --out remat.json
  partition-explorer remat gpt2_small --sweep --out -
  partition-explorer remat hf:gpt2 --set n_layer=2 --budget 0.5

The joint forward-backward graph is traced with AOT autograd and split by torch's own
min_cut_rematerialization_partition under activation_memory_budget (1: save what min-cut would,
0: recompute all it can), in a worker process stopped after --timeout seconds. Saved values and
recomputed ops are named by the traced graph's nodes (as in `plan`); views are left out (redoing
them is free). FLOPs use torch.utils.flop_counter's formulas, one per element for pointwise ops.
Saved bytes count each storage once at its full size (views of one tensor keep all of it alive).
Weights on the meta device (large hf: models) become fake tensors (shapes, no memory), so any size
runs: hf:llama-3-8b takes about a minute; its gradients are not computed to check the split.
"""

SWEEP = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"budget must be a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"budget must be between 0 and 1, got {text}")
    return value


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "remat",
        help="what training saves and recomputes (functorch's min-cut)",
        description="what training saves for the backward and recomputes, by torch's min-cut",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES + COMMON_EPILOG,
    )
    add_model_arguments(p)
    p.add_argument("--budget", type=_budget, default=0.5, help="activation memory budget, 0 to 1 (default 0.5)")
    p.add_argument("--sweep", action="store_true", help="every budget from 0 to 1 in steps of 0.1")
    p.add_argument("--loss", choices=list(remat.LOSSES), default="sum", help="loss over the outputs (default sum)")
    p.add_argument("--out", metavar="FILE", help="write the results as JSON here (- for stdout)")
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=time_limit,
        default=300.0,
        help="stop the worker process after this long (default 300)",
    )
    p.set_defaults(func=run)


SHOWN = 30  # recomputed nodes named in the text report


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.set)
    budgets = SWEEP if args.sweep else (args.budget,)
    try:
        results = remat.sweep(
            model.graph,
            model.graph.example_inputs or (),
            budgets,
            args.loss,
            timeout_s=args.timeout,
            progress=None if args.out == "-" else (lambda text: print(f"  {text}", file=sys.stderr)),
        )
    except RunError as exc:
        raise CLIError(f"the min-cut worker failed: {exc}", EXIT_RUN) from None
    if args.out:
        data = {"model": model.label, "loss": args.loss, "results": [r.to_dict() for r in results]}
        write_output(args.out, json.dumps(data, indent=2), "remat results")
        if args.out == "-":
            return EXIT_OK
    rows = [
        [
            f"{r.budget:g}",
            format_bytes(r.saved_activation_bytes),
            len(r.saved),
            len(r.recomputed),
            r.recomputed_ops,
            format_flops(r.recompute_flops),
            format_seconds(r.recompute_time_s),
        ]
        for r in results
    ]
    print(
        f"model {model.label}: loss {args.loss} of the outputs; parameters and inputs the backward reads: "
        f"{format_bytes(results[0].saved_input_bytes)} at budget {results[0].budget:g}"
    )
    print(
        format_table(
            [
                "budget",
                "saved activations",
                "saved nodes",
                "recomputed nodes",
                "recomputed ops",
                "recompute FLOPs",
                "recompute time",
            ],
            rows,
            right=(1, 2, 3, 4, 5, 6),
        )
    )
    if not args.sweep:
        r = results[0]
        shown = ", ".join(r.recomputed[:SHOWN]) or "nothing"
        more = f" and {len(r.recomputed) - SHOWN} more (--out FILE lists them all)" if len(r.recomputed) > SHOWN else ""
        print(f"\nrecomputed: {shown}{more}")
        print(f"joint trace {r.joint_trace_s:.2f} s, min-cut {r.solver_s:.2f} s")
    return EXIT_OK
