"""Pipeline stages: contiguous cuts of the traced graph along its topological order, their costs,
and the split that minimises the bottleneck stage under each device's memory.

# NOTE: [What is exact]
The split is an exact dynamic program over cut points for the bottleneck objective (the
slowest stage's forward + backward per microbatch plus its outgoing transfer), under each
stage's memory: parameters (with gradients and optimizer state when training) plus the
activations it stashes for the microbatches in flight, which the schedule fixes (GPipe holds
all m, 1F1B at most p - stage). The step time is then simulated; minimising the bottleneck is
the standard proxy for it (the bubble term depends only on p and m for equal stages), not a
proof that no other split simulates faster: the fill and drain count every stage, so with few
microbatches a split with a slower bottleneck can finish sooner. The plan is therefore the
fastest by simulated step of the bottleneck-exact split and the simple splits people use
(equal layers, by parameters) that fit, and never slower than those. O(k n^2) for n ops and k stages, vectorised over
the last stage's start (numpy): 5,000 operations into 8 stages in seconds.

# NOTE: [A pipeline on a measured profile]
With a device profile (``partition-explorer calibrate``) each op is priced at one microbatch's
size (its FLOPs and activations over m, its weights and its dispatch overhead whole: a
microbatch pays every op's overhead again), times the profile's slowdown for the ranks that
compute at once (the stages, at most m of them); each action of the schedule (a microbatch's
forward, or backward, on a stage) costs what the profile measured one of torch's pipelining
actions to cost beyond its compute, its send included; a stage boundary adds its bytes over the
measured bandwidth (and the point-to-point latency when no action was measured).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from partitioner.accelerator.api import resolve_transfer_rate
from partitioner.cost.training import OPTIMIZERS
from partitioner.devices import Device
from partitioner.errors import InfeasibleError, PartitionError
from partitioner.graph import Graph
from partitioner.pipeline.simulator import simulate
from partitioner.pipeline.stage_costs import StageCosts, stage_costs

BOTTLENECK_NOTE = (
    "a split shown faster than this one does not fit the devices' memory: this split is the "
    "fastest that fits of the bottleneck-exact one and the simple ones"
)

if TYPE_CHECKING:
    from partitioner.plan.records import Plan

__all__ = ["PipelinePlan", "plan", "MAX_MICROBATCHES"]

# The simulation holds every action of every rank, so its time and memory grow with ranks x
# microbatches (measured here: 1,024 microbatches plan in 1-11 s, 4,096 take 7-130 s, and 10,000,000
# took 234 s and 8.6 GB before this cap); the app's field stops at the same number.
MAX_MICROBATCHES = 1024

# Splits into stages sharing devices are all tried when there are at most this many
# (NOTE: [Stages sharing a device]).
EVERY_SPLIT_UP_TO = 20_000


@dataclass(frozen=True)
class PipelinePlan:
    stages: tuple[tuple[str, ...], ...]  # node names per stage, in order
    device_ids: tuple[int, ...]  # the device of each stage
    schedule: str
    microbatches: int
    training: str | None
    stage_forward_s: tuple[float, ...]  # per microbatch
    stage_backward_s: tuple[float, ...]
    stage_transfer_s: tuple[float, ...]  # stage s to s + 1, per microbatch
    stage_memory_bytes: tuple[int, ...]
    stage_stash_bytes: tuple[int, ...]  # the activations part of stage_memory_bytes
    step_time_s: float
    bubble_fraction: float
    baselines: tuple[tuple[str, float, tuple[int, ...]], ...]  # (name, step time, stage sizes)
    model: str = ""
    graph_fingerprint: str = ""

    def device_memory_bytes(self) -> dict[int, int]:
        """Each device's stages together (interleaved schedules put several on one), by logical
        id: their peaks added (NOTE: [Stages sharing a device])."""
        held: dict[int, int] = {}
        for d, b in zip(self.device_ids, self.stage_memory_bytes):
            held[d] = held.get(d, 0) + b
        return held

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kind"] = "pipeline"
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PipelinePlan":
        """Read :meth:`to_dict`'s JSON back; raises :class:`PartitionError` naming what is wrong."""
        if not isinstance(data, Mapping) or data.get("kind") != "pipeline":
            raise PartitionError('not a pipeline plan (its JSON has no "kind": "pipeline")')
        try:
            return cls(
                stages=tuple(tuple(str(n) for n in s) for s in data["stages"]),
                device_ids=tuple(int(d) for d in data["device_ids"]),
                schedule=str(data["schedule"]),
                microbatches=int(data["microbatches"]),
                training=data.get("training"),
                stage_forward_s=tuple(float(x) for x in data["stage_forward_s"]),
                stage_backward_s=tuple(float(x) for x in data["stage_backward_s"]),
                stage_transfer_s=tuple(float(x) for x in data["stage_transfer_s"]),
                stage_memory_bytes=tuple(int(x) for x in data["stage_memory_bytes"]),
                stage_stash_bytes=tuple(int(x) for x in data["stage_stash_bytes"]),
                step_time_s=float(data["step_time_s"]),
                bubble_fraction=float(data["bubble_fraction"]),
                baselines=tuple((str(n), float(t), tuple(int(x) for x in sizes)) for n, t, sizes in data["baselines"]),
                model=str(data.get("model", "")),
                graph_fingerprint=str(data.get("graph_fingerprint", "")),
            )
        except KeyError as exc:
            raise PartitionError(f"the pipeline plan lacks its {exc.args[0]!r} field") from None
        except (TypeError, ValueError) as exc:
            raise PartitionError(f"the pipeline plan has a malformed field: {exc}") from None

    def as_plan(
        self, graph: Graph, devices: Sequence[Device], transfer_rate_bytes_per_s: float | None = None
    ) -> "Plan":
        """The stages as a :class:`~partitioner.plan.Plan` (one partition per stage, on its
        device; one forward pass, no microbatches): the DAG, memory and export views of any
        plan apply to it."""
        from partitioner.accelerator.api import evaluate_plan

        mapping = {name: s for s, names in enumerate(self.stages) for name in names}
        return evaluate_plan(
            graph,
            devices,
            mapping,
            {s: [d] for s, d in enumerate(self.device_ids)},
            transfer_rate_bytes_per_s=transfer_rate_bytes_per_s,
            keep_ids=True,
            mode=f"pipeline {self.schedule}",
        )


