"""The plan commands: plan, check (in :mod:`cli.check`), render, compare, diff, export.

Each command module registers itself with ``register(subparsers)``; :mod:`cli.main` dispatches.
Building the parser imports no torch (nor the sample models): the commands that trace a model
import it when they run, so ``--help``, ``diff`` and the other commands that read JSON start fast.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Callable

from cli.arguments import add_cost_arguments, add_model_arguments
from cli.check import add_check_arguments, cmd_check
from cli.diff_report import format_diff
from cli.inputs import (
    EXIT_FAIL,
    EXIT_OK,
    CLIError,
    load_model,
    load_plan,
    partition_options,
    read_json,
    refuse_invalid,
    resolve_devices,
    write_output,
)
from cli.report import describe_devices, format_comparison, format_plan_summary
from partitioner import PRESETS, Device
from partitioner.accelerator.api import partition_with
from partitioner.accelerator.compare import compare_modes, default_modes, gaps
from partitioner.accelerator.modes import DEFAULT_MODE, MODES
from partitioner.devices import MAX_MEMORY_BYTES
from partitioner.errors import PartitionError
from partitioner.interop.export import (
    EXPORT_KINDS,
    ExportError,
    export_plan,
    read_aot_mapping,
    to_pipeline_split_spec,
)
from partitioner.options import AotMapping
from partitioner.pipeline import PipelinePlan
from partitioner.plan.diff import diff_plans

__all__ = ["register", "COMMON_EPILOG"]


def cmd_plan(args: argparse.Namespace) -> int:
    if args.out == "-" and args.export and args.export_out == "-":
        raise CLIError("--out - and --export-out - both write to stdout; send one to a file")
    if args.export and not args.export_out:
        raise CLIError(f"--export {args.export} needs --export-out FILE (or - for stdout)")
    mode = args.mode or ("aot_based" if args.aot_mapping else DEFAULT_MODE)
    mapping: dict[str, Any] = {}
    if args.aot_mapping:
        if mode != "aot_based":
            raise CLIError(f"--aot-mapping is for --mode aot_based (got --mode {mode}); drop one")
        try:
            n2p, p2d = read_aot_mapping(read_json(args.aot_mapping, "aot mapping file"))
        except PartitionError as exc:
            raise CLIError(f"aot mapping file {args.aot_mapping}: {exc}") from None
        mapping = {"node_to_partition": n2p, "partition_to_devices": p2d}
    elif mode == "aot_based":
        raise CLIError(
            "--mode aot_based needs --aot-mapping FILE (a plan JSON, an fx-aot export, or "
            '{"node_to_partition": {...}, "partition_to_devices": {...}})'
        )
    model = load_model(args.model, args.set, args.devices)
    devices = resolve_devices(args.devices, model)
    options = partition_options(args)
    if mapping:
        options = options.replace(aot=AotMapping.build(mapping["node_to_partition"], mapping["partition_to_devices"]))
    plan = partition_with(model.graph, devices, mode, options)
    for names in model.graph.tied_parameters:
        print(f"tied parameters (one tensor, counted once): {' = '.join(names)}", file=sys.stderr)
    if model.graph.unpriced_ops:
        from partitioner.tracing.flops import describe_unpriced

        print(f"note: {describe_unpriced(model.graph.unpriced_ops)}", file=sys.stderr)
    try:
        exported = export_plan(plan, args.export, model.graph) if args.export else None
    except ExportError as exc:
        raise CLIError(f"{exc} (nothing was written; run without --export to save the plan)", EXIT_FAIL) from None
    if args.out != "-" and args.export_out != "-":
        print(format_plan_summary(plan, model.graph))
    if args.out:
        write_output(args.out, plan.to_json(), "plan")
    if exported is not None:
        write_output(args.export_out, json.dumps(exported, indent=2), f"{args.export} export")
    return EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan)
    refuse_invalid(plan, args.plan)
    fmt = args.format
    if fmt is None:
        suffix = Path(args.out).suffix.lower().lstrip(".") if args.out != "-" else ""
        fmt = suffix if suffix in ("svg", "png", "dot") else "svg"
    from partitioner.draw.dag import plan_to_dot, render_dot

    source = plan_to_dot(plan)
    data: str | bytes = source if fmt == "dot" else render_dot(source, fmt)
    write_output(args.out, data, f"{fmt} drawing")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.set, args.devices)
    devices = resolve_devices(args.devices, model)
    modes = None
    if args.modes is not None:
        modes = [m.strip() for item in args.modes for m in item.split(",") if m.strip()]
        if not modes:
            raise CLIError(
                f"--modes {','.join(args.modes)!r} names no mode; e.g. --modes size_based,kl_based ({', '.join(MODES)})"
            )
    options = partition_options(args)
    results = compare_modes(model.graph, devices, modes, options=options)
    if model.module is not None and importlib.util.find_spec("accelerate") is not None:
        from partitioner.interop.device_map import accelerate_result

        results.append(
            accelerate_result(
                model.module,
                model.graph,
                devices,
                cost_model=options.cost_model,
                transfer_rate_bytes_per_s=options.transfer_rate_bytes_per_s,
                node_latency=options.node_latency_dict,
            )
        )
    gap = gaps(results)
    if args.json:
        print(
            json.dumps(
                {
                    "model": model.label,
                    "graph_fingerprint": model.graph.fingerprint(),
                    "devices": [d.to_dict() for d in devices],
                    "results": [
                        {
                            **r.to_dict(include_plan=args.include_plans),
                            "gap_to_bound": gap.get(r.mode, (None, None))[0],
                            "gap_to_optimal": gap.get(r.mode, (None, None))[1],
                        }
                        for r in results
                    ],
                },
                indent=2,
            )
        )
    else:
        print(f"model {model.label} on {describe_devices(devices)}")
        print()
        print(format_comparison(results))
    return EXIT_OK if any(r.ok for r in results) else EXIT_FAIL


def cmd_diff(args: argparse.Namespace) -> int:
    a, b = load_plan(args.a), load_plan(args.b)
    d = diff_plans(a, b)
    if args.json:
        print(json.dumps(d.to_dict(), indent=2))
    else:
        print(format_diff(d, args.a, args.b))
    return EXIT_FAIL if args.exit_code and not d.is_empty else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    if args.set and not args.model:
        raise CLIError("--set needs MODEL (the sample model it configures)")
    raw = read_json(args.plan, "plan file")
    if isinstance(raw, dict) and raw.get("kind") == "pipeline":
        data = _export_pipeline(args, raw)
        write_output(args.out, json.dumps(data, indent=2), f"{args.kind} export")
        return EXIT_OK
    plan = load_plan(args.plan)
    model = load_model(args.model, args.set) if args.model else None
    refuse_invalid(plan, args.plan, model=model)
    data = export_plan(plan, args.kind, model.graph if model is not None else None)
    for note in data.get("notes", []) if args.kind == "accelerate-device-map" else []:
        print(f"note: {note}", file=sys.stderr)  # where the map differs from the plan, and why
    write_output(args.out, json.dumps(data, indent=2), f"{args.kind} export")
    return EXIT_OK


def _export_pipeline(args: argparse.Namespace, raw: dict[str, Any]) -> dict[str, Any]:
    """A pipeline plan (``partition-explorer pipeline --out``) exports its stages' split spec."""
    if args.kind != "pipeline-split-spec":
        raise CLIError(f"{args.plan} is a pipeline plan; it exports as --kind pipeline-split-spec only")
    if not args.model:
        raise CLIError("the pipeline-split-spec export needs MODEL (module paths come from the traced model)")
    try:
        pp = PipelinePlan.from_dict(raw)
    except PartitionError as exc:
        raise CLIError(f"plan file {args.plan}: {exc}") from None
    graph = load_model(args.model, args.set).graph
    # The split spec names module paths only: any device of the recorded ids will do.
    devices = [Device(f"device {d}", MAX_MEMORY_BYTES, d) for d in sorted(set(pp.device_ids))]
    return to_pipeline_split_spec(pp.as_plan(graph, devices), graph)


