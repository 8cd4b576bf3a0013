"""The command line, ``partition-explorer``: plan, check, render, compare, diff and export plans.

It reads and writes the same plan JSON as the app (:meth:`Plan.to_json`), so a plan made in the
browser can be checked in CI and a plan made here can be loaded in the app.

Exit codes: 0 success; 1 the plan does not fit (``check`` found violations or a budget was
exceeded, ``plan`` found no plan that fits, every ``compare`` mode failed, ``diff --exit-code``
found differences); 2 usage error or bad input (unknown model, bad device spec, malformed JSON,
missing file); 3 an internal error (a bug: rerun with ``--debug`` and report the traceback).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import difflib
import io
import json
import logging
import math
import os
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .api import evaluate_plan, partition
from .costs import node_latencies
from .compare import compare_modes, default_modes, format_comparison, format_seconds, format_table
from .devices import PRESETS, Device, format_bytes, parse_bytes, parse_devices
from .diff import diff_plans, format_diff
from .errors import InfeasibleError, InvalidPlanError, PartitionError
from .export import EXPORT_KINDS, ExportError, export_plan, read_aot_mapping
from .graph import Graph
from .trace import trace
from .modes import DEFAULT_MODE, MODES
from .plan import Plan

__all__ = ["main", "build_parser", "check_plan", "CheckResult", "CLIError", "parse_overrides",
           "read_node_latency"]

logger = logging.getLogger(__name__)

PROG = "partition-explorer"
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class CLIError(Exception):
    """Bad input found by the CLI itself; ``code`` is the exit status (2 unless said)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------------------------
# Reading inputs


