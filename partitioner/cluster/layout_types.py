"""The records of the cluster planner: a workload, a layout (validating its own values) and a
layout's result. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from partitioner.cost.training import check_optimizer
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import NO_SCHEDULE, SCHEDULES, get_schedule
from partitioner.units import dtype_for_bytes, find_dtype

__all__ = [
    "Workload",
    "Layout",
    "LayoutResult",
    "RECOMPUTE",
    "ZERO_STAGES",
    "SCHEDULE_CHOICES",
    "MAX_DEGREE",
    "recompute_layers",
]


ZERO_STAGES = (0, 1, 2, 3)

RECOMPUTE = ("none", "selective", "full")


def recompute_layers(text: str) -> int:
    """K of ``layers-K`` (K layers of each pipeline rank recomputed whole: Megatron-LM's
    ``--recompute-method block --recompute-num-layers K``); 0 for any other choice."""
    if not text.startswith("layers-"):
        return 0
    count = text.removeprefix("layers-")
    return int(count) if count.isdigit() and 0 < int(count) <= MAX_DEGREE else 0


def _is_min_cut(text: str) -> bool:
    """Whether ``text`` is ``min-cut-B`` with B a number in [0, 1]."""
    if not text.startswith("min-cut-"):
        return False
    try:
        budget = float(text.removeprefix("min-cut-"))
    except ValueError:
        return False
    return 0.0 <= budget <= 1.0


@dataclass(frozen=True)
class Workload:
    """Training: ``global_batch`` sequences of ``seq_len`` tokens a step, weights of
    ``element_bytes`` (2: bf16 mixed precision), ``optimizer``, ``train_tokens`` to price a run.
    Inference: ``global_batch`` sequences, a prompt of ``seq_len`` tokens, ``generate_tokens``.
    ``dtype`` names the precision (a short name of :data:`partitioner.units.DTYPES`: ``bf16``,
    ``fp16``, ``fp8``, ``fp32``): given, it sets ``element_bytes``; left out, it is the floating
    type of ``element_bytes`` (2: bf16). The exports write it (Megatron-LM's ``--bf16``/``--fp16``,
    DeepSpeed's blocks, torchtitan's mixed precision)."""

    kind: str = "training"
    global_batch: int = 512
    seq_len: int = 4096
    element_bytes: int = 2
    optimizer: str = "adam"
    train_tokens: float = 1e12
    generate_tokens: int = 256
    dtype: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("training", "inference"):
            raise PartitionError(f"kind must be 'training' or 'inference' (got {self.kind!r})")
        if self.global_batch < 1 or self.seq_len < 1 or self.generate_tokens < 0:
            raise PartitionError(f"global_batch and seq_len must be >= 1 (got {self.global_batch}, {self.seq_len})")
        if self.dtype:
            named = find_dtype(self.dtype)
            if named is None or not named.floating or named.bytes not in (1, 2, 4):
                raise PartitionError(f"dtype must be one of fp8, bf16, fp16 or fp32 (got {self.dtype!r})")
            if self.element_bytes not in (2, named.bytes):  # 2: the default, which a named dtype sets
                raise PartitionError(
                    f"dtype {self.dtype} takes {named.bytes} byte(s) an element and element_bytes says "
                    f"{self.element_bytes}; give one of them"
                )
            object.__setattr__(self, "element_bytes", named.bytes)
            object.__setattr__(self, "dtype", named.short)
        if self.element_bytes not in (1, 2, 4):
            raise PartitionError(f"element_bytes must be 1, 2 or 4 (got {self.element_bytes})")
        if not self.dtype:
            object.__setattr__(self, "dtype", dtype_for_bytes(self.element_bytes).short)
        check_optimizer(self.optimizer)


SCHEDULE_CHOICES = (NO_SCHEDULE, *SCHEDULES)  # read from the one schedule table

MAX_DEGREE = 1 << 20  # no layout has a degree beyond a million devices


@dataclass(frozen=True)
class Layout:
    """One way to lay a model out. Validates itself: degrees are whole numbers in [1, 2^20], ZeRO
    0-3, a known schedule and recomputation; :func:`check_layout` checks it against a model."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    microbatch_size: int = 1  # sequences per microbatch
    schedule: str = "none"  # a pipeline schedule when pp > 1
    zero: int = 0  # ZeRO stage over the dp group (3: FSDP full sharding)
    recompute: str = "none"  # none, selective, full, layers-K (K layers a rank, full), or min-cut-B
    ep: int = 1  # expert parallelism: each MoE layer's experts split over ep ranks of the dp group
    sp: bool = True  # sequence parallelism with tp > 1 (Korthikanti et al. 2022; Megatron's --sequence-parallel)
    cp: int = 1  # context parallelism: each sequence split over cp ranks (ring attention)
    virtual: int = 2  # interleaved 1F1B: model chunks a pipeline rank holds
    grad_fp32: bool = False  # DeepSpeed's fp32 gradient partition (its estimators' 18 bytes a parameter)
    shard: int = 0  # ZeRO's sharding group: 0 the whole dp x cp group; k: HSDP, shard over k, replicate the rest
    offload: bool = False  # ZeRO-Offload: the optimizer state and its step on the host, gradients sent there

    def __post_init__(self) -> None:
        for key in ("dp", "tp", "pp", "microbatch_size", "ep", "cp", "virtual"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEGREE:
                raise PartitionError(f"layout {key} must be a whole number in [1, {MAX_DEGREE}] (got {value!r})")
        if isinstance(self.shard, bool) or not isinstance(self.shard, int) or not 0 <= self.shard <= MAX_DEGREE:
            raise PartitionError(
                f"layout shard must be a whole number in [0, {MAX_DEGREE}] (got {self.shard!r}); "
                "0 shards over the whole data-parallel group"
            )
        if isinstance(self.zero, bool) or self.zero not in ZERO_STAGES:
            raise PartitionError(f"layout zero must be 0, 1, 2 or 3 (got {self.zero!r})")
        if self.schedule not in SCHEDULE_CHOICES:
            raise PartitionError(
                f"layout schedule must be one of {', '.join(SCHEDULE_CHOICES)} (got {self.schedule!r})"
            )
        if self.schedule != NO_SCHEDULE and get_schedule(self.schedule).choose_virtual and self.virtual < 2:
            raise PartitionError(f"interleaved 1F1B needs at least 2 chunks a rank (got virtual={self.virtual})")
        if not isinstance(self.recompute, str) or not (
            self.recompute in RECOMPUTE or _is_min_cut(self.recompute) or recompute_layers(self.recompute)
        ):
            raise PartitionError(
                f"layout recompute must be one of {', '.join(RECOMPUTE)}, layers-K (K layers of a "
                f"pipeline rank recomputed, K >= 1) or min-cut-B with B in [0, 1] (got {self.recompute!r})"
            )
        if self.devices > MAX_DEGREE:
            raise PartitionError(f"a layout of {self.devices} devices is beyond {MAX_DEGREE}; lower its degrees")

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def label(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.pp > 1:
            parts.append(self.schedule)
            if self.schedule != NO_SCHEDULE and get_schedule(self.schedule).choose_virtual and self.virtual != 2:
                parts.append(f"v{self.virtual}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts.append(f"mb{self.microbatch_size}")
        if self.zero:
            parts.append(f"zero{self.zero}")
        if self.recompute != "none":
            parts.append(f"recompute-{self.recompute}")
        if self.tp > 1 and not self.sp:
            parts.append("no-sp")
        if self.grad_fp32:
            parts.append("fp32-grads")
        if self.shard:
            parts.append(f"shard{self.shard}")
        if self.offload:
            parts.append("offload")
        return " ".join(parts)


@dataclass(frozen=True)
class LayoutResult:
    layout: Layout
    fits: bool
    memory: dict[str, float]  # bytes per device by kind (the fullest device)
    step_s: float  # training: one optimizer step; inference: time to first token
    parts_s: dict[str, float]  # where the step's time goes
    limit: str  # what limits it: memory, compute, tensor-parallel communication, bubble, ...
    mfu: float
    tokens_per_s: float  # training: trained tokens; inference: generated tokens, all devices
    cost_per_million_tokens: float
    microbatches: int = 1
    extra: dict[str, float] = field(default_factory=dict)  # inference: per-token figures
    stage_s: tuple[float, float] = (0.0, 0.0)  # training: one microbatch's forward and backward on a stage
    # low and high of step_s from the spreads this project measured (NOTE: [Bands] in
    # partitioner.cluster.engine); (0, 0): not computed, the point both ways
    band_s: tuple[float, float] = (0.0, 0.0)
    assumes: tuple[str, ...] = ()  # what the time assumes: the engine, its kernels, what overlaps, MFU's FLOPs
    # MFU with a causal model's attention FLOPs halved (the work a causal kernel does); ``mfu``
    # counts attention's whole s x s products, as traced and as torchtitan counts them
    mfu_causal: float = 0.0
    # ZeRO-Offload: the host memory a node needs (NOTE: [Host memory under ZeRO-Offload] in
    # partitioner.cluster.memory) and the node's host memory it was checked against; 0 without offload
    host_bytes: float = 0.0
    host_memory_bytes: float = 0.0

    @property
    def devices(self) -> int:
        return self.layout.devices

    @property
    def step_low_s(self) -> float:
        return self.band_s[0] if self.band_s[1] > 0 else self.step_s

    @property
    def step_high_s(self) -> float:
        return self.band_s[1] if self.band_s[1] > 0 else self.step_s

    def _rate_ends(self) -> tuple[float, float]:
        """(slow, fast) multipliers of a rate: training's follow the step, serving's the generated
        token's (its step is the time to the first token)."""
        if "seconds_per_token_high" in self.extra:
            t = self.extra["seconds_per_token"]
            return t / self.extra["seconds_per_token_high"], t / self.extra["seconds_per_token_low"]
        return self.step_s / self.step_high_s, self.step_s / self.step_low_s

    @property
    def mfu_band(self) -> tuple[float, float]:
        """(low, high) MFU: the high end is the fast end of the time's band."""
        slow, fast = self._rate_ends()
        return self.mfu * slow, self.mfu * fast

    @property
    def tokens_per_s_band(self) -> tuple[float, float]:
        slow, fast = self._rate_ends()
        return self.tokens_per_s * slow, self.tokens_per_s * fast

    def overlaps(self, other: "LayoutResult") -> bool:
        """Whether the two steps' bands overlap: neither answer is surely faster."""
        return self.step_low_s <= other.step_high_s and other.step_low_s <= self.step_high_s

    @property
    def memory_bytes(self) -> float:
        return sum(self.memory.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout.__dict__,
            "label": self.layout.label(),
            "devices": self.devices,
            "fits": self.fits,
            "memory_bytes": self.memory,
            "step_s": self.step_s,
            "parts_s": self.parts_s,
            "limit": self.limit,
            "mfu": self.mfu,
            "tokens_per_s": self.tokens_per_s,
            "cost_per_million_tokens": self.cost_per_million_tokens,
            "microbatches": self.microbatches,
            "stage_forward_s": self.stage_s[0],
            "stage_backward_s": self.stage_s[1],
            "step_low_s": self.step_low_s,
            "step_high_s": self.step_high_s,
            "mfu_causal": self.mfu_causal or self.mfu,
            "mfu_low": self.mfu_band[0],
            "mfu_high": self.mfu_band[1],
            "assumes": list(self.assumes),
            **({"inference": self.extra} if self.extra else {}),
            **(
                {"host_bytes_per_node": self.host_bytes, "host_memory_bytes_per_node": self.host_memory_bytes}
                if self.layout.offload
                else {}
            ),
        }
