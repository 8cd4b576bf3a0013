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
from partitioner.pipeline.schedules import Action, ActionKind, actions, stages_per_rank, virtual_stages

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
    # The most a rank holds at once over all its stages, in microbatches of the rank's whole share
    # (its stages counted as equal parts): 1F1B's min(m, pp - rank); interleaved 1F1B's first rank
    # pp (1 + (pp - 1) / (pp v)) (NOTE: [Interleaved stash]).
    rank_peak_stash: tuple[float, ...] = ()
    # Split backward (zero-bubble): the most microbatches a rank has run the input-gradient step
    # of and not yet the weight-gradient step, in microbatches of its whole share: their weight
    # products' inputs are held until W runs (NOTE: [Weight-gradient stash] in
    # partitioner.cluster.engine). 0 without a split backward.
    rank_peak_pending_weight: tuple[float, ...] = ()


def _typed(lists: Sequence[Sequence[Action]]) -> list[list[Action]]:
    """The action lists as :class:`Action` records (plain ``(stage, kind, mb)`` tuples read)."""
    try:
        return [[Action(int(s), ActionKind(k), int(mb)) for s, k, mb in acts] for acts in lists]
    except ValueError:
        raise PartitionError(
            "an action is (stage, kind, microbatch) with kind F, B, I or W; check the action lists"
        ) from None


_Key = tuple[int, ActionKind, int]


class _Replay:
    """The state of one simulation: which rank runs each stage, when each action ended, each
    rank's clock and busy time, and each stage's stash."""

    def __init__(
        self,
        lists: list[list[Action]],
        forward_s: Sequence[float],
        backward_s: Sequence[float],
        transfer_s: Sequence[float] | float,
        split_backward: float,
    ) -> None:
        self.lists, self.forward_s, self.backward_s, self.split = lists, forward_s, backward_s, split_backward
        self.stages = len(forward_s)
        self.comm = (
            [float(transfer_s)] * max(0, self.stages - 1) if isinstance(transfer_s, (int, float)) else list(transfer_s)
        )
        self.rank_of = {s: r for r, acts in enumerate(lists) for s, _, _ in acts}
        # The backward kind (B, or I when split) each (stage, microbatch) runs.
        self.backward_kind = {(s, mb): k for acts in lists for s, k, mb in acts if k in (ActionKind.B, ActionKind.I)}
        self.done: dict[_Key, float] = {}
        self.free = [0.0] * len(lists)
        self.busy = [0.0] * len(lists)
        self.timeline: list[Event] = []
        self.stash = [0] * self.stages
        self.peak = [0] * self.stages
        self.rank_held = [0] * len(lists)  # stage-microbatches a rank holds now, all its stages together
        self.rank_peak = [0] * len(lists)
        self.pending_w = [0] * len(lists)  # stage-microbatches past I and before W (split backward)
        self.pending_peak = [0] * len(lists)

    def duration(self, s: int, kind: ActionKind) -> float:
        if kind == ActionKind.F:
            return float(self.forward_s[s])
        if kind == ActionKind.B:
            return float(self.backward_s[s])
        part = self.split if kind == ActionKind.I else 1.0 - self.split
        return float(self.backward_s[s]) * part

    def _hop(self, stage: int, r: int, boundary: int) -> float:
        """The transfer over ``boundary`` when ``stage`` runs on another rank than ``r``."""
        return self.comm[boundary] if self.rank_of.get(stage) != r else 0.0

    def needs(self, s: int, kind: ActionKind, mb: int, r: int) -> list[tuple[_Key, float]]:
        """The actions ``(s, kind, mb)`` on rank ``r`` waits for, each with the transfer after it."""
        deps: list[tuple[_Key, float]] = []
        if kind == ActionKind.F and s > 0:
            deps.append(((s - 1, ActionKind.F, mb), self._hop(s - 1, r, s - 1)))
        if kind in (ActionKind.B, ActionKind.I):
            deps.append(((s, ActionKind.F, mb), 0.0))
            after = self.backward_kind.get((s + 1, mb))
            if s < self.stages - 1 and after is not None:
                deps.append(((s + 1, after, mb), self._hop(s + 1, r, s)))
        if kind == ActionKind.W:
            deps.append(((s, ActionKind.I, mb), 0.0))
        return deps

    def ready(self, s: int, kind: ActionKind, mb: int, r: int) -> float | None:
        """When the inputs of the action are there, or None while one has not run."""
        t = 0.0
        for key, extra in self.needs(s, kind, mb, r):
            if key not in self.done:
                return None
            t = max(t, self.done[key] + extra)
        return t

    def run(self, r: int, action: Action, at: float) -> None:
        s, kind, mb = action
        start = max(self.free[r], at)
        end = start + self.duration(s, kind)
        self.done[(s, kind, mb)] = end
        self.free[r] = end
        self.busy[r] += end - start
        self.timeline.append(Event(r, s, kind, mb, start, end))
        if kind == ActionKind.F and (s, mb) in self.backward_kind:
            self.stash[s] += 1
            self.peak[s] = max(self.peak[s], self.stash[s])
            self.rank_held[r] += 1
            self.rank_peak[r] = max(self.rank_peak[r], self.rank_held[r])
        elif kind in (ActionKind.B, ActionKind.I):
            self.stash[s] -= 1
            self.rank_held[r] -= 1
            if kind == ActionKind.I:
                self.pending_w[r] += 1
                self.pending_peak[r] = max(self.pending_peak[r], self.pending_w[r])
        elif kind == ActionKind.W:
            self.pending_w[r] -= 1

    def rank_peaks(self) -> tuple[float, ...]:
        """Each rank's most stage-microbatches held at once over its stages' count (one when
        nothing is stashed: inference keeps a microbatch's working set only)."""
        if not self.backward_kind:
            return tuple(1.0 for _ in self.lists)
        stages = [len({a.stage for a in acts}) or 1 for acts in self.lists]
        return tuple(peak / n for peak, n in zip(self.rank_peak, stages))

    def pending_weight_peaks(self) -> tuple[float, ...]:
        """Each rank's most stage-microbatches awaiting their weight-gradient step, over its
        stages' count."""
        stages = [len({a.stage for a in acts}) or 1 for acts in self.lists]
        return tuple(peak / n for peak, n in zip(self.pending_peak, stages))

    def advance(self, r: int, nxt: list[int]) -> bool:
        """Run rank ``r``'s next actions while their inputs are there; whether any ran."""
        acts, ran = self.lists[r], False
        while nxt[r] < len(acts):
            t = self.ready(*acts[nxt[r]], r)
            if t is None:
                break
            self.run(r, acts[nxt[r]], t)
            nxt[r] += 1
            ran = True
        return ran

    def replay(self) -> None:
        nxt = [0] * len(self.lists)
        left = sum(len(a) for a in self.lists)
        while sum(nxt) < left:
            if not any([self.advance(r, nxt) for r in range(len(self.lists))]):
                raise PartitionError(
                    "the schedule's actions wait on each other in a circle; check the "
                    "action lists (every backward needs its forward first)"
                )


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
    sim = _Replay(_typed(lists), forward_s, backward_s, transfer_s, split_backward)
    sim.replay()
    step = max(sim.free) if sim.free else 0.0
    bubble = 1.0 - sum(sim.busy) / (len(sim.lists) * step) if step > 0 else 0.0
    peaks = tuple(sim.peak) if sim.backward_kind else tuple(1 for _ in range(sim.stages))
    return Simulation(
        schedule,
        microbatches,
        step,
        bubble,
        tuple(step - b for b in sim.busy),
        peaks,
        tuple(sorted(sim.timeline, key=lambda e: (e.rank, e.start_s))),
        sim.rank_peaks(),
        sim.pending_weight_peaks(),
    )


