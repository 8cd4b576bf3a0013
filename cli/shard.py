"""``partition-explorer shard``: shard parameters along an axis (autodist's partition lists, as
DTensor's tensor parallelism): each device's memory, the collectives the spec implies, and a real
run on local processes."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Sequence

from cli.arguments import add_model_arguments, rate, time_limit
from cli.commands import COMMON_EPILOG
from cli.inputs import EXIT_FAIL, EXIT_OK, EXIT_RUN, CLIError, load_model, read_text, resolve_devices, write_output
from cli.report import format_table
from partitioner import sharding
from partitioner.errors import RunError, ShardingError
from partitioner.sharding import tensor_parallel
from partitioner.units import format_bytes, format_seconds, format_signed

if TYPE_CHECKING:  # the run's module imports torch: only for the type hints
    from partitioner.devices import Device
    from partitioner.sharding.tp_run import ShardRun
    from partitioner.sharding.tp_styles import TPPlan

__all__ = ["register"]

_BytesByDevice = dict[int, int]  # bytes on each device, by logical id

EXAMPLES = """examples:
  partition-explorer shard transformer --devices 2x7MiB --suggest
  partition-explorer shard transformer --devices 2x7MiB --suggest --training --run
  partition-explorer shard mlp --devices 2x2MiB --spec spec.json --out -
  partition-explorer shard hf:llama --set num_hidden_layers=2 --devices 2x1GiB --suggest
  partition-explorer shard hf:llama-3-70b --dtype bf16 --devices 8xh100-80gb --suggest

A spec file is JSON: {"<parameter name>": "<partition list>"}, names as named_parameters()
gives them, e.g. {"fc1.weight": "2,1", "fc2.weight": "1,2"} (autodist's form: shards per axis,
at most one axis above 1). The weight of a Linear split along its output features (axis 0) runs
as DTensor's ColwiseParallel, along its input features (axis 1) as RowwiseParallel; an
Embedding's table split by rows as RowwiseParallel; GPT-2's Conv1D weight is (in, out), so
"1,n" is its column split. All the devices run the model together. --suggest starts from a
Hugging Face model's own plan (config.base_model_tp_plan: attention by heads, MLPs column then
row) and adds MLP pairs (column then row: one all-reduce), embeddings and single layers until
every device fits, those that save the most memory per byte communicated first. --run runs it with
parallelize_module over gloo, one process per device, and checks the outputs against one process
and the collectives CommDebugMode counts against the prediction (exit 1 when either differs).
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "shard",
        help="shard parameters along an axis (tensor parallelism)",
        description="shard parameters along an axis: memory per device, collectives, a real run",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES + COMMON_EPILOG,
    )
    add_model_arguments(p)
    p.add_argument("--devices", metavar="SPEC", help="the devices running the model together (default: the model's)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--spec", metavar="FILE", help="a JSON spec {parameter: partition list}")
    which.add_argument("--suggest", action="store_true", help="suggest a spec that makes the model fit")
    p.add_argument("--training", action="store_true", help="count the backward's collectives too")
    p.add_argument(
        "--transfer-rate",
        metavar="BYTES_PER_S",
        type=rate,
        default=25e9,
        help="link rate between the devices (default 25GB)",
    )
    p.add_argument("--run", action="store_true", help="run it on local processes with DTensor and compare")
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=time_limit,
        default=180.0,
        help="with --run: end the run (and every process) after this long (default 180)",
    )
    p.add_argument("--out", metavar="FILE", help="write the spec, memory and collectives as JSON (- for stdout)")
    p.set_defaults(func=run)


def _read_spec(path: str) -> dict[str, str]:
    try:
        data = json.loads(read_text(path, "spec file"))
    except json.JSONDecodeError as exc:
        raise CLIError(f'{path} is not JSON ({exc}); write {{"fc1.weight": "2,1"}}') from None
    if not isinstance(data, dict) or not all(isinstance(v, (str, list)) for v in data.values()):
        raise CLIError(f'{path} must map parameter names to partition lists, e.g. {{"fc1.weight": "2,1"}}')
    return {str(k): v if isinstance(v, str) else sharding.format_partition_list(v) for k, v in data.items()}


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.set, args.devices)
    devices = resolve_devices(args.devices, model)
    graph = model.graph
    plan, before, after = _plan(args, graph, devices)
    result = _run_sharded(args, model, plan) if args.run else None
    status = EXIT_OK if result is None or (result.outputs_equal and result.counts_match) else EXIT_FAIL
    if args.out:
        _write_report(args.out, model.label, plan, before, after, result)
        if args.out == "-":  # the JSON is the whole of stdout
            return status
    _print_parameters(model.label, graph, plan, devices)
    print()
    print(_table_memory(devices, before, after))
    _print_collectives(args, plan)
    if result is not None:
        _print_run(graph, plan, devices, result)
    return status


def _plan(
    args: argparse.Namespace, graph: Any, devices: Sequence[Device]
) -> tuple[TPPlan, _BytesByDevice, _BytesByDevice]:
    """The spec (suggested or read), its layouts and collectives, and each device's bytes before
    and after sharding; a spec the model refuses is a usage error."""
    try:
        spec = tensor_parallel.suggest(graph, devices, args.transfer_rate) if args.suggest else _read_spec(args.spec)
        plan = tensor_parallel.tp_plan(graph, spec, len(devices), args.transfer_rate, training=args.training)
        before = sharding.device_memory(graph, devices, {})
        after = sharding.device_memory(graph, devices, plan.spec)
    except ShardingError as exc:
        raise CLIError(str(exc)) from None
    return plan, before, after