def _read_text(path: str, what: str) -> str:
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.exists():
        raise CLIError(f"{what} {path!r} does not exist; check the path")
    if p.is_dir():
        raise CLIError(f"{what} {path!r} is a folder; give a file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CLIError(f"{what} {path!r} is not a UTF-8 text file") from None
    except OSError as exc:
        raise CLIError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from None


def _read_json(path: str, what: str) -> Any:
    text = _read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        name = "<stdin>" if path == "-" else path
        raise CLIError(
            f"{what} {name}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; "
            "fix the file, or write it again with `partition-explorer plan ... --out FILE`"
        ) from None


def load_plan(path: str) -> Plan:
    """A plan file, with errors that name the file (exit 2)."""
    data = _read_json(path, "plan file")
    try:
        return Plan.from_dict(data)
    except PartitionError as exc:
        raise CLIError(f"plan file {path}: {exc}") from None


def parse_overrides(model: str, items: Sequence[str]) -> dict[str, Any]:
    """``["n_layer=4", "bias=false"]`` -> ``{"n_layer": 4, "bias": False}``, typed by the sample
    model's config dataclass fields."""
    import sample_models

    cls = sample_models.config_class(model)
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls)]
    listing = ", ".join(f"{f.name} ({getattr(hints[f.name], '__name__', hints[f.name])}, default "
                        f"{f.default!r})" for f in fields)
    values: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key:
            raise CLIError(f"--set expects KEY=VALUE (got {item!r}); e.g. --set n_layer=4")
        if key not in hints:
            close = difflib.get_close_matches(key, list(hints), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise CLIError(f"model {model!r} has no setting {key!r}; {hint}its settings are: {listing}")
        kind = hints[key]
        try:
            values[key] = _convert(raw, kind)
        except ValueError:
            name = getattr(kind, "__name__", str(kind))
            article = "an" if name[:1] in ("a", "e", "i", "o", "u") else "a"
            raise CLIError(f"--set {key}={raw}: {key} of model {model!r} must be {article} {name} "
                           f"(e.g. {key}={_example(kind)})") from None
    return values


def _convert(raw: str, kind: Any) -> Any:
    if kind is bool:
        low = raw.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(raw)
    if kind is int:
        return int(raw, 0) if raw.lower().startswith(("0x", "0b", "0o")) else int(raw)
    if kind is float:
        return float(raw)
    if kind is str:
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _example(kind: Any) -> str:
    return {bool: "true", int: "4", float: "0.5"}.get(kind, "VALUE")


@dataclass(frozen=True)
class LoadedModel:
    graph: Graph
    label: str  # what the user called it, with overrides: "transformer(n_layer=2)"
    default_devices: str | None  # the sample model's default device spec, None for factories


def load_model(spec: str, sets: Sequence[str] = (), devices: str | None = "") -> LoadedModel:
    """Build and trace MODEL: a sample model name, or ``package.module:factory``. Pass the
    ``--devices`` value as ``devices`` where the command needs devices: a factory model without
    them is refused before the (slow) import and trace."""
    import sample_models
    from sample_models.loader import LoaderError, load_factory

    if ":" in spec and devices is None:
        raise CLIError(
            f"--devices is required for {spec!r} (only sample models have default devices); "
            "e.g. --devices 4x16GiB"
        )
    if ":" in spec:
        if sets:
            raise CLIError(
                f"--set applies to sample models only; {spec!r} is a factory: change its "
                "arguments in the factory function instead"
            )
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())  # as `python -m` does: factories next to the user
        try:
            module, inputs = load_factory(spec)
        except LoaderError as exc:
            raise CLIError(str(exc)) from None
        label, default = spec, None
    else:
        names = sample_models.names()
        if spec not in names:
            close = difflib.get_close_matches(spec, names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise CLIError(
                f"unknown model {spec!r}; {hint}give a sample model ({', '.join(names)}) or your "
                "own factory as package.module:factory (a function returning (module, example_inputs))"
            )
        overrides = parse_overrides(spec, sets)
        try:
            module, inputs = sample_models.build(spec, **overrides)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
        shown = ",".join(f"{k}={v}" for k, v in overrides.items())
        label = f"{spec}({shown})" if shown else spec
        count, memory = sample_models.default_devices(spec)
        default = f"{count}x{memory}B"
    graph = trace(module, inputs, name=label)
    return LoadedModel(graph, label, default)


def resolve_devices(spec: str | None, model: LoadedModel) -> list[Device]:
    if spec is None:
        if model.default_devices is None:
            raise CLIError(
                f"--devices is required for {model.label!r} (only sample models have default "
                "devices); e.g. --devices 4x16GiB"
            )
        spec = model.default_devices
    return parse_devices(spec)


def read_node_latency(path: str) -> dict[str, tuple[float, float]]:
    """A node-latency file: JSON ``{name: [mem_s, compute_s]}`` or CSV ``name,mem_s,compute_s``
    (an optional header row; blank lines and ``#`` comments skipped)."""
    text = _read_text(path, "node-latency file")
    if path.endswith(".json") or text.lstrip().startswith("{"):
        data = _read_json(path, "node-latency file")
        if not isinstance(data, dict):
            raise CLIError(f"node-latency file {path}: expected a JSON object "
                           '{"node name": [memory_s, compute_s]}')
        out = {}
        for name, pair in data.items():
            try:
                mem_s, compute_s = (float(v) for v in pair)
            except (TypeError, ValueError):
                raise CLIError(f"node-latency file {path}: node {name!r} must map to "
                               f"[memory_s, compute_s] (got {pair!r})") from None
            out[str(name)] = (mem_s, compute_s)
        return out
    out = {}
    first = True
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not "".join(row).strip() or row[0].strip().startswith("#"):
            continue
        cells = [c.strip() for c in row]
        if len(cells) != 3:
            raise CLIError(f"node-latency file {path}, line {lineno}: expected 3 columns "
                           f"name,mem_s,compute_s (got {len(cells)}: {','.join(cells)})")
        header, first = first, False
        try:
            out[cells[0]] = (float(cells[1]), float(cells[2]))
        except ValueError:
            if header:
                continue  # a header row such as name,mem_s,compute_s
            raise CLIError(f"node-latency file {path}, line {lineno}: mem_s and compute_s must "
                           f"be numbers of seconds (got {cells[1]!r}, {cells[2]!r})") from None
    if not out:
        raise CLIError(f"node-latency file {path} holds no rows; write name,mem_s,compute_s lines")
    return out


def _rate(text: str) -> float:
    """argparse type of --transfer-rate: bytes per second, a number or a size like 25GB."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = float(parse_bytes(text))
        except PartitionError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a rate in bytes per second; e.g. 25e9 or 25GB"
            ) from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"the transfer rate must be a positive number (got {text})")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def _write(path: str, data: str | bytes, what: str) -> None:
    if path == "-":
        if isinstance(data, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(data if data.endswith("\n") else data + "\n")
        return
    try:
        if isinstance(data, bytes):
            Path(path).write_bytes(data)
        else:
            Path(path).write_text(data if data.endswith("\n") else data + "\n", encoding="utf-8")
    except OSError as exc:
        raise CLIError(f"cannot write {what} to {path!r}: {exc.strerror or exc}") from None
    print(f"wrote {what} to {path}", file=sys.stderr)


# --------------------------------------------------------------------------------------------
# Reports


def describe_devices(devices: Sequence[Device]) -> str:
    """``4 devices (4 x 16 GiB)``; groups consecutive devices of one kind and size."""
    groups: list[list[Any]] = []
    for d in devices:
        key = (d.kind, d.memory_bytes)
        if groups and groups[-1][0] == key:
            groups[-1][1] += 1
        else:
            groups.append([key, 1])
    parts = []
    for (kind, memory), count in groups:
        size = format_bytes(memory)
        parts.append(f"{count} x " + (f"{kind} ({size})" if kind != "custom" else size))
    n = len(devices)
    return f"{n} device{'s' if n != 1 else ''} ({' + '.join(parts)})"


def _rate_text(plan: Plan) -> str:
    rate = plan.transfer_rate_bytes_per_s
    return "not modelled (transfers are free)" if not rate else f"{rate:.3g} B/s"


def format_plan_summary(plan: Plan, graph: Graph | None = None) -> str:
    """The summary ``plan`` prints: a partition table, a device table, the end-to-end figures."""
    capacity = {d.logical_id: d.memory_bytes for d in plan.devices}
    head = f"model {plan.model or '?'}"
    if graph is not None:
        head += f": {len(graph.op_indices)} op nodes, {format_bytes(graph.total_size_bytes)}"
    lines = [
        head,
        f"mode {plan.mode}; {describe_devices(plan.devices)}; transfer rate {_rate_text(plan)}",
        "",
    ]
    rows = []
    for p in plan.partitions:
        room = min((capacity.get(i, 0) for i in p.device_ids), default=0)
        share = f"{p.memory_bytes / room:.1%} of {format_bytes(room)}" if room else "-"
        rows.append([p.id, ",".join(map(str, p.device_ids)), len(p.node_names),
                     format_bytes(p.memory_bytes), share, format_seconds(p.latency_s), p.bfs_level])
    lines.append(format_table(
        ["partition", "devices", "nodes", "memory", "of capacity", "latency", "level"], rows,
        right=(0, 2, 3, 4, 5, 6),
    ))
    lines.append("")
    used = plan.device_memory_bytes()
    holders: dict[int, list[int]] = {}
    for p in plan.partitions:
        for i in p.device_ids:
            holders.setdefault(i, []).append(p.id)
    rows = []
    for d in plan.devices:
        u = used.get(d.logical_id, 0)
        rows.append([d.logical_id, d.name, format_bytes(u), format_bytes(d.memory_bytes),
                     f"{u / d.memory_bytes:.1%}" if d.memory_bytes else "-",
                     ",".join(map(str, holders.get(d.logical_id, []))) or "idle"])
    lines.append(format_table(
        ["device", "name", "used", "capacity", "utilisation", "partitions"], rows, right=(0, 2, 3, 4)
    ))
    lines.append("")
    path = " -> ".join(map(str, plan.critical_path))
    lines.append(f"end-to-end latency: {format_seconds(plan.latency_s)} (critical path: partitions {path})")
    lines.append(f"peak memory utilisation: {plan.memory_utilisation():.1%}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# check


@dataclass(frozen=True)
class CheckResult:
    """What ``check`` found: every violation in words, notes that do not fail the check, and
    the plan as re-evaluated on the model and devices (None when it could not be)."""

    violations: tuple[str, ...]
    notes: tuple[str, ...]
    evaluated: Plan | None

    @property
    def ok(self) -> bool:
        return not self.violations


def check_plan(
    plan: Plan,
    graph: Graph,
    devices: Sequence[Device],
    transfer_rate_bytes_per_s: float | None = None,
    node_latency: Mapping[str, Sequence[float]] | None = None,
    max_latency_s: float | None = None,
    max_memory_utilisation: float | None = None,
    strict: bool = False,
) -> CheckResult:
    """Validate ``plan`` against ``graph`` and ``devices``; collects every violation.

    Kinds: node unknown (or not an op) / missing / in two partitions, partition without nodes or
    devices, unknown device, memory over capacity (with the figures), a cycle between partitions,
    and the budgets. The graph fingerprint differing is a note, or a violation with ``strict``.
    O(N + E) plus one plan evaluation. Raises :class:`PartitionError` for bad input (a
    ``node_latency`` naming nodes the model lacks), not for a plan that does not fit.
    """
    devices = list(devices)
    if node_latency:
        node_latencies(graph, devices, node_latency)  # bad input raises PartitionError (exit 2)
    notes: list[str] = []
    # Check against the given devices, and compare fingerprints here (a changed model is not
    # by itself a violation: the plan may still fit).
    problems = plan.violations(graph, devices, check_fingerprint=False)
    if plan.graph_fingerprint and plan.graph_fingerprint != graph.fingerprint():
        message = (
            f"the model's graph changed since the plan was made (fingerprint "
            f"{plan.graph_fingerprint} in the plan, {graph.fingerprint()} now)"
        )
        if strict:
            problems.append(message + "; re-plan, or drop --strict to accept a plan that still fits")
        else:
            notes.append(message + "; checking the plan against the model as it is now")
    # The mapping must cover the model and name known devices before it can be scored
    # (evaluate_plan raises otherwise); those problems are already in `problems`.
    names = [n for p in plan.partitions for n in p.node_names]
    op_names = set(graph.op_names)
    known = {d.logical_id for d in devices}
    scorable = (
        set(names) == op_names
        and len(names) == len(set(names))
        and all(p.device_ids and set(p.device_ids) <= known for p in plan.partitions)
    )
    evaluated: Plan | None = None
    budgets = [flag for flag, v in (("--max-latency", max_latency_s),
                                    ("--max-memory-utilisation", max_memory_utilisation)) if v is not None]
    if scorable:
        try:
            evaluated = evaluate_plan(graph, devices, plan.node_to_partition(),
                                      plan.partition_to_devices(), transfer_rate_bytes_per_s, node_latency)
        except PartitionError as exc:  # pragma: no cover - the checks above should catch it
            problems.append(f"the plan cannot be scored on this model: {exc}")
    elif budgets:
        notes.append(f"budgets ({', '.join(budgets)}) not checked: the plan must cover the model's "
                     "nodes and name known devices first")
    if evaluated is not None:
        latency = evaluated.latency_s
        if max_latency_s is not None and math.isfinite(latency) and latency > max_latency_s:
            problems.append(
                f"end-to-end latency {format_seconds(latency)} ({latency:.6g} s) exceeds the budget "
                f"--max-latency {max_latency_s:g} s by {latency / max_latency_s - 1:.1%}; compare "
                "modes (`partition-explorer compare`), add devices, or raise the budget"
            )
        if max_memory_utilisation is not None:
            used = evaluated.device_memory_bytes()
            over = [
                f"{d.name} (id {d.logical_id}) {used[d.logical_id] / d.memory_bytes:.1%}: "
                f"{format_bytes(used[d.logical_id])} ({used[d.logical_id]} B) of "
                f"{format_bytes(d.memory_bytes)} ({d.memory_bytes} B)"
                for d in devices
                if d.memory_bytes and used.get(d.logical_id, 0) > max_memory_utilisation * d.memory_bytes
            ]
            if over:
                problems.append(
                    f"peak memory utilisation {evaluated.memory_utilisation():.1%} exceeds the budget "
                    f"--max-memory-utilisation {max_memory_utilisation:g} "
                    f"({max_memory_utilisation:.1%}) on device(s) " + "; ".join(over)
                    + "; spread the model over more devices, add memory, or raise the budget"
                )
    options = plan.options_dict
    if options.get("node_latency") == "given" and not node_latency:
        notes.append("the plan was made with given node latencies; pass the same --node-latency "
                     "file to check latency against them (roofline estimates used)")
    return CheckResult(tuple(problems), tuple(notes), evaluated)


# --------------------------------------------------------------------------------------------
# Commands


def _partition_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "transfer_rate_bytes_per_s": args.transfer_rate,
        "node_latency": read_node_latency(args.node_latency) if args.node_latency else None,
        "saturate_host": args.saturate_host,
        "force_partition": args.force_partition,
    }
    if args.search_budget is not None:
        kwargs["search_budget"] = args.search_budget
    return kwargs


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
            n2p, p2d = read_aot_mapping(_read_json(args.aot_mapping, "aot mapping file"))
        except PartitionError as exc:
            raise CLIError(f"aot mapping file {args.aot_mapping}: {exc}") from None
        mapping = {"node_to_partition": n2p, "partition_to_devices": p2d}
    elif mode == "aot_based":
        raise CLIError("--mode aot_based needs --aot-mapping FILE (a plan JSON, an fx-aot export, or "
                       '{"node_to_partition": {...}, "partition_to_devices": {...}})')
    model = load_model(args.model, args.set, args.devices)
    devices = resolve_devices(args.devices, model)
    plan = partition(model.graph, devices, mode=mode, **_partition_kwargs(args), **mapping)
    try:
        exported = export_plan(plan, args.export, model.graph) if args.export else None
    except ExportError as exc:
        raise CLIError(f"{exc} (nothing was written; run without --export to save the plan)",
                       EXIT_FAIL) from None
    if args.out != "-" and args.export_out != "-":
        print(format_plan_summary(plan, model.graph))
    if args.out:
        _write(args.out, plan.to_json(), "plan")
    if exported is not None:
        _write(args.export_out, json.dumps(exported, indent=2), f"{args.export} export")
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan)
    model = load_model(args.model, args.set)
    devices = parse_devices(args.devices) if args.devices else list(plan.devices)
    rate = args.transfer_rate if args.transfer_rate is not None else plan.transfer_rate_bytes_per_s
    node_latency = read_node_latency(args.node_latency) if args.node_latency else None
    result = check_plan(plan, model.graph, devices, rate, node_latency, args.max_latency,
                        args.max_memory_utilisation, args.strict)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    where = f"{model.label} on {describe_devices(devices)}"
    name = "<stdin>" if args.plan == "-" else args.plan
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
        print(f"  {i}. {v}")
    return EXIT_FAIL


def cmd_render(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan)
    fmt = args.format
    if fmt is None:
        suffix = Path(args.out).suffix.lower().lstrip(".") if args.out != "-" else ""
        fmt = suffix if suffix in ("svg", "png", "dot") else "svg"
    from .render import plan_to_dot, render_dot

    source = plan_to_dot(plan)
    data: str | bytes = source if fmt == "dot" else render_dot(source, fmt)
    _write(args.out, data, f"{fmt} drawing")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.set, args.devices)
    devices = resolve_devices(args.devices, model)
    modes = None
    if args.modes:
        modes = [m.strip() for item in args.modes for m in item.split(",") if m.strip()]
    results = compare_modes(model.graph, devices, modes, **_partition_kwargs(args))
    if args.json:
        print(json.dumps({
            "model": model.label,
            "graph_fingerprint": model.graph.fingerprint(),
            "devices": [d.to_dict() for d in devices],
            "results": [r.to_dict(include_plan=args.include_plans) for r in results],
        }, indent=2))
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
    plan = load_plan(args.plan)
    graph = load_model(args.model, args.set).graph if args.model else None
    data = export_plan(plan, args.kind, graph)
    _write(args.out, json.dumps(data, indent=2), f"{args.kind} export")
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# Parser

_COMMON_EPILOG = """
exit codes: 0 ok; 1 the plan does not fit (violations, budgets, no plan found);
            2 usage error or bad input; 3 internal error (rerun with --debug, report it)
"""

_EXAMPLES = {
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

Partitions are matched by id; nodes by name.
""",
    "export": """examples:
  partition-explorer export plan.json --kind fx-aot --out aot.json
  partition-explorer export plan.json transformer --kind pipeline-split-spec --out split.json

fx-aot: {"node_to_partition": {node: pid}, "partition_to_logical_device_mapping": {pid: [ids]},
"devices": [...]}: the mappings of torch.fx.experimental.partitioner_utils.PartitionerConfig
(aot_based mode); partitioner.export.to_reference_config builds that config with fx.Node keys.
pipeline-split-spec: {"split_spec": {"<module path>": "beginning"}, "stages": [...]} for
torch.distributed.pipelining.pipeline(module, args, split_spec={k: SplitPoint.BEGINNING ...});
needs MODEL, and a plan whose partitions run one after another, each starting at a submodule.
""",
}