def simulate(
    forward_s: Sequence[float],
    microbatches: int,
    schedule: str = "gpipe",
    backward_s: Sequence[float] | None = None,
    transfer_s: Sequence[float] | float = 0.0,
    training: bool = True,
    virtual: int | None = None,
) -> Simulation:
    """Simulate ``schedule`` with ``forward_s[s]`` seconds per microbatch on stage ``s`` (one stage
    per rank; ``v`` consecutive entries per rank for interleaved schedules, which need
    ``len(forward_s)`` divisible by their stages per rank: torch's class's count, or ``virtual``
    where the schedule lets a layout choose it). Backward defaults to twice the forward (matmuls:
    gradients for inputs and for weights). Microbatch counts follow torch's schedule classes (see
    NOTE: [Microbatch counts torch accepts]): :class:`MicrobatchError`."""
    if microbatches < 1:
        raise PartitionError(f"microbatches must be >= 1 (got {microbatches})")
    if not forward_s or any(not f >= 0 for f in forward_s):
        raise PartitionError("forward_s needs one non-negative time per stage")
    per_rank = stages_per_rank(schedule) if virtual is None else virtual_stages(schedule, virtual)
    stages = len(forward_s)
    if stages % per_rank:
        raise PartitionError(
            f"{schedule} runs {per_rank} stages per rank: give a multiple of {per_rank} stage times (got {stages})"
        )
    ranks = stages // per_rank
    backward = list(backward_s) if backward_s is not None else [2.0 * f for f in forward_s]
    lists = actions(schedule, ranks, microbatches, training, virtual)
    return simulate_actions(lists, forward_s, backward, transfer_s, schedule, microbatches)