COMMON_EPILOG = """
exit codes: 0 ok; 1 the plan does not fit (violations, budgets, no plan found);
            2 usage error or bad input; 3 internal error (rerun with --debug, report it);
            4 a run on real processes or a worker failed (the message names the rank)
"""

EXAMPLES = {
    "plan": """examples:
  partition-explorer plan mlp                                  # sample model, its default devices
  partition-explorer plan transformer --set n_layer=8 --devices 4x16GiB --mode cost_aware --out plan.json
  partition-explorer plan mlp --devices 4x1536KiB --mode kl_based --transfer-rate 25e9
  partition-explorer plan my_models:build --devices 2xa100-40gb,1x8GiB --out - > plan.json
  partition-explorer plan mlp --mode aot_based --aot-mapping edited_plan.json --out plan.json
  partition-explorer plan mlp --export pipeline-split-spec --export-out split.json

MODEL is a sample model ({models}) or
package.module:factory, a function taking no arguments that returns (module, example_inputs),
importable from the working folder or PYTHONPATH.
SPEC: COUNTxSIZE groups (units B, KiB, MiB, GiB, KB, MB, GB; e.g. 4x1536KiB), mixed groups
(2x16GiB,1x8GiB), a JSON devices file, or presets (2xa100-40gb) of:
  {presets}.
--node-latency FILE: JSON {{"node": [mem_s, compute_s]}} or CSV name,mem_s,compute_s.
""",
    "check": """examples:
  partition-explorer check plan.json transformer --devices 4x16GiB
  partition-explorer check plan.json transformer --devices 4x16GiB --max-memory-utilisation 0.9
  partition-explorer check plan.json my_models:build --max-latency 0.002

Re-traces MODEL and validates the plan against it and the devices (default: the devices
recorded in the plan). Every violation is listed: a node missing from the plan or unknown to
the model, memory over a device's capacity (with the figures), a cycle between partitions, an
unknown device, a budget exceeded. Exit 0 and "OK: ..." when valid, exit 1 otherwise.
""",
    "render": """examples:
  partition-explorer render plan.json --out plan.svg
  partition-explorer render plan.json --format png --out plan.png
  partition-explorer render plan.json --format dot --out - | dot -Tpdf > plan.pdf

Draws the partition DAG as the app does: BFS levels as ranks, a colour per device, edges
labelled with the bytes crossing, the critical path in red, partitions over capacity outlined.
svg and png need Graphviz's `dot` program; dot needs nothing.
""",
    "compare": """examples:
  partition-explorer compare transformer
  partition-explorer compare mlp --devices 4x1536KiB --transfer-rate 25e9
  partition-explorer compare dlrm --modes size_based,sparse_nn --json

Runs every mode but aot_based (or --modes) on the same model and devices; a mode that fails
shows its error in the table. Exit 1 only when every mode failed.
""",
    "diff": """examples:
  partition-explorer diff old.json new.json
  partition-explorer diff old.json new.json --json
  partition-explorer diff committed.json fresh.json --exit-code   # CI: fail when the plan changed

Partitions are matched by the nodes they share (renumbering alone is no change); nodes by name.
""",
    "export": """examples:
  partition-explorer export plan.json --kind fx-aot --out aot.json
  partition-explorer export plan.json transformer --kind pipeline-split-spec --out split.json
  partition-explorer export pipe.json transformer --kind pipeline-split-spec --out split.json   (a pipeline plan)

fx-aot: {"node_to_partition": {node: pid}, "partition_to_logical_device_mapping": {pid: [ids]},
"devices": [...]}: the mappings of torch.fx.experimental.partitioner_utils.PartitionerConfig
(aot_based mode); partitioner.interop.export.to_reference_config builds that config with fx.Node keys.
pipeline-split-spec: {"split_spec": {"<module path>": "beginning"}, "stages": [...]} for
torch.distributed.pipelining.pipeline(module, args, split_spec={k: SplitPoint.BEGINNING ...});
needs MODEL, and a plan whose partitions run one after another, each starting at a submodule.
accelerate-device-map: {"device_map": {"<module path>": device id}, "moved": [...], "notes": [...]} for
from_pretrained(device_map=...) / accelerate.dispatch_model, at the coarsest modules on one device;
needs MODEL. Blocks Accelerate never splits (_no_split_modules), tied weights and modules one op
reads together go whole to the device holding most of their weight bytes: "moved" names them and
the bytes moved, and each note is printed to stderr; split_modules lists other entries the plan
puts on several devices.
""",
}


