"""Event simulation of a pipeline schedule over per-rank action lists.

Each rank runs its actions in order; an action starts when its rank is free and its inputs are
ready: a forward needs the previous stage's forward of the same microbatch (plus the transfer
when another rank ran it); a backward needs its own forward and the next stage's backward (plus
the transfer back); a weight-gradient step needs its input-gradient step. Gives the step time,
the bubble fraction (idle share of ranks x step time), each rank's idle time and each stage's
peak count of stashed microbatches (forwards whose backward has not run). Exact for the model
it states; p = 8, m = 64 takes milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import Action, ActionKind, actions, stages_per_rank

__all__ = ["Simulation", "Event", "simulate", "simulate_actions"]


class Event(NamedTuple):
    """One action as it ran in the simulation."""

    rank: int
    stage: int
    kind: ActionKind
    microbatch: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Simulation:
    schedule: str
    microbatches: int
    step_time_s: float
    bubble_fraction: float  # 1 - busy time / (ranks x step time)
    rank_idle_s: tuple[float, ...]
    stage_peak_stash: tuple[int, ...]  # microbatches whose activations a stage holds at once, at most
    timeline: tuple[Event, ...]  # by rank, then start


def simulate_actions(
    lists: Sequence[Sequence[Action]],
    forward_s: Sequence[float],
    backward_s: Sequence[float],
    transfer_s: Sequence[float] | float = 0.0,
    schedule: str = "custom",
    microbatches: int = 0,
    split_backward: float = 0.5,
) -> Simulation:
    """Simulate ``lists`` (one per rank); ``forward_s``/``backward_s`` per stage and microbatch;
    ``transfer_s`` per stage boundary (stage s to s + 1) and microbatch. ``I`` and ``W`` take
    ``split_backward`` and the rest of a backward. Actions may be plain ``(stage, kind, mb)``
    tuples. O(actions x ranks)."""
    try:
        lists = [[Action(int(s), ActionKind(k), int(mb)) for s, k, mb in acts] for acts in lists]
    except ValueError:
        raise PartitionError(
            "an action is (stage, kind, microbatch) with kind F, B, I or W; check the action lists"
        ) from None
    stages = len(forward_s)
    comm = [float(transfer_s)] * max(0, stages - 1) if isinstance(transfer_s, (int, float)) else list(transfer_s)
    rank_of = {}
    for r, acts in enumerate(lists):
        for s, _, _ in acts:
            rank_of[s] = r
    done: dict[tuple[int, ActionKind, int], float] = {}
    free = [0.0] * len(lists)
    nxt = [0] * len(lists)
    busy = [0.0] * len(lists)
    timeline: list[Event] = []
    total = sum(len(a) for a in lists)
    has_b = {(s, mb) for acts in lists for s, k, mb in acts if k in (ActionKind.B, ActionKind.I)}

    def duration(s: int, kind: ActionKind) -> float:
        if kind == ActionKind.F:
            return float(forward_s[s])
        if kind == ActionKind.B:
            return float(backward_s[s])
        part = split_backward if kind == ActionKind.I else 1.0 - split_backward
        return float(backward_s[s]) * part

    def ready(s: int, kind: ActionKind, mb: int, r: int) -> float | None:
        deps: list[tuple[tuple[int, ActionKind, int], float]] = []
        if kind == ActionKind.F and s > 0:
            deps.append(((s - 1, ActionKind.F, mb), comm[s - 1] if rank_of.get(s - 1) != r else 0.0))
        if kind in (ActionKind.B, ActionKind.I):
            deps.append(((s, ActionKind.F, mb), 0.0))
            if s < stages - 1 and (s + 1, mb) in has_b:
                after = (
                    ActionKind.B
                    if (s + 1, ActionKind.B, mb) in done or _kind_of(s + 1, mb) == ActionKind.B
                    else ActionKind.I
                )
                key = (s + 1, after, mb)
                deps.append((key, comm[s] if rank_of.get(s + 1) != r else 0.0))
        if kind == ActionKind.W:
            deps.append(((s, ActionKind.I, mb), 0.0))
        t = 0.0
        for key, extra in deps:
            if key not in done:
                return None
            t = max(t, done[key] + extra)
        return t

    kinds_at: dict[tuple[int, int], ActionKind] = {}
    for acts in lists:
        for s, k, mb in acts:
            if k in (ActionKind.B, ActionKind.I):
                kinds_at[(s, mb)] = k

    def _kind_of(s: int, mb: int) -> ActionKind:
        return kinds_at.get((s, mb), ActionKind.B)

    stash = [0] * stages
    peak = [0] * stages
    scheduled = 0
    while scheduled < total:
        progressed = False
        for r, acts in enumerate(lists):
            while nxt[r] < len(acts):
                s, kind, mb = acts[nxt[r]]
                t = ready(s, kind, mb, r)
                if t is None:
                    break
                start = max(free[r], t)
                end = start + duration(s, kind)
                done[(s, kind, mb)] = end
                free[r] = end
                busy[r] += end - start
                timeline.append(Event(r, s, kind, mb, start, end))
                if kind == ActionKind.F and (s, mb) in has_b:
                    stash[s] += 1
                    peak[s] = max(peak[s], stash[s])
                elif kind in (ActionKind.B, ActionKind.I):
                    stash[s] -= 1
                nxt[r] += 1
                scheduled += 1
                progressed = True
        if not progressed:
            raise PartitionError(
                "the schedule's actions wait on each other in a circle; check the "
                "action lists (every backward needs its forward first)"
            )
    step = max(free) if free else 0.0
    bubble = 1.0 - sum(busy) / (len(lists) * step) if step > 0 else 0.0
    peaks = tuple(peak) if has_b else tuple(1 for _ in range(stages))
    return Simulation(
        schedule,
        microbatches,
        step,
        bubble,
        tuple(step - b for b in busy),
        peaks,
        tuple(sorted(timeline, key=lambda e: (e.rank, e.start_s))),
    )


def simulate(
    forward_s: Sequence[float],
    microbatches: int,
    schedule: str = "gpipe",
    backward_s: Sequence[float] | None = None,
    transfer_s: Sequence[float] | float = 0.0,
    training: bool = True,
) -> Simulation:
    """Simulate ``schedule`` with ``forward_s[s]`` seconds per microbatch on stage ``s`` (one stage
    per rank; ``v`` consecutive entries per rank for interleaved schedules, which need
    ``len(forward_s)`` divisible by their stages per rank). Backward defaults to twice the
    forward (matmuls: gradients for inputs and for weights). Microbatch counts follow torch's
    schedule classes (see NOTE: [Microbatch counts torch accepts]): :class:`MicrobatchError`."""
    if microbatches < 1:
        raise PartitionError(f"microbatches must be >= 1 (got {microbatches})")
    if not forward_s or any(not f >= 0 for f in forward_s):
        raise PartitionError("forward_s needs one non-negative time per stage")
    per_rank = stages_per_rank(schedule) if schedule in ("interleaved_1f1b", "zero_bubble") else 1
    stages = len(forward_s)
    if stages % per_rank:
        raise PartitionError(
            f"{schedule} runs {per_rank} stages per rank: give a multiple of {per_rank} stage times (got {stages})"
        )
    ranks = stages // per_rank
    backward = list(backward_s) if backward_s is not None else [2.0 * f for f in forward_s]
    lists = actions(schedule, ranks, microbatches, training)
    return simulate_actions(lists, forward_s, backward, transfer_s, schedule, microbatches)
