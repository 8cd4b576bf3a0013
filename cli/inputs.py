"""What the command line reads: models (one ``sample_models.load`` for every front end), device
specs, plan files and node-latency files (the library's one reader); the argparse side is :mod:`cli.arguments`.

Bad input raises :class:`CLIError` (exit 2 unless said) with a message naming the input and the fix.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from partitioner import Device, Graph, PartitionError, Plan, parse_devices
from partitioner.interop.readers import read_node_latency_text
from partitioner.options import PartitionOptions
from partitioner.plan.size import check_plan_size

__all__ = [
    "CLIError",
    "EXIT_OK",
    "EXIT_FAIL",
    "EXIT_USAGE",
    "EXIT_INTERNAL",
    "EXIT_RUN",
    "LoadedModel",
    "load_model",
    "resolve_devices",
    "load_plan",
    "read_json",
    "read_text",
    "read_node_latency",
    "write_output",
    "refuse_overwriting",
    "refuse_invalid",
    "other_model",
    "refuse_other_model",
    "partition_options",
]

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL, EXIT_RUN = 0, 1, 2, 3, 4
MAX_INPUT_BYTES = 256 * 2**20  # larger plan or mapping files are not plans


class CLIError(Exception):
    """Bad input found by the command line itself; ``code`` is the exit status (2 unless said)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def read_text(path: str, what: str) -> str:
    if path == "-":
        return sys.stdin.read().removeprefix("\ufeff")
    p = Path(path)
    if not p.exists():
        raise CLIError(f"{what} {path!r} does not exist; check the path")
    if p.is_dir():
        raise CLIError(f"{what} {path!r} is a folder; give a file")
    try:
        if p.stat().st_size > MAX_INPUT_BYTES:
            raise CLIError(f"{what} {path!r} is larger than {MAX_INPUT_BYTES // 2**20} MiB; give the right file")
        return p.read_text(encoding="utf-8-sig")  # a byte order mark is no part of the text
    except UnicodeDecodeError:
        raise CLIError(f"{what} {path!r} is not a UTF-8 text file") from None
    except OSError as exc:
        raise CLIError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from None


def read_json(path: str, what: str) -> Any:
    text = read_text(path, what)
    try:
        return json.loads(text)
    except RecursionError:
        raise CLIError(f"{what} {path}: nested too deeply to be valid input; fix the file") from None
    except json.JSONDecodeError as exc:
        name = "<stdin>" if path == "-" else path
        raise CLIError(
            f"{what} {name}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; "
            "fix the file, or write it again with `partition-explorer plan ... --out FILE`"
        ) from None


def load_plan(path: str) -> Plan:
    """A plan file, with errors that name the file (exit 2)."""
    data = read_json(path, "plan file")
    try:
        check_plan_size(data)  # before the (slow) build of a huge file
        return Plan.from_dict(data)
    except PartitionError as exc:
        raise CLIError(f"plan file {path}: {exc}") from None


@dataclass(frozen=True)
class LoadedModel:
    graph: Graph
    label: str  # sample_models.label(spec, overrides): the same name the app records
    default_devices: str | None  # the sample model's default device spec, None otherwise
    build: Callable[[], Any] | None = None  # builds the nn.Module again (hf: models), when asked

    @functools.cached_property
    def module(self) -> Any:
        """The built nn.Module of an hf: model (for Accelerate's device map), else None; built on
        first use, as a graph read from the trace cache comes without it."""
        return self.build() if self.build is not None else None