def _run_sharded(args: argparse.Namespace, model: Any, plan: TPPlan) -> ShardRun:
    """``--run``: the sharded model on local processes; progress goes to stderr unless the JSON
    goes to stdout."""
    from partitioner.processes.portable import picklable
    from partitioner.sharding.tp_run import run_sharded

    quiet = args.out == "-"
    graph = model.graph
    # hf: models run as built (their exported graph cannot be pickled for the ranks)
    module = model.module if model.module is not None else picklable(graph.graph_module)
    try:
        return run_sharded(
            module,
            graph.example_inputs or (),
            plan,
            training=args.training,
            timeout_s=args.timeout,
            repeats=5,
            progress=None if quiet else (lambda text: print(f"  {text}", file=sys.stderr)),
        )
    except ShardingError as exc:
        raise CLIError(f"cannot run it: {exc}") from None
    except RunError as exc:
        raise CLIError(f"the sharded run failed: {exc}", EXIT_RUN) from None


def _write_report(
    out: str, label: str, plan: TPPlan, before: _BytesByDevice, after: _BytesByDevice, result: ShardRun | None
) -> None:
    """``--out``: the spec, memory and collectives as JSON, with the run under "run" when it ran."""
    data = {
        "model": label,
        "spec": plan.spec,
        "styles": plan.styles,
        "memory_before": before,
        "memory_after": after,
        "collectives": [vars(c) for c in plan.collectives],
    }
    if result is not None:
        data["run"] = result.to_dict()
    write_output(out, json.dumps(data, indent=2), "shard report")


def _print_parameters(label: str, graph: Any, plan: TPPlan, devices: Sequence[Device]) -> None:
    """The parameters the spec shards (a partition list of all ones leaves one whole), each with
    its shape and its shards' shapes."""
    params = sharding.parameter_shapes(graph)
    rows = [
        [
            name,
            str(list(params[name][0])),
            value,
            " ".join(str(list(s)) for s in sharding.shard_shapes(params[name][0], value)),
        ]
        for name, value in plan.spec.items()
        if value.replace(",", "").strip("1")
    ]
    print(f"model {label}: {len(devices)} devices running it together, {len(rows)} parameters sharded")
    print(format_table(["parameter", "shape", "spec", "shards"], rows))


def _table_memory(devices: Sequence[Device], before: _BytesByDevice, after: _BytesByDevice) -> str:
    """Each device's bytes unsharded and sharded against its capacity."""
    caps = {d.logical_id: d.memory_bytes for d in devices}
    rows = [
        [
            str(d),
            format_bytes(before[d]),
            format_bytes(after[d]),
            format_bytes(caps[d]),
            "yes" if after[d] <= caps[d] else "NO",
        ]
        for d in sorted(after)
    ]
    return format_table(["device", "memory unsharded", "memory sharded", "capacity", "fits"], rows, right=(1, 2, 3))


def _print_collectives(args: argparse.Namespace, plan: TPPlan) -> None:
    """The collectives the spec implies (the backward's with --training) and their time at the
    link rate, one a row."""
    rows = [
        [
            c.kind,
            c.node,
            c.module,
            "backward" if c.backward else "forward",
            format_bytes(c.nbytes),
            format_seconds(c.time_s),
        ]
        for c in plan.collectives
    ]
    print(
        f"\ncollectives: {plan.counts(False) or 'none'} forward"
        + (f", {plan.counts(True) or 'none'} backward" if args.training else "")
        + f"; {format_seconds(plan.comm_time_s)} at {args.transfer_rate / 1e9:g} GB/s"
    )
    if rows:
        print(format_table(["collective", "tensor", "module", "pass", "bytes", "time"], rows, right=(4, 5)))


def _print_run(graph: Any, plan: TPPlan, devices: Sequence[Device], result: ShardRun) -> None:
    """``--run``: whether the outputs and the counted collectives agree, and the measured forward."""
    print(
        f"\nran on {result.world_size} processes ({result.backend}): outputs "
        f"{'equal' if result.outputs_equal else 'DIFFER from'} the model in one process "
        f"(max difference {result.max_abs_diff:.2g}); collectives counted: {result.counted()}"
        + f" ({'as predicted' if result.counts_match else 'NOT as predicted'})"
    )
    print(forward_line(graph, plan, devices, result.forward_s))


def forward_line(graph: Any, plan: Any, devices: Any, measured_s: float) -> str:
    """The measured forward beside the one predicted on the devices' measured profile (by part),
    or the reason there is no prediction."""
    from partitioner.calibration.naming import calibrated_words
    from partitioner.cost.model import device_profile
    from partitioner.cost.runs import tp_forward

    profile = device_profile(devices)
    if profile is None:
        return (
            f"forward: measured {format_seconds(measured_s)} (median of 5 warm ones on rank 0); for a "
            "prediction give a measured profile as the device type (--devices 2xlocal after "
            "`partition-explorer calibrate`)"
        )
    predicted = tp_forward(graph, plan, profile)
    error = (measured_s - predicted.total_s) / predicted.total_s if predicted.total_s else float("inf")
    dispatch = predicted.part("dtensor dispatch")
    comm = predicted.total_s - predicted.part("compute") - dispatch
    return (
        f"forward: measured {format_seconds(measured_s)} (median of 5 warm ones on rank 0), predicted "
        f"{format_seconds(predicted.total_s)} on profile {profile.name!r}"
        + (f", {calibrated_words(profile)}" if profile.measured_at else "")
        + " (compute "
        f"{format_seconds(predicted.part('compute'))}, DTensor dispatch {format_seconds(dispatch)}, "
        f"collectives {format_seconds(comm)}): error {format_signed(error)}"
    )