def _add_model(p: argparse.ArgumentParser, optional: bool = False) -> None:
    p.add_argument("model", metavar="MODEL", nargs="?" if optional else None,
                   help="a sample model name or package.module:factory"
                        + (" (needed for pipeline-split-spec)" if optional else ""))
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="a sample model setting, repeatable: --set n_layer=4 --set bias=false")


def _add_costs(p: argparse.ArgumentParser, partitioning: bool = True) -> None:
    p.add_argument("--transfer-rate", metavar="BYTES_PER_S", type=_rate,
                   help="device-to-device transfer rate, e.g. 25e9 or 25GB "
                        + ("(default: the slowest device link given, else transfers are free)"
                           if partitioning else "(default: the rate recorded in the plan)"))
    p.add_argument("--node-latency", metavar="FILE",
                   help='measured node latencies: JSON {"node": [mem_s, compute_s]} or CSV '
                        "name,mem_s,compute_s (other nodes keep the roofline estimate)")
    if partitioning:
        p.add_argument("--saturate-host", action="store_true",
                       help="replicate the plan onto idle devices")
        p.add_argument("--force-partition", action="store_true",
                       help="partition even when the whole model fits one device")
        p.add_argument("--search-budget", type=int, metavar="N",
                       help="cap the cost-model evaluations of cost_aware and kl_based")


