"""A job reviewed: whether it fits each GPU (memory by part against the card), how fast it runs
(its step or tokens a second with the band), what dominates, and the changes that would help most,
each exported in the job's own format. Torch-free: the model comes as the planner's profile.

# NOTE: [What a review searches]
The changes are the planner's search at the job's own GPU count, kept to what the job's engine can
run from the same kind of file (:func:`expressible`): torchtitan has no ZeRO-1, no optimizer
offload and no K-layer recomputation, and sets interleaving to 2 stages a rank; Megatron-LM runs
ZeRO 0 or 1 (its distributed optimizer), 1F1B or interleaved 1F1B and no min-cut; a DeepSpeed JSON
sets data parallelism, ZeRO and AutoTP's tensor parallelism (no sequence parallelism; pipeline
stages live in the model's code);
a serving engine's line sets tensor, pipeline and data parallelism. A change is listed when its
step band lies below the job's (surely faster), or when the job does not fit and the change does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from partitioner.cluster.hardware import Cluster
from partitioner.cluster.layout_search import search
from partitioner.cluster.layout_types import Layout, LayoutResult, Workload, recompute_layers
from partitioner.cluster.layouts import evaluate, shared_simulator
from partitioner.cluster.model_profile import ModelProfile
from partitioner.cluster.rules import check_layout
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import get_schedule
from partitioner.review.job import SERVING_FORMATS, Job, JobError

__all__ = ["Review", "Change", "review_job", "expressible", "MEGATRON_SCHEDULE"]

MEGATRON_SCHEDULE = "1f1b"  # Megatron-LM's schedule without virtual stages (interleaved with them)


@dataclass(frozen=True)
class Change:
    """A layout the job's engine can run on the same GPUs: its result, how many times faster it is
    (the job's step over its own; serving: its tokens a second over the job's), and what differs."""

    result: LayoutResult
    speedup: float
    differs: str


@dataclass(frozen=True)
class Review:
    job: Job
    result: LayoutResult
    capacity_bytes: float  # the card's memory, against the parts (which count the headroom kept free)
    changes: tuple[Change, ...]
    notes: tuple[str, ...] = ()
    # the workload priced: the job's, or (serving) the sequences the engine admits at once
    workload: Workload | None = None

    @property
    def fits(self) -> bool:
        return self.result.fits

    @property
    def dominant(self) -> str:
        """What takes the most of the time (the largest part of the step or the generated token)."""
        parts = self.result.parts_s
        return max(parts, key=lambda k: parts[k]) if parts else self.result.limit

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job.to_dict(),
            "fits": self.fits,
            "capacity_bytes": self.capacity_bytes,
            "dominant": self.dominant,
            "result": self.result.to_dict(),
            "changes": [{**c.result.to_dict(), "speedup": c.speedup, "differs": c.differs} for c in self.changes],
            "notes": list(self.notes),
        }


def expressible(fmt: str, lay: Layout) -> bool:
    """Whether a ``fmt`` job config can run ``lay`` (NOTE: [What a review searches])."""
    if fmt in SERVING_FORMATS:
        return lay.cp == 1 and lay.ep == 1 and lay.zero == 0
    interleaved = lay.pp > 1 and get_schedule(lay.schedule).choose_virtual
    if fmt.startswith("torchtitan"):
        return (
            not (lay.zero == 1 and lay.dp > 1)
            and not lay.offload
            and not recompute_layers(lay.recompute)
            and not (interleaved and lay.virtual != 2)
            and not lay.grad_fp32
        )
    if fmt == "megatron":
        return (
            lay.zero in (0, 1)
            and (lay.pp == 1 or lay.schedule == MEGATRON_SCHEDULE or get_schedule(lay.schedule).choose_virtual)
            and not lay.recompute.startswith("min-cut-")
            and not lay.grad_fp32
        )
    if fmt == "deepspeed":
        autotp = lay.tp == 1 or not lay.sp  # AutoTP splits the weights, not the sequence
        return lay.pp == lay.cp == lay.ep == 1 and autotp and lay.recompute in ("none", "full")
    return False


def _differs(a: Layout, b: Layout) -> str:
    words_a, words_b = a.label().split(), b.label().split()
    gone = [w for w in words_a if w not in words_b]
    new = [w for w in words_b if w not in words_a]
    return ", ".join(
        filter(None, [" ".join(gone) and f"drop {' '.join(gone)}", " ".join(new) and f"use {' '.join(new)}"])
    )


def _served(prof: ModelProfile, job: Job, target: Cluster, r: LayoutResult) -> tuple[LayoutResult, list[str], Workload]:
    """A serving engine admits the sequences its KV cache holds and queues the rest: a batch over
    the cache is priced at the cache's count, and it fits when the cache holds one whole sequence."""
    held = r.extra.get("kv_cache_sequences", 0.0)
    batch = job.workload.global_batch / job.layout.dp
    if r.fits or held < 1:
        return r, [], job.workload
    admitted = max(1, int(held)) * job.layout.dp
    work = dataclasses.replace(job.workload, global_batch=admitted)
    again = evaluate(prof, work, target, job.layout, shared_simulator())
    notes = [
        f"the KV cache holds {held:,.0f} sequences of {job.workload.seq_len + job.workload.generate_tokens:,} tokens "
        f"a replica, so the engine runs {admitted:,} at once of the {job.workload.global_batch:,} asked ({batch:,.0f} "
        "a replica) and queues the rest: priced at that batch"
    ]
    return again, notes, work


def review_job(prof: ModelProfile, job: Job, target: Cluster, top: int = 3) -> Review:
    """Review ``job`` on ``target`` (whose accelerator and links the person chose) with the model's
    profile ``prof``: its result, and up to ``top`` changes its engine can run on the same GPUs
    (NOTE: [What a review searches]). Raises :class:`JobError` when the model cannot run the
    layout at all (tensor parallelism that does not divide the heads, a batch that does not split)."""
    if job.memory_utilization is not None:
        target = dataclasses.replace(target, memory_utilization=job.memory_utilization)
    if job.workload.kind == "inference":  # the engine keeps its own share free (--gpu-memory-utilization)
        target = dataclasses.replace(target, headroom_bytes=0)
    try:
        check_layout(prof, job.layout, job.workload)
    except PartitionError as exc:
        raise JobError(f"{job.layout.label()} cannot run this model: {exc}") from None
    r = evaluate(prof, job.workload, target, job.layout, shared_simulator())
    notes: list[str] = []
    workload = job.workload
    capacity = float(target.accelerator.memory_bytes)  # the parts count the headroom kept free
    if job.workload.kind == "inference":
        r, notes, workload = _served(prof, job, target, r)
    found = search(prof, job.workload, target, [job.layout.devices])
    changes: list[Change] = []
    for other in found.fitting:
        if len(changes) >= top or not expressible(job.format, other.layout) or other.layout == job.layout:
            continue
        if job.workload.kind == "inference":
            gain = other.tokens_per_s / r.tokens_per_s if r.tokens_per_s else float("inf")
            surely = other.tokens_per_s_band[0] > r.tokens_per_s_band[1]
        else:
            gain = r.step_s / other.step_s if other.step_s else float("inf")
            surely = other.step_high_s < r.step_low_s
        if surely or (not r.fits and other.fits):
            changes.append(Change(other, gain, _differs(job.layout, other.layout)))
    if job.workload.kind == "inference":
        changes.sort(key=lambda c: -c.speedup)
    return Review(job, r, capacity, tuple(changes), tuple(notes), workload)