class _PlanHelp(argparse.RawDescriptionHelpFormatter):
    """``plan --help``: the sample models' names and the presets are filled in when the help is
    printed, as listing the models imports them (and torch), which building the parser must not."""

    def add_text(self, text: str | None) -> None:
        if text is not None and "{models}" in text:
            import sample_models

            text = text.format(models=", ".join(sample_models.names()), presets=", ".join(sorted(PRESETS)))
        super().add_text(text)


def _command(
    sub: Any, common: argparse.ArgumentParser, name: str, help_text: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    p = sub.add_parser(
        name,
        help=help_text,
        description=help_text,
        parents=[common],
        formatter_class=_PlanHelp if name == "plan" else argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES[name] + COMMON_EPILOG,
    )
    p.set_defaults(func=func)
    return p


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the plan commands to ``sub`` (the parser's subparsers)."""
    p = _command(sub, common, "plan", "partition a model over devices and print (or save) the plan", cmd_plan)
    add_model_arguments(p)
    p.add_argument(
        "--devices",
        metavar="SPEC",
        help="devices: 4x16GiB, 2xa100-40gb, 2x16GiB,1x8GiB or devices.json "
        "(default for sample models: their default devices)",
    )
    p.add_argument(
        "--mode", choices=list(MODES), help=f"partition mode (default {DEFAULT_MODE}; aot_based with --aot-mapping)"
    )
    add_cost_arguments(p)
    p.add_argument(
        "--aot-mapping",
        metavar="FILE",
        help="for aot_based: a plan JSON, an fx-aot export, or "
        '{"node_to_partition": {...}, "partition_to_devices": {...}}',
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write the plan JSON here (the summary still prints); - writes the JSON to stdout instead of the summary",
    )
    p.add_argument("--export", choices=list(EXPORT_KINDS), help="also export the plan as KIND")
    p.add_argument(
        "--export-out", metavar="FILE", help="where --export writes; - writes it to stdout instead of the summary"
    )

    p = _command(
        sub, common, "check", "validate a plan against the model and devices; exit 1 on any violation", cmd_check
    )
    add_check_arguments(p)

    p = _command(sub, common, "render", "draw a plan's partition DAG as SVG, PNG or Graphviz DOT", cmd_render)
    p.add_argument("plan", metavar="PLAN.json", help="the plan file (- for stdin)")
    p.add_argument(
        "--format", choices=["svg", "png", "dot"], help="output format (default: from --out's suffix, else svg)"
    )
    p.add_argument("--out", metavar="FILE", default="-", help="output file (default - : stdout)")

    p = _command(sub, common, "compare", "run every partition mode on one model and devices, in one table", cmd_compare)
    add_model_arguments(p)
    p.add_argument("--devices", metavar="SPEC", help="devices (default for sample models: their default devices)")
    p.add_argument(
        "--modes", metavar="MODE,...", action="append", help=f"modes to run (default: {', '.join(default_modes())})"
    )
    add_cost_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON for machines instead of the table")
    p.add_argument("--include-plans", action="store_true", help="with --json, include each full plan")

    p = _command(
        sub, common, "diff", "show what changed between two plans: moved nodes, per-partition deltas", cmd_diff
    )
    p.add_argument("a", metavar="A.json", help="the old plan")
    p.add_argument("b", metavar="B.json", help="the new plan")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument("--exit-code", action="store_true", help="exit 1 when the plans differ")

    p = _command(
        sub,
        common,
        "export",
        "export a plan for torch or Accelerate: fx-aot mappings, a split spec, a device map",
        cmd_export,
    )
    p.add_argument("plan", metavar="PLAN.json", help="the plan file (- for stdin)")
    add_model_arguments(p, optional=True)
    p.add_argument("--kind", required=True, choices=list(EXPORT_KINDS), help="export format")
    p.add_argument("--out", metavar="FILE", default="-", help="output file (default - : stdout)")
