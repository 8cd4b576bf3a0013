"""The record a reader makes of a job config: the layout and workload as the planner understands
them, every setting it took and where it took it from, and what it did not take (named, never
dropped). Torch-free."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Iterable

from partitioner.cluster.layout_types import Layout, Workload
from partitioner.errors import PartitionError

__all__ = ["Setting", "Job", "JobError", "Taken", "nearest_name", "FORMATS", "SERVING_FORMATS"]

# The formats a job is read from (partitioner.review.readers holds one reader each).
FORMATS = ("torchtitan", "torchtitan-args", "megatron", "deepspeed", "vllm", "sglang")
SERVING_FORMATS = ("vllm", "sglang")


class JobError(PartitionError):
    """A job config that cannot be read: the message names the field and the fix."""


@dataclass(frozen=True)
class Setting:
    """One thing the planner took from the job: its name in the planner (``tp``, ``global_batch``),
    the value, and where it came from (``--tensor-model-parallel-size 8``, ``parallelism.
    tensor_parallel_degree = 8``, ``Megatron-LM's default``, ``64 GPUs / (tp 8 x pp 1)``)."""

    name: str
    value: Any
    source: str


@dataclass(frozen=True)
class Job:
    """A job config read for review. ``model`` is a model spec (``hf:llama-3-8b``) with its
    ``model_sets`` (``KEY=VALUE`` overrides), None when the file does not name one; ``devices`` the
    GPUs it runs on when the file says; ``unknown`` the fields its format does not have (each with
    the nearest known name), ``unpriced`` the fields read and not priced (a learning rate)."""

    format: str
    layout: Layout
    workload: Workload
    settings: tuple[Setting, ...]
    model: str | None = None
    model_sets: tuple[str, ...] = ()
    model_name: str | None = None  # the model as the job names it (a repository id), for its exports
    devices: int | None = None
    devices_per_node: int | None = None
    accelerator: str | None = None
    engine: str | None = None  # what the times assume (partitioner.kernels.ENGINES), when the job says
    memory_utilization: float | None = None  # serving: the share of the card the engine takes
    unknown: tuple[str, ...] = ()
    unpriced: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    reader: str = ""  # what read it: the engine's own classes, or this project's documented subset

    def setting(self, name: str) -> Setting | None:
        return next((s for s in self.settings if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "reader": self.reader,
            "model": self.model,
            "model_sets": list(self.model_sets),
            "devices": self.devices,
            "layout": self.layout.label(),
            "workload": dict(self.workload.__dict__),
            "settings": [{"name": s.name, "value": s.value, "from": s.source} for s in self.settings],
            "unknown": list(self.unknown),
            "unpriced": list(self.unpriced),
            "notes": list(self.notes),
        }


def nearest_name(name: str, known: Iterable[str]) -> str:
    """``name`` with the nearest known name, for a message: ``tensor_paralel_degree (did you
    mean tensor_parallel_degree?)``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"{name} (did you mean {close[0]}?)" if close else name


@dataclass
class Taken:
    """What a reader has taken so far: the planner's values with their sources, the names it
    did not know and the names it read without pricing. Each reader fills one and builds its job."""

    values: dict[str, Any] = field(default_factory=dict)
    settings: list[Setting] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    unpriced: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def take(self, name: str, value: Any, source: str) -> None:
        self.values[name] = value
        self.settings = [s for s in self.settings if s.name != name] + [Setting(name, value, source)]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def layout(self, where: str) -> Layout:
        """The layout of the values taken; a value the layout refuses names its source and the fix."""
        keys = (
            "dp",
            "tp",
            "pp",
            "cp",
            "ep",
            "microbatch_size",
            "schedule",
            "zero",
            "recompute",
            "sp",
            "virtual",
            "shard",
            "offload",
        )
        try:
            return Layout(**{k: self.values[k] for k in keys if k in self.values})
        except PartitionError as exc:
            raise JobError(f"{where}: {exc}") from None

    def workload(self, where: str, kind: str = "training") -> Workload:
        keys = ("global_batch", "seq_len", "element_bytes", "optimizer", "train_tokens", "generate_tokens", "dtype")
        try:
            return Workload(kind, **{k: self.values[k] for k in keys if k in self.values})
        except PartitionError as exc:
            raise JobError(f"{where}: {exc}") from None

    def job(self, format: str, where: str, **extra: Any) -> Job:
        kind = "inference" if format in SERVING_FORMATS else "training"
        return Job(
            format,
            self.layout(where),
            self.workload(where, kind),
            tuple(self.settings),
            unknown=tuple(self.unknown),
            unpriced=tuple(self.unpriced),
            notes=tuple(self.notes),
            **extra,
        )
