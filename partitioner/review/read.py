"""Which format a job config is in, and its reader: a file's name and first words decide, or
the format a person names."""

from __future__ import annotations

import json
from pathlib import Path

from partitioner.review.deepspeed import read_deepspeed
from partitioner.review.job import FORMATS, Job, JobError
from partitioner.review.megatron import read_megatron
from partitioner.review.serve_line import read_serve_line
from partitioner.review.shell import expand_script, split_launcher
from partitioner.review.titan import read_titan_args, read_titan_toml

__all__ = ["read_job", "detect_format", "MAX_JOB_BYTES"]

MAX_JOB_BYTES = 1 << 20  # a job config is a few kilobytes; a megabyte is not one


def detect_format(text: str, name: str = "") -> str:
    """The format of a job config: by its file name (``.toml``, ``.json``), else by its words."""
    stripped = text.lstrip()
    if name.endswith(".toml"):
        return "torchtitan"
    if name.endswith(".json") or stripped.startswith("{"):
        return "deepspeed"
    words = expand_script(text).words
    _, program, _ = split_launcher(words) if words else ({}, "", [])
    joined = " ".join(words[:4])
    if "sglang" in program or "sglang" in joined:
        return "sglang"
    if program == "serve" or "vllm" in program or joined.startswith("vllm"):
        return "vllm"
    if any(w.startswith("--parallelism.") or w.startswith("--training.") for w in words) or "torchtitan" in program:
        return "torchtitan-args"
    if stripped.startswith("[") or "\n[" in text:
        return "torchtitan"
    return "megatron"


def read_job(
    text: str,
    name: str = "",
    format: str | None = None,
    devices: int | None = None,
    seq_len: int | None = None,
    prompt: int = 1024,
    generate: int = 256,
) -> Job:
    """The job of a config's ``text`` (a file's contents, or a command line). ``name`` is the file's
    name (its suffix helps say the format); ``devices`` the GPUs where the config leaves them to the
    launcher; ``seq_len`` for DeepSpeed (its file holds none); ``prompt`` and ``generate`` the
    tokens a served sequence takes in and gives out. Raises :class:`JobError` naming the field and
    the fix."""
    if len(text.encode()) > MAX_JOB_BYTES:
        raise JobError(f"{name or 'the job'} is {len(text.encode()):,} bytes; a job config is a few kilobytes")
    fmt = format or detect_format(text, name)
    if fmt == "deepspeed" and _is_device_map(text):
        raise JobError(
            f"{name or 'this JSON'} is an Accelerate device map, not a job config: review it with "
            "`partition-explorer review FILE --model MODEL` (the page reviews training and serving configs)"
        )
    if fmt not in FORMATS:
        raise JobError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    where = Path(name).name if name else f"the {fmt} job"
    if fmt == "torchtitan":
        return read_titan_toml(text, where, devices)
    if fmt == "deepspeed":
        return read_deepspeed(text, where, devices, seq_len)
    words = expand_script(text).words
    if fmt == "torchtitan-args":
        return read_titan_args(words, where, devices)
    if fmt == "megatron":
        return read_megatron(words, where, devices)
    return read_serve_line(words, where, prompt, generate)


def _is_device_map(text: str) -> bool:
    from partitioner.review.device_map import is_device_map

    try:
        return is_device_map(json.loads(text))
    except ValueError:
        return False
