"""``partition-explorer review``: read the job a team is about to launch (a torchtitan TOML or
command line, a Megatron-LM launch script, a DeepSpeed JSON, a ``vllm serve`` or SGLang line) and
say whether it fits, how fast it runs, what dominates and what to change; exit 1 when it does not
fit, so a launch can be gated on it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cli.arguments import bounded
from cli.commands import COMMON_EPILOG
from cli.inputs import EXIT_FAIL, EXIT_OK, CLIError, load_model, write_output
from partitioner import cluster, review
from partitioner.errors import PartitionError
from partitioner.review.read import MAX_JOB_BYTES
from partitioner.review.report import (
    FORMAT_NAMES,
    MAX_LISTED,
    change_line,
    dominant_line,
    memory_line,
    speed_line,
    verdict,
)

__all__ = ["register"]

EXAMPLES = """examples:
  partition-explorer review llama3_70b.toml --devices 64 --accelerator a100-80gb
  partition-explorer review train_llama3_8b.sh
  partition-explorer review "torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 --global-batch-size 256 --bf16"
  partition-explorer review ds_config.json --model hf:llama-3-8b --seq-len 4096 --devices 16
  partition-explorer review "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8 --max-num-seqs 64"

JOB is a file (.toml, .json, or a launch script) or the command line itself, in quotes. An
Accelerate device map (JSON: module path -> device id) is reviewed with --model on --devices GPUs:
each device's bytes against its memory, the forward's latency, and the partitioner's plan on the
same devices (--export writes it as a device map Accelerate runs). The format
is told from the file's suffix and first words, or named with --format. A launch script is read,
never run: its variables, arrays and simple ifs are expanded (see partitioner.review.shell). Every
setting the review takes is printed with where it came from (the file's field, the engine's
default, or a rule of the engine); every field it does not price is named. The review prints the
memory a GPU holds by part against the card less --headroom, the step (or the tokens a second)
with its band and what dominates, and the changes the job's engine can run on the same GPUs that
would help most; --export writes the best of them (or the job itself, when none helps) in the
job's own format. Exit 0 when the job fits, 1 when it does not, 2 when the file cannot be read.
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "review",
        help="review a torchtitan, Megatron-LM, DeepSpeed or vLLM job before it runs",
        description="whether a job fits, how fast it runs, and what to change",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES + COMMON_EPILOG,
    )
    p.add_argument("job", metavar="JOB", help="a job config file, or the launch command line in quotes")
    p.add_argument("--format", choices=list(review.FORMATS), help="the job's format (default: told from it)")
    p.add_argument("--model", help="the model, where the job does not name one (hf:llama-3-8b, a sample model)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], help="a model setting, repeatable")
    p.add_argument("--devices", type=bounded(int, 1, 1 << 20), help="the GPUs the job runs on, where it does not say")
    p.add_argument("--seq-len", type=bounded(int, 1, 1 << 20), help="DeepSpeed: tokens a sequence (its file has none)")
    p.add_argument("--prompt", type=bounded(int, 1, 1 << 20), default=1024, help="serving: tokens a prompt (1024)")
    p.add_argument("--generate", type=bounded(int, 0, 1 << 16), default=256, help="serving: tokens generated (256)")
    p.add_argument("--accelerator", default="h100-80gb", help=f"the GPU: {', '.join(cluster.ACCELERATORS)}")
    p.add_argument("--devices-per-node", type=bounded(int, 1, 64), default=8, help="GPUs a node (default 8)")
    p.add_argument("--inter", choices=list(cluster.LINKS), default="infiniband-ndr", help="the link between nodes")
    p.add_argument("--headroom", default="4GiB", help="memory kept free on each GPU (default 4GiB)")
    p.add_argument("--top", type=bounded(int, 0, 20), default=3, help="changes listed (default 3)")
    p.add_argument("--export", metavar="FILE", help="write the best change (or the job) in the job's format here")
    p.add_argument("--out", metavar="FILE", help="write the review as JSON here")
    p.set_defaults(func=run)


def _text(job: str) -> tuple[str, str]:
    """(text, file name) of JOB: a file's contents, or the command line itself."""
    path = Path(job)
    looks_like_file = "\n" not in job and len(job) < 4096 and not job.lstrip().startswith(("-", "{"))
    if looks_like_file and " " not in job.strip() and path.suffix:
        if not path.is_file():
            raise CLIError(f"job file {job!r} does not exist; give a file or the command line in quotes")
        if path.stat().st_size > MAX_JOB_BYTES:
            raise CLIError(f"job file {job} is {path.stat().st_size:,} bytes; a job config is a few kilobytes")
        try:
            return path.read_text(), path.name
        except (OSError, UnicodeDecodeError) as exc:
            raise CLIError(f"job file {job} cannot be read as text: {exc}") from None
    return job, ""


def run(args: argparse.Namespace) -> int:
    from partitioner.units import parse_bytes

    text, name = _text(args.job)
    mapped = _device_map(args, text, name) if args.format is None else None
    if mapped is not None:
        return mapped
    try:
        job = review.read_job(text, name, args.format, args.devices, args.seq_len, args.prompt, args.generate)
    except review.JobError as exc:
        raise CLIError(str(exc)) from None
    spec = args.model or job.model
    if spec is None:
        raise CLIError(
            f"the {FORMAT_NAMES[job.format]} names no model this project builds; give --model (e.g. hf:llama-3-8b)"
        )
    sets = list(args.set) if args.model else [*job.model_sets, *args.set]
    if spec.startswith("hf:") and not any(s.startswith("dtype=") for s in sets):
        sets.append("dtype=bf16")  # the checkpoints' own type; the planner prices the job's precision
    target = cluster.cluster(
        args.accelerator, args.devices_per_node, None, args.inter, parse_bytes(args.headroom), engine=job.engine
    )
    model = load_model(spec, sets, devices="")
    prof = cluster.profile(model.graph, model.label)
    try:
        rv = review.review_job(prof, job, target, args.top)
    except (review.JobError, PartitionError) as exc:
        raise CLIError(str(exc)) from None
    _print(rv, model.label, args.accelerator)
    if args.export:
        best = rv.changes[0].result if rv.changes else rv.result
        file_name, body, _ = review.job_file(job, best.layout, job.workload, args.devices_per_node)
        write_output(args.export, body, f"{FORMAT_NAMES[job.format]} ({file_name})")
    if args.out:
        write_output(
            args.out,
            json.dumps({"model": model.label, "accelerator": args.accelerator, **rv.to_dict()}, indent=2),
            "review",
        )
    return EXIT_OK if rv.fits else EXIT_FAIL


def _print(rv: review.Review, label: str, accelerator: str) -> None:
    job = rv.job
    print(f"{FORMAT_NAMES[job.format]}, read by {job.reader}")
    named = job.setting("model")
    print(f"model: {label}" + (f" ({named.source})" if named else " (--model)"))
    for s in job.settings:
        if s.name not in ("model", "model_sets", "engine"):
            print(f"  {s.name} = {s.value}  <- {s.source}")
    if job.engine:
        engine = job.setting("engine")
        print(f"  engine = {job.engine}  <- {engine.source if engine else ''}")
    if job.unknown:
        print("unknown (not fields of this format; not read): " + ", ".join(job.unknown))
    if job.unpriced:
        shown = ", ".join(job.unpriced[:MAX_LISTED])
        more = f" and {len(job.unpriced) - MAX_LISTED} more" if len(job.unpriced) > MAX_LISTED else ""
        print(f"read, not priced: {shown}{more}")
    for note in (*job.notes, *rv.notes):
        print(f"note: {note}")
    print()
    print(verdict(rv, accelerator))
    print(memory_line(rv))
    print(speed_line(rv))
    print(dominant_line(rv))
    if rv.result.assumes:
        print(f"the time assumes: {'; '.join(rv.result.assumes)}")
    print()
    if rv.changes:
        print(f"changes {FORMAT_NAMES[job.format].split(' (')[0]} can run on the same {rv.result.devices} GPUs:")
        for i in range(len(rv.changes)):
            print("  " + change_line(i + 1, rv, i))
    else:
        print("no change on the same GPUs is surely faster (none's band lies below the job's)")


def _device_map(args: argparse.Namespace, text: str, name: str) -> int | None:
    """An Accelerate device map (JSON) reviewed with --model on --devices x --accelerator; None
    when ``text`` is not one."""
    from partitioner import parse_devices
    from partitioner.review.device_map import is_device_map, read_device_map, review_device_map
    from partitioner.units import format_bytes, format_seconds

    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not is_device_map(data):
        return None
    device_map = read_device_map(text, name or "device map")
    if not args.model:
        raise CLIError("an Accelerate device map names module paths, not the model; give --model (e.g. hf:llama-3-8b)")
    used = [v for v in device_map.values() if isinstance(v, int)]
    count = args.devices or (max(used) + 1 if used else 1)
    sets = list(args.set) + (
        ["dtype=bf16"] if args.model.startswith("hf:") and not any(s.startswith("dtype=") for s in args.set) else []
    )
    model = load_model(args.model, sets, devices="")
    try:
        rv = review_device_map(model.graph, device_map, parse_devices(f"{count}x{args.accelerator}"))
    except review.JobError as exc:
        raise CLIError(str(exc)) from None
    print(f"Accelerate device map of {len(device_map)} module(s), on {count} x {args.accelerator} ({model.label})")
    over = set(rv.plan.over_capacity())
    for device, held in sorted(rv.plan.device_memory_bytes().items()):
        cap = rv.plan.device(device).memory_bytes
        print(f"  device {device}: {format_bytes(held)} of {format_bytes(cap)}" + ("  OVER" if device in over else ""))
    print(
        f"forward of the example batch: {format_seconds(rv.plan.latency_s)}, one device after another; "
        + ("fits" if rv.fits else "does NOT fit")
    )
    if rv.better is not None and rv.better_map is not None:
        print(
            f"the cost-aware plan on the same devices, as a device map Accelerate runs: "
            f"{format_seconds(rv.better.latency_s)}, each device within its memory, "
            f"{len(set(rv.better_map.values()))} device(s) used"
        )
        if args.export:
            write_output(args.export, json.dumps({"device_map": rv.better_map}, indent=2), "device map")
    if args.out:
        write_output(args.out, json.dumps({"model": model.label, **rv.to_dict()}, indent=2), "review")
    return EXIT_OK if rv.fits else EXIT_FAIL