def load_model(spec: str, sets: Sequence[str] = (), devices: str | None = "") -> LoadedModel:
    """Build and trace MODEL (a sample model or ``package.module:factory``) with
    ``sample_models.load``. Pass the ``--devices`` value as ``devices`` where the command needs
    devices: a factory or ``hf:`` model without them is refused before the (slow) build and trace,
    and so is a ``devices`` spec that does not parse."""
    import sample_models
    from partitioner.tracing import cache as trace_cache
    from sample_models import LoaderError

    if (sample_models.is_factory(spec) or sample_models.is_hf(spec)) and devices is None:
        raise CLIError(
            f"--devices is required for {spec!r} (only sample models have default devices); e.g. --devices 4x16GiB"
        )
    if devices:
        parse_devices(devices)  # a bad spec is refused now, not after the trace (minutes for a large model)
    if sample_models.is_factory(spec) and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: factories next to the user
    try:
        overrides = sample_models.parse_overrides(spec, list(sets))
    except (LoaderError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    label = sample_models.label(spec, overrides)
    built: list[Any] = []  # the module the trace built, kept for LoadedModel.module

    def load() -> Any:
        try:
            loaded = sample_models.load(spec, overrides)
        except (LoaderError, ValueError) as exc:
            raise CLIError(str(exc)) from None
        built[:] = [loaded[0]]
        return loaded

    def build() -> Graph:
        return sample_models.trace_loaded(spec, overrides, load(), label)

    graph = trace_cache.cached_trace(trace_cache.model_key(spec, overrides), build)  # shared with the app
    default = None
    if spec in sample_models.names():
        count, memory = sample_models.default_devices(spec)
        default = f"{count}x{memory}B"
    module = (lambda: built[0] if built else load()[0]) if sample_models.is_hf(spec) else None
    return LoadedModel(graph, label, default, module)


def resolve_devices(spec: str | None, model: LoadedModel) -> list[Device]:
    if spec is None:
        if model.default_devices is None:
            raise CLIError(
                f"--devices is required for {model.label!r} (only sample models have "
                "default devices); e.g. --devices 4x16GiB"
            )
        spec = model.default_devices
    return parse_devices(spec)


def read_node_latency(path: str) -> dict[str, tuple[float, float]]:
    """A node-latency file (JSON or CSV), read by the library's one reader."""
    text = read_text(path, "node-latency file")
    try:
        return read_node_latency_text(text, path)
    except PartitionError as exc:
        raise CLIError(str(exc)) from None


def partition_options(args: argparse.Namespace) -> PartitionOptions:
    """The :class:`PartitionOptions` of the shared cost and partitioning arguments."""
    return PartitionOptions.build(
        transfer_rate_bytes_per_s=args.transfer_rate,
        node_latency=read_node_latency(args.node_latency) if args.node_latency else None,
        saturate_host=getattr(args, "saturate_host", False),
        force_partition=getattr(args, "force_partition", False),
        search_budget=getattr(args, "search_budget", None),
        cost_model=getattr(args, "cost_model", None) or "physical",
        time_limit_s=getattr(args, "time_limit", None),
    )


def write_output(path: str, data: str | bytes, what: str) -> None:
    """Write ``data`` to ``path`` (``-``: stdout) atomically: into a temporary file in the same
    folder, then ``os.replace`` over the target, so a failed write (a full disk) leaves the old file
    whole. A device or pipe (``/dev/null``) is written in place."""
    if path == "-":
        if isinstance(data, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(data if data.endswith("\n") else data + "\n")
        return
    raw = data if isinstance(data, bytes) else (data if data.endswith("\n") else data + "\n").encode("utf-8")
    target = Path(path)
    try:
        if target.exists() and not target.is_file():  # a device or a pipe: nothing to replace
            with open(target, "wb") as stream:
                stream.write(raw)
        else:
            _replace_atomically(target, raw)
    except OSError as exc:
        raise CLIError(f"cannot write {what} to {path!r}: {exc.strerror or exc}; nothing was changed there") from None
    print(f"wrote {what} to {path}", file=sys.stderr)


def _replace_atomically(target: Path, raw: bytes) -> None:
    if target.exists():
        mode = stat.S_IMODE(target.stat().st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # what open() would have given a new file
    fd, temp = tempfile.mkstemp(dir=target.resolve().parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(raw)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


# The arguments that name files a command reads, and those it writes (argparse dests).
INPUT_ARGS = ("plan", "a", "b", "aot_mapping", "node_latency", "spec", "devices")
OUTPUT_ARGS = ("out", "export_out", "split_spec_out")


def _same_file(a: str, b: str) -> bool:
    pa, pb = Path(a), Path(b)
    if pa.exists() and pb.exists():
        return os.path.samefile(pa, pb)
    return os.path.realpath(pa) == os.path.realpath(pb)


def refuse_overwriting(args: argparse.Namespace) -> None:
    """Raise :class:`CLIError` (exit 2) when an output path names one of the command's input files
    (``render plan.json --out plan.json``) or another output, before anything is read or written."""
    inputs = [
        (name, getattr(args, name))
        for name in INPUT_ARGS
        if isinstance(getattr(args, name, None), str)
        and getattr(args, name) != "-"
        and Path(getattr(args, name)).is_file()
    ]
    outputs = [
        (name, getattr(args, name))
        for name in OUTPUT_ARGS
        if isinstance(getattr(args, name, None), str) and getattr(args, name) != "-"
    ]
    flag = {name: "--" + name.replace("_", "-") for name in OUTPUT_ARGS}
    for i, (name, path) in enumerate(outputs):
        for other, source in inputs:
            if _same_file(path, source):
                what = (
                    f"--{other.replace('_', '-')}"
                    if other in ("aot_mapping", "node_latency", "spec", "devices")
                    else other.upper()
                )
                raise CLIError(
                    f"{flag[name]} {path} is the same file as the input {what} {source}: writing it "
                    "would replace what this command reads; write to another file"
                )
        for other, second in outputs[:i]:
            if _same_file(path, second):
                raise CLIError(f"{flag[name]} {path} and {flag[other]} {second} are the same file; give each its own")


def other_model(plan: Plan, model: LoadedModel) -> str | None:
    """Why ``plan`` was made for another model than ``model``, or None: the plan names another
    model (its label, as ``sample_models.label`` writes it) and records another graph. The same
    model whose graph changed (a new torch) is not another model: ``check`` notes that. O(N)."""
    fingerprint = model.graph.fingerprint()
    if (
        not plan.model
        or plan.model == model.label
        or not plan.graph_fingerprint
        or plan.graph_fingerprint == fingerprint
    ):
        return None
    return (
        f"the plan was made for model {plan.model!r} (graph {plan.graph_fingerprint}), not for {model.label!r} "
        f"(graph {fingerprint}); give the model the plan was made for, or make a plan for this one "
        f"(partition-explorer plan {model.label.partition('(')[0]} ...)"
    )


def refuse_other_model(result: Any, plan: Plan, model: LoadedModel) -> Any:
    """``check_plan``'s ``result`` with :func:`other_model`'s refusal as its first violation, in place
    of the note (or the strict violation) that the graph changed; ``result`` when it is the same model."""
    from partitioner.plan.validate import GRAPH_CHANGED, Violation

    why = other_model(plan, model)
    if not why:
        return result
    return dataclasses.replace(
        result,
        violations=(Violation(GRAPH_CHANGED, why), *(v for v in result.violations if v.kind != GRAPH_CHANGED)),
        notes=tuple(n for n in result.notes if "graph changed since the plan was made" not in n),
    )


def refuse_invalid(plan: Plan, path: str, graph: Graph | None = None, model: LoadedModel | None = None) -> None:
    """Raise :class:`CLIError` (exit 1, as ``check`` exits) when ``plan`` breaks a rule: every
    violation ``check`` finds against ``graph`` (``model``'s graph when given, with
    :func:`other_model`'s refusal first) and the plan's devices, or the plan's own rules without a
    model. Nothing is written for an invalid plan."""
    from partitioner.accelerator.check import check_plan

    if model is not None:
        graph = model.graph
    found = (
        [str(v) for v in check_plan(plan, graph, plan.devices).violations]
        if graph is not None
        else [str(v) for v in plan.violations(check_fingerprint=False)]
    )
    why = other_model(plan, model) if model is not None else None
    found = [why, *found] if why else found
    if found:
        listed = "; ".join(f"{i}. {v}" for i, v in enumerate(found, start=1))
        raise CLIError(
            f"plan file {'<stdin>' if path == '-' else path} is not valid"
            f"{' for ' + graph.name if graph is not None else ''}: {listed}. Nothing was written; "
            "fix the plan or make it again (`partition-explorer check` lists the same)",
            EXIT_FAIL,
        )