def _check_request(
    graph: Graph, devices: Sequence[Device], stages: int, microbatches: int, training: str | None
) -> None:
    if training is not None and training not in OPTIMIZERS:
        raise PartitionError(
            f"training must be None (inference) or an optimizer, one of {', '.join(OPTIMIZERS)} (got {training!r})"
        )
    if microbatches < 1 or stages < 1:
        raise PartitionError(f"stages and microbatches must be >= 1 (got {stages}, {microbatches})")
    if microbatches > MAX_MICROBATCHES:
        raise PartitionError(
            f"microbatches must be at most {MAX_MICROBATCHES:,} (got {microbatches:,}): the schedule "
            "is simulated action by action; split the batch into fewer, larger microbatches"
        )
    n = len(graph.op_indices)
    if stages > n:
        raise PartitionError(f"{stages} stages need at least {stages} operations; the model has {n}")
    if not devices:
        raise PartitionError("a pipeline needs devices; e.g. parse_devices('4x16GiB')")


def _best_split(c: StageCosts, caps: Sequence[float], stages: int, n: int) -> list[int] | None:
    """The cut points minimising the bottleneck stage under each stage's memory; None when no split
    fits. The DP, vectorised over the start a of the last stage for each (stage count s, end b):
    the same float operations in the same order as the scalar recurrence
    best[s][b] = min over a of max(best[s-1][a], cost of ops a..b-1 as stage s-1) under the memory cap."""
    INF = math.inf
    F, B, P, A = (np.asarray(x, dtype=np.float64) for x in (c.fwd, c.bwd, c.params, c.acts))
    best = np.full((stages + 1, n + 1), INF)
    cut = np.full((stages + 1, n + 1), -1, dtype=np.int64)
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        cap = caps[s - 1]
        mult = c.stash[s - 1] if c.training else 1
        prev = best[s - 1]
        for b in range(s, n - (stages - s) + 1):
            a = np.arange(s - 1, b)
            out = c.comm[b - 1] if s - 1 < stages - 1 else 0.0
            cost = (F[b] - F[a]) + (B[b] - B[a]) + out
            weights = P[b] - P[a]
            for first, readers, w in c.shared:  # a weight read again after its first stage
                later = [r for r in readers if r < b]
                if later and later[-1] > first:
                    weights = weights + w * c.copies * ((a > first) & (a <= later[-1]))
            mem = np.floor(weights + (A[b] - A[a]) * mult)
            value = np.maximum(prev[a], cost)
            value[(mem > cap) | (prev[a] == INF)] = INF
            i = int(np.argmin(value))
            if value[i] < INF:
                best[s][b], cut[s][b] = value[i], a[i]
    if best[stages][n] == INF:
        return None
    bounds = [n]
    for s in range(stages, 0, -1):
        bounds.append(int(cut[s][bounds[-1]]))
    return bounds[::-1]