def build_parser() -> argparse.ArgumentParser:
    import sample_models

    from . import __version__

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log what the library does (to stderr)")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks of unexpected errors")
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=fmt, parents=[common],
        description="Partition PyTorch models across accelerators: make a plan, check it against\n"
                    "the model and devices (for CI), draw, compare, diff and export plans. Plans are\n"
                    "the same JSON the Partition Explorer app reads and writes.",
        epilog="""quick start:
  partition-explorer plan transformer --devices 4x16GiB --out plan.json
  partition-explorer check plan.json transformer --devices 4x16GiB --max-memory-utilisation 0.9
  partition-explorer compare transformer
  partition-explorer render plan.json --out plan.svg

run `partition-explorer COMMAND --help` for each command's options and examples.
""" + _COMMON_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        epilog = _EXAMPLES[name]
        if name == "plan":
            epilog = epilog.format(models=", ".join(sample_models.names()),
                                   presets=", ".join(sorted(PRESETS)))
        p = sub.add_parser(name, help=help_text, description=help_text, parents=[common],
                           formatter_class=fmt, epilog=epilog + _COMMON_EPILOG)
        p.set_defaults(func=func)
        return p

    p = command("plan", "partition a model over devices and print (or save) the plan", cmd_plan)
    _add_model(p)
    p.add_argument("--devices", metavar="SPEC",
                   help="devices: 4x16GiB, 2xa100-40gb, 2x16GiB,1x8GiB or devices.json "
                        "(default for sample models: their default devices)")
    p.add_argument("--mode", choices=list(MODES),
                   help=f"partition mode (default {DEFAULT_MODE}; aot_based with --aot-mapping)")
    _add_costs(p)
    p.add_argument("--aot-mapping", metavar="FILE",
                   help="for aot_based: a plan JSON, an fx-aot export, or "
                        '{"node_to_partition": {...}, "partition_to_devices": {...}}')
    p.add_argument("--out", metavar="FILE",
                   help="write the plan JSON here (the summary still prints); - writes the JSON to "
                        "stdout instead of the summary")
    p.add_argument("--export", choices=list(EXPORT_KINDS), help="also export the plan as KIND")
    p.add_argument("--export-out", metavar="FILE",
                   help="where --export writes; - writes it to stdout instead of the summary")

    p = command("check", "validate a plan against the model and devices; exit 1 on any violation",
                cmd_check)
    p.add_argument("plan", metavar="PLAN.json", help="the plan file (- for stdin)")
    _add_model(p)
    p.add_argument("--devices", metavar="SPEC",
                   help="devices to check against (default: the devices recorded in the plan)")
    _add_costs(p, partitioning=False)
    p.add_argument("--max-latency", metavar="SECONDS", type=_positive_float,
                   help="fail when the end-to-end latency exceeds this many seconds")
    p.add_argument("--max-memory-utilisation", metavar="FRACTION", type=_positive_float,
                   help="fail when any device uses more than this fraction of its memory, e.g. 0.9")
    p.add_argument("--strict", action="store_true",
                   help="also fail when the model's graph changed since the plan was made, "
                        "even if the plan still fits")

    p = command("render", "draw a plan's partition DAG as SVG, PNG or Graphviz DOT", cmd_render)
    p.add_argument("plan", metavar="PLAN.json", help="the plan file (- for stdin)")
    p.add_argument("--format", choices=["svg", "png", "dot"],
                   help="output format (default: from --out's suffix, else svg)")
    p.add_argument("--out", metavar="FILE", default="-", help="output file (default - : stdout)")

    p = command("compare", "run every partition mode on one model and devices, in one table",
                cmd_compare)
    _add_model(p)
    p.add_argument("--devices", metavar="SPEC",
                   help="devices (default for sample models: their default devices)")
    p.add_argument("--modes", metavar="MODE,...", action="append",
                   help=f"modes to run (default: {', '.join(default_modes())})")
    _add_costs(p)
    p.add_argument("--json", action="store_true", help="print JSON for machines instead of the table")
    p.add_argument("--include-plans", action="store_true", help="with --json, include each full plan")

    p = command("diff", "show what changed between two plans: moved nodes, per-partition deltas",
                cmd_diff)
    p.add_argument("a", metavar="A.json", help="the old plan")
    p.add_argument("b", metavar="B.json", help="the new plan")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument("--exit-code", action="store_true", help="exit 1 when the plans differ")

    p = command("export", "export a plan for torch: fx-aot mappings or a pipelining split spec",
                cmd_export)
    p.add_argument("plan", metavar="PLAN.json", help="the plan file (- for stdin)")
    _add_model(p, optional=True)
    p.add_argument("--kind", required=True, choices=list(EXPORT_KINDS), help="export format")
    p.add_argument("--out", metavar="FILE", default="-", help="output file (default - : stdout)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose, debug = getattr(args, "verbose", False), getattr(args, "debug", False)
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args))
    except CLIError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return exc.code
    except (InfeasibleError, InvalidPlanError) as exc:
        print(f"{PROG} {args.command}: no valid plan: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except PartitionError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. piped into `head`
        return EXIT_OK
    except Exception as exc:
        if debug:
            raise
        print(f"{PROG} {args.command}: internal error: {type(exc).__name__}: {exc}\n"
              "This is a bug; rerun with --debug for the traceback and report it.", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
