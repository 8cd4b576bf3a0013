"""``partition-explorer cluster --run``: one training step of a layout on local processes, shown
beside its prediction on this machine's profile, part by part."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from cli.inputs import EXIT_FAIL, EXIT_OK, CLIError, write_output
from cli.report import format_table
from partitioner import cluster
from partitioner.units import format_bytes, format_seconds, format_signed

if TYPE_CHECKING:  # the run's modules import torch: only for the type hints
    from partitioner.cluster.run.checked import LayoutCheck
    from partitioner.cluster.run.records import ComposedRun

__all__ = ["run_layout"]


def run_layout(args: argparse.Namespace, graph: Any, prof: cluster.ModelProfile) -> int:
    """``--run``: one training step of the layout on local processes beside its prediction on this
    machine's profile, part by part (what the app's "Run this layout" shows:
    :func:`partitioner.cluster.run.checked.check_layout`)."""
    layout = _checked_layout(args, graph, prof)
    check = _run_checked(args, graph, layout)
    result = check.run
    planned = _planned(args, prof, layout, result)
    lines = _report_lines(prof, layout, check, planned)
    if args.out:
        if args.out != "-":
            print("\n".join(lines))
        data = _json_report(prof, layout, check, planned)
        write_output(args.out, json.dumps(data, indent=2), "composed run")
    else:
        print("\n".join(lines))
    return EXIT_OK if result.outputs_equal and result.gradients_equal and result.loss_equal is not False else EXIT_FAIL


def _checked_layout(args: argparse.Namespace, graph: Any, prof: cluster.ModelProfile) -> cluster.Layout:
    """The ``--run`` layout at the example batch, refused by the same rules as --open and --export
    before any process starts."""
    from partitioner.cluster.layouts import check_layout as check_against_model
    from partitioner.cluster.words import parse_layout

    inputs = graph.example_inputs or ()
    if graph.graph_module is None or not inputs:
        raise CLIError(f"--run needs a traced model with example inputs; {prof.name} has none")
    batch = int(inputs[0].shape[0]) if hasattr(inputs[0], "shape") and inputs[0].dim() else 1
    layout = parse_layout(args.run, batch)
    check_against_model(
        prof, layout, cluster.Workload("training", batch, max(1, prof.seq0), prof.element_bytes, "none")
    )
    return layout


def _run_checked(args: argparse.Namespace, graph: Any, layout: cluster.Layout) -> LayoutCheck:
    """The step on local processes, checked against one process, beside its prediction; progress
    goes to stderr unless the JSON goes to stdout."""
    import sys

    from partitioner.cluster.run.checked import check_layout
    from partitioner.cluster.run.runnable import check_runnable
    from partitioner.cluster.run.tp_plans import model_tp_plan

    module, inputs, kwargs = _module_and_inputs(args, graph, layout)
    check_runnable(layout, inputs if isinstance(inputs, (tuple, list)) else (inputs,))
    quiet = args.out == "-"
    return check_layout(
        module,
        inputs,
        layout,
        timeout_s=args.timeout,
        graph=graph,
        tp_plan=model_tp_plan(graph, layout.tp),
        example_kwargs=kwargs,
        progress=None if quiet else (lambda text: print(f"  {text}", file=sys.stderr)),
    )


def _module_and_inputs(args: argparse.Namespace, graph: Any, layout: cluster.Layout) -> tuple[Any, Any, dict[str, Any]]:
    """What the ranks run: the traced graph made picklable, or a Hugging Face model as built (its
    exported graph cannot be pickled), with its inputs and keyword inputs."""
    import sample_models
    from partitioner.cluster.run.runnable import EXPORTED_PIPELINE
    from partitioner.runtime.execute import picklable

    inputs = graph.example_inputs or ()
    module: Any = picklable(graph.graph_module)
    kwargs: dict[str, Any] = {}
    if sample_models.is_hf(args.model):
        if layout.pp > 1:
            raise CLIError(f"--run: {EXPORTED_PIPELINE}")
        module, inputs, kwargs = sample_models.load(args.model, sample_models.parse_overrides(args.model, args.set))
    return module, inputs, kwargs


def _planned(
    args: argparse.Namespace, prof: cluster.ModelProfile, layout: cluster.Layout, result: ComposedRun
) -> cluster.LayoutResult:
    """The planner's answer for the layout on as many local devices as the run used (its memory
    per device is what each rank's held bytes are compared with)."""
    from partitioner.pipeline.steps import step_simulator

    work = cluster.Workload("training", max(1, prof.tokens0 // prof.seq0), prof.seq0, prof.element_bytes, "none")
    return cluster.evaluate(
        prof,
        work,
        cluster.local_cluster(layout.devices, result.backend == "nccl", args.accelerator),
        layout,
        step_simulator(),
    )


def _report_lines(
    prof: cluster.ModelProfile, layout: cluster.Layout, check: LayoutCheck, planned: cluster.LayoutResult
) -> list[str]:
    """The printed report: what ran and whether it agrees, each rank's bytes, each part's time."""
    result = check.run
    states = planned.memory["weights"] + planned.memory["gradients"]
    return [
        *_header_lines(prof, layout, result),
        "",
        _table_ranks(layout, result, states),
        "",
        f"predicted per device: weights + gradients {format_bytes(int(states))}, activations "
        f"{format_bytes(int(planned.memory['activations']))} (not held after the step)",
        "",
        _table_parts(check),
        "",
        _step_line(check),
    ]


def _header_lines(prof: cluster.ModelProfile, layout: cluster.Layout, result: ComposedRun) -> list[str]:
    """Where it ran, how it was split, and whether outputs, gradients and loss equal one process's."""
    where = f"{prof.name}: {layout.label()} on {layout.devices} local processes ({result.backend}); "
    return [
        where + f"tensor parallel: {len(result.tp_plan)} Linear layers"
        if result.tp_plan
        else where + "no tensor parallelism",
        f"data parallel: {result.data_parallel}",
        f"outputs equal one process: {'yes' if result.outputs_equal else 'NO'}; gradients equal: "
        f"{'yes' if result.gradients_equal else 'NO'} (max |diff| {result.max_abs_diff:.3g})"
        + (
            f"; loss {result.loss:.6g} {'equals' if result.loss_equal else 'DIFFERS from'} one process's"
            if result.loss is not None
            else ""
        )
        + (f": {result.mismatch}" if result.mismatch else ""),
    ]


def _table_ranks(layout: cluster.Layout, result: ComposedRun, states: float) -> str:
    """Each rank's parameters, gradients and held bytes beside the predicted weights + gradients."""
    rows = [
        [
            str(r.rank),
            (f"pp={r.pp} " if layout.pp > 1 else "") + f"dp={r.dp} tp={r.tp}",
            format_bytes(r.parameter_bytes),
            format_bytes(r.gradient_bytes),
            format_bytes(r.memory_bytes),
            format_bytes(int(states)),
            format_signed((r.memory_bytes - states) / states) if states else "-",
            format_seconds(r.step_s),
        ]
        for r in result.ranks
    ]
    return format_table(["rank", "mesh", "parameters", "gradients", "held", "predicted", "error", "median step"], rows)


def _table_parts(check: LayoutCheck) -> str:
    """Each predicted part beside its measured time, when the run times it apart."""
    rows = [
        [
            p.name,
            format_seconds(p.predicted_s),
            "inside the rest" if p.measured_s is None else format_seconds(p.measured_s),
            "-" if p.error is None else format_signed(p.error),
        ]
        for p in check.parts
    ]
    return format_table(["part", "predicted", "measured", "error"], rows)


def _step_line(check: LayoutCheck) -> str:
    """The measured step against the predicted one, with the load the measurement ran under."""
    error = check.error
    return (
        f"step: measured {format_seconds(check.run.step_s)} (slowest rank), predicted "
        f"{format_seconds(check.predicted.total_s)} on the profile {check.profile_name!r} of this machine"
        + ("" if error is None else f": error {format_signed(error)}")
        + f" (load {check.load_average[0]:.1f}); parts the run does not time apart are measured together "
        "as the rest of the step"
    )


def _json_report(
    prof: cluster.ModelProfile, layout: cluster.Layout, check: LayoutCheck, planned: cluster.LayoutResult
) -> dict[str, Any]:
    """``--out``: the run and its prediction as JSON."""
    result = check.run
    return {
        "model": prof.name,
        "layout": layout.__dict__,
        "label": layout.label(),
        "outputs_equal": result.outputs_equal,
        "gradients_equal": result.gradients_equal,
        "max_abs_diff": result.max_abs_diff,
        "ranks": [r.__dict__ for r in result.ranks],
        "measured_step_s": result.step_s,
        "predicted_step_s": check.predicted.total_s,
        "profile": check.profile_name,
        "parts": check.to_dict()["parts"],
        "predicted_memory_bytes": planned.memory,
        "tp_plan": [list(p) for p in result.tp_plan],
        "data_parallel": result.data_parallel,
        "backend": result.backend,
    }