def _device_loads(c: StageCosts, bounds: Sequence[int], device_of: Sequence[Device]) -> dict[int, int]:
    """What each device holds, its stages' peaks added, by logical id, for the split at ``bounds``."""
    held: dict[int, int] = {}
    for s, (a, b) in enumerate(zip(bounds, bounds[1:])):
        held[device_of[s].logical_id] = held.get(device_of[s].logical_id, 0) + c.memory(a, b, s)
    return held


def _within_devices(c: StageCosts, bounds: Sequence[int], device_of: Sequence[Device]) -> bool:
    """Whether every device holds its stages together (interleaved schedules put several on one)."""
    held = _device_loads(c, bounds, device_of)
    return all(held[d.logical_id] <= d.memory_bytes for d in device_of)


def _split_within_devices(c: StageCosts, device_of: Sequence[Device], stages: int, n: int) -> list[int] | None:
    """The best split whose devices each hold all their stages (NOTE: [Stages sharing a device])."""
    bounds = _best_split(c, [d.memory_bytes for d in device_of], stages, n)
    if bounds is None or _within_devices(c, bounds, device_of):
        return bounds
    count = Counter(d.logical_id for d in device_of)
    used = [c.memory(a, b, s) for s, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    held = _device_loads(c, bounds, device_of)
    found = []
    for caps in (
        [d.memory_bytes * used[s] / held[d.logical_id] for s, d in enumerate(device_of)],  # the best split's shares
        [d.memory_bytes / count[d.logical_id] for d in device_of],  # equal shares
    ):
        split = _best_split(c, caps, stages, n)
        if split is not None:
            found.append(split)
    if not found and math.comb(n - 1, stages - 1) <= EVERY_SPLIT_UP_TO:  # small: every split tried
        every = ([0, *cuts, n] for cuts in itertools.combinations(range(1, n), stages - 1))
        found = [b for b in every if _within_devices(c, b, device_of)]
    return min(found, key=lambda b: _bottleneck(c, b)) if found else None


def _bottleneck(c: StageCosts, bounds: Sequence[int]) -> float:
    """The slowest stage's forward, backward and send of the split at ``bounds`` (what the DP minimises)."""
    spans = list(zip(bounds, bounds[1:]))
    return max(
        (c.fwd[b] - c.fwd[a]) + (c.bwd[b] - c.bwd[a]) + (c.comm[b - 1] if s < len(spans) - 1 else 0.0)
        for s, (a, b) in enumerate(spans)
    )


# NOTE: [Stages sharing a device]
# Interleaved and zero-bubble schedules put several stages on one device (stage s on device
# s mod len(devices)). The split is first found with each stage under its whole device; when a
# device's stages together then exceed it, it is found again with each stage under a share of its
# device (the shares the first split used, scaled to fit; then equal shares), the faster kept;
# when neither fits and the splits are few (EVERY_SPLIT_UP_TO), every split is tried. Every device
# then holds its stages; on a large model a split fitting only with other shares can be missed
# (the DP over contiguous spans bounds each stage, not sums over stages apart). A device's stages
# are counted at their peaks added: an upper bound on what it holds at once.


def _score(
    c: StageCosts, bounds: Sequence[int], m: int, schedule: str
) -> tuple[float, float, list[float], list[float], list[float]]:
    """(step time, bubble fraction, stage forwards, backwards, transfers) of the split at ``bounds``."""
    spans = list(zip(bounds, bounds[1:]))
    f = [c.fwd[b] - c.fwd[a] + c.action for a, b in spans]
    bk = [c.bwd[b] - c.bwd[a] + (c.action if c.training else 0.0) for a, b in spans]
    tr = [c.comm[b - 1] for b in bounds[1:-1]]
    sim = simulate(
        f, m, schedule, backward_s=bk if c.training else [0.0] * len(f), transfer_s=tr or 0.0, training=c.training
    )
    return sim.step_time_s, sim.bubble_fraction, f, bk, tr


def plan(
    graph: Graph,
    devices: Sequence[Device],
    stages: int = 4,
    microbatches: int = 8,
    schedule: str = "1f1b",
    training: str | None = None,
    transfer_rate_bytes_per_s: float | None = None,
    node_latency: Mapping[str, Sequence[float]] | None = None,
) -> PipelinePlan:
    """Cut ``graph`` into ``stages`` contiguous stages on ``devices`` (stage s on device s mod
    len(devices)) for ``schedule`` with ``microbatches``. ``training``: None for inference (the
    weights, no backward), else an optimizer of :data:`partitioner.cost.training.OPTIMIZERS`
    ("none": weights and gradients; NOTE: [Training state]). ``transfer_rate_bytes_per_s`` as in
    :func:`partitioner.partition`: a rate wins, None takes the slowest link the devices give (no
    link: transfers are free); a measured device profile's link wins over both. Raises
    :class:`InfeasibleError` when no split fits the devices' memory. O(k n^2)."""
    devices = list(devices)
    _check_request(graph, devices, stages, microbatches, training)
    rate = resolve_transfer_rate(devices, transfer_rate_bytes_per_s)
    m, n = microbatches, len(graph.op_indices)
    c = stage_costs(graph, devices, stages, m, schedule, training, rate, node_latency)
    device_of = [devices[s % len(devices)] for s in range(stages)]
    bounds = _split_within_devices(c, device_of, stages, n)
    if bounds is None:
        shared = len({d.logical_id for d in device_of})
        raise InfeasibleError(
            f"no split of {graph.name or 'the model'} into {stages} stages fits the devices' "
            f"memory with {m} microbatches of {schedule}"
            + (f" and {training} training state" if training is not None else "")
            + (f" ({stages} stages on {shared} devices: each holds its stages together)" if shared < stages else "")
            + "; add devices or memory, more stages, or fewer microbatches in flight"
        )
    step, bubble, f, bk, tr = _score(c, bounds, m, schedule)
    baselines = []
    own = [c.params[i + 1] - c.params[i] for i in range(n)]
    for name, other in (("equal layers", _equal_counts(n, stages)), ("by parameters", _by_weight(own, stages))):
        scored = _score(c, other, m, schedule)
        baselines.append((name, scored[0], tuple(b - a for a, b in zip(other, other[1:]))))
        fits = all(b > a for a, b in zip(other, other[1:])) and _within_devices(c, other, device_of)
        if fits and scored[0] < step:  # NOTE: [What is exact]: the simulated step decides
            bounds, (step, bubble, f, bk, tr) = list(other), scored
    names = [graph.nodes[v].name for v in graph.op_indices]
    spans = list(zip(bounds, bounds[1:]))
    return PipelinePlan(
        stages=tuple(tuple(names[a:b]) for a, b in spans),
        device_ids=tuple(d.logical_id for d in device_of),
        schedule=schedule,
        microbatches=m,
        training=training,
        stage_forward_s=tuple(f),
        stage_backward_s=tuple(bk),
        stage_transfer_s=tuple(tr),
        stage_memory_bytes=tuple(c.memory(a, b, s) for s, (a, b) in enumerate(spans)),
        stage_stash_bytes=tuple(
            int((c.acts[b] - c.acts[a]) * (c.stash[s] if c.training else 1)) for s, (a, b) in enumerate(spans)
        ),
        step_time_s=step,
        bubble_fraction=bubble,
        baselines=tuple(baselines),
        model=graph.name,
        graph_fingerprint=graph.fingerprint(),
    )


def _equal_counts(n: int, k: int) -> list[int]:
    """Cut points of an equal-layer split (what a hand split_spec every n/k blocks gives)."""
    return [round(i * n / k) for i in range(k + 1)]


def _by_weight(weights: Sequence[float], k: int) -> list[int]:
    """Cut points balancing the summed weights (DeepSpeed's ``partition_method="parameters"``)."""
    total = sum(weights) or 1.0
    cuts, run, i = [0], 0.0, 0
    for j in range(1, k):
        target = total * j / k
        while i < len(weights) - (k - j) and run + weights[i] <= target:
            run += weights[i]
            i += 1
        i = max(i, cuts[-1] + 1)
        cuts.append(i)
    cuts.append(len(weights))
    return cuts
