"""The step of a pipeline schedule with equal stages, as the cluster planner and the composed
runs' prediction ask for it: the one formula (:func:`step_slots`, read by :func:`closed_form`;
GPipe, 1F1B, interleaved 1F1B, zero-bubble bounded by it), checked against the Pipeline page's
simulator by the tests, and :func:`step_simulator`, which answers from the closed form or the
simulator and caches. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from partitioner.pipeline.schedules import (
    ActionKind,
    StepForm,
    actions,
    check_microbatches,
    get_schedule,
    virtual_stages,
)
from partitioner.pipeline.simulator import _Replay, simulate

__all__ = ["closed_form", "rank_stash", "step_slots", "step_simulator", "SIMULATE_UP_TO", "StepSimulator"]

# Interleaved and zero-bubble schedules are simulated up to this many stage-microbatches (pp x m);
# beyond it they take the closed form.
SIMULATE_UP_TO = 256


def step_slots(schedule: str, pp: int, m: int, v: int = 2) -> float:
    """The step of ``schedule`` over ``pp`` equal stages and ``m`` microbatches, in slots of one
    microbatch's forward and backward on one stage. Flush schedules (GPipe, 1F1B): m + pp - 1
    (Huang et al. 2019; Narayanan et al. 2021). Interleaved 1F1B with ``v`` chunks a rank:
    max(m, pp) + (min(m, pp) - 1) / v (the bubble shrinks by v: Narayanan et al. 2021, sec.
    2.2.2); zero-bubble schedules are bounded by it with torch's 2 chunks. O(1)."""
    s = get_schedule(schedule)
    if s.step_form == StepForm.FLUSH:
        return float(m + pp - 1)
    v = virtual_stages(schedule, v)
    return max(m, pp) + (min(m, pp) - 1) / v


def rank_stash(schedule: str, pp: int, m: int, v: int = 2) -> float:
    """The most microbatches the first pipeline rank holds at once, in microbatches of its whole
    share of the layers, in torch's order (NOTE: [Interleaved stash]): GPipe m, 1F1B min(m, pp);
    interleaved 1F1B with ``v`` chunks a rank m below 2 pp, else pp (1 + (pp - 1) / (pp v)) plus
    (v - 1) / v for each microbatch a round holds over pp (Korthikanti et al. 2022; Megatron-LM's
    ``interleaved_schedule_memory_penalty`` when pp divides m); zero-bubble m up to pp, else the
    mean of pp and a round's microbatches (pp when pp divides m: ZB-H1's 1F1B memory). O(1)."""
    s = get_schedule(schedule)
    if s.step_form == StepForm.FLUSH:
        return float(m if s.forwards_first else min(m, pp))
    per_round = m / max(1, m // pp)  # torch's rounds of about pp microbatches (m a multiple of them)
    if not s.choose_virtual:  # zero-bubble: torch's 2 stages a rank
        return float(m) if m <= pp else (per_round + pp) / 2
    v = virtual_stages(schedule, v)
    if m < 2 * pp:
        return float(m)
    return pp + (pp - 1) / v + (per_round - pp) * (v - 1) / v


# NOTE: [Interleaved stash]
# A rank of interleaved 1F1B holds v chunks; in torch's order (ScheduleInterleaved1F1B, replayed by
# the simulator) its first chunk stashes up to 2 pp microbatches and its last up to pp, at
# different times. The memory that counts is the rank's, all chunks together: the simulator
# tracks it (``Simulation.rank_peak_stash``, in microbatches of the rank's whole share), and for
# pp dividing m >= 2 pp it is pp (1 + (pp - 1) / (pp v)) on the first rank, the factor Korthikanti
# et al. 2022 give and Megatron-LM's ``theoretical_memory_usage`` applies. Charging every chunk
# its own peak (2 pp, or v pp) over-counts by 45 % at pp = 4, v = 2 and 3.3x at pp = 8, v = 4.
# Below 2 pp microbatches torch runs one round, all forwards first: m. torch's zero-bubble order
# holds 1F1B's pp when pp divides m. :func:`rank_stash` writes both as closed forms, equal to the
# simulator's figure at every count torch accepts (the tests check pp 2-8, v 2-4, m up to 4 pp).


def closed_form(schedule: str, pp: int, m: int, ratio: float, v: int = 2) -> tuple[float, float, float]:
    """(step, bubble fraction, the first rank's peak stash) of ``schedule`` with ``pp`` equal stages
    of forward 1 and backward ``ratio`` and ``m`` microbatches: the step is :func:`step_slots`
    times (1 + ratio); GPipe's bubble is (pp - 1) / (m + pp - 1); the stash is
    :func:`rank_stash`. The tests check these against the simulator, which the search uses up to
    :data:`SIMULATE_UP_TO` (zero-bubble schedules beyond it take interleaved 1F1B's figures: an
    upper bound on their step, whose split backward fills the bubble)."""
    step = step_slots(schedule, pp, m, v) * (1 + ratio)
    bubble = 1 - m * (1 + ratio) / step
    return step, bubble, rank_stash(schedule, pp, m, v)


class StepSimulator:
    """``sim(schedule, pp, m, backward_ratio, v=2)`` -> (step, bubble fraction, the first rank's
    peak stash) of ``schedule`` with ``pp`` unit forward stages, ``m`` microbatches and ``v``
    chunks a rank where the schedule lets a layout choose: GPipe and 1F1B from the closed form
    (the simulator's figures exactly, tested); the others simulated up to :data:`SIMULATE_UP_TO`
    stage-microbatches, each once. :meth:`check` refuses what torch's classes refuse."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int, int, float, int], tuple[float, float, float]] = {}
        self._pending: dict[tuple[str, int, int, float, int], float] = {}
        self._orders: dict[tuple[str, int, int, int], _Order | None] = {}  # by (schedule, pp, m, chunks)

    @staticmethod
    def check(schedule: str, pp: int, m: int) -> None:
        """:class:`MicrobatchError` for ``m`` microbatches torch's class for ``schedule`` refuses."""
        check_microbatches(schedule, pp, m)

    def __call__(self, schedule: str, pp: int, m: int, ratio: float, v: int = 2) -> tuple[float, float, float]:
        if get_schedule(schedule).step_form == StepForm.FLUSH:
            check_microbatches(schedule, pp, m)  # what torch's class refuses, the simulator refuses
            return closed_form(schedule, pp, m, ratio)
        # Beyond 8 stage-microbatches: the backward-to-forward ratio to 2 significant digits
        # (2.37 -> 2.4), so each is simulated once for the ratios a search meets (within 2 % of
        # the step), not once for each layout (recomputation's choices make many).
        ratio = _rounded(pp, m, ratio)
        chunks = virtual_stages(schedule, v)
        key = (schedule, pp, m, ratio, chunks)
        if key not in self._cache:
            if pp * m <= SIMULATE_UP_TO:
                lists = (schedule, pp, m, chunks)
                if lists not in self._orders:
                    self._orders[lists] = _replay_order(schedule, pp, m, v)
                order = self._orders[lists]
                if order is not None:  # the order replayed at this ratio (NOTE: [Replaying one order])
                    self._cache[key] = order.step(1.0 / chunks, ratio / chunks)
                    self._pending[key] = order.pending
                else:
                    out = simulate(
                        [1.0 / chunks] * (pp * chunks),
                        m,
                        schedule,
                        backward_s=[ratio / chunks] * (pp * chunks),
                        virtual=v,
                    )
                    self._cache[key] = (out.step_time_s, out.bubble_fraction, out.rank_peak_stash[0])
                    self._pending[key] = out.rank_peak_pending_weight[0] if out.rank_peak_pending_weight else 0.0
            else:
                self._cache[key] = closed_form(schedule, pp, m, ratio, v)
                # torch's zero-bubble order leaves one chunk's microbatch awaiting its W on the first
                # rank at most (the simulator's figure at every count it runs): 1 / chunks
                self._pending[key] = 1.0 / chunks if get_schedule(schedule).step_form == StepForm.BOUND else 0.0
        return self._cache[key]

    def stash(self, schedule: str, pp: int, m: int, v: int = 2) -> tuple[float, float]:
        """(the first rank's peak stash, :meth:`pending_weight`) as :meth:`__call__` gives them at
        any backward ratio: the order the simulator runs the actions in, and so what it holds, does
        not depend on the durations (NOTE: [Replaying one order]). Cached."""
        s = get_schedule(schedule)
        if s.step_form == StepForm.FLUSH:
            check_microbatches(schedule, pp, m)
            return rank_stash(schedule, pp, m), 0.0
        chunks = virtual_stages(schedule, v)
        if pp * m > SIMULATE_UP_TO:
            return rank_stash(schedule, pp, m, v), 1.0 / chunks if s.step_form == StepForm.BOUND else 0.0
        key = (schedule, pp, m, chunks)
        if key not in self._orders:
            self._orders[key] = _replay_order(schedule, pp, m, v)
        order = self._orders[key]
        if order is None:
            return self(schedule, pp, m, 2.0, v)[2], self.pending_weight(schedule, pp, m, 2.0, v)
        return order.stash, order.pending

    def pending_weight(self, schedule: str, pp: int, m: int, ratio: float, v: int = 2) -> float:
        """The first rank's most microbatches (of its whole share) past their input-gradient step
        and awaiting the weight-gradient step, under a split backward; 0 for the others. Asks
        :meth:`__call__` first (cached)."""
        if get_schedule(schedule).step_form == StepForm.FLUSH:
            return 0.0
        self(schedule, pp, m, ratio, v)
        ratio = _rounded(pp, m, ratio)
        return self._pending[(schedule, pp, m, ratio, virtual_stages(schedule, v))]


def _rounded(pp: int, m: int, ratio: float) -> float:
    """The ratio a simulation is cached under: to 2 significant digits beyond 8 stage-microbatches."""
    return float(f"{ratio:.2g}") if pp * m > 8 else ratio


def step_simulator() -> StepSimulator:
    """A fresh :class:`StepSimulator` (its own cache)."""
    return StepSimulator()


# NOTE: [Replaying one order]
# The simulator (:func:`partitioner.pipeline.simulator.simulate_actions`) runs each rank's actions in
# list order, an action once every action it waits on has run: the order it processes them in, and
# so the stash it counts, depend on the action lists alone, not on the durations. A search asks for
# the same lists at many backward-to-forward ratios (each layout's compute gives its own): the
# order, its waits and the first rank's stash are taken once from one replay (:func:`_replay_order`),
# and each ratio replays only the times, with the simulator's own operations in its order (start =
# the later of the rank free and the latest input done; end = start + duration; the rank's busy time
# summed in its list order), so the step and bubble are the simulator's to the bit (a test holds
# them equal).

_SPLIT = 0.5  # the simulator's share of a split backward taken by the input-gradient step


@dataclass(frozen=True)
class _Order:
    """One replay's order: each action's rank, kind and the positions of the actions it waits on;
    the first rank's peak stash and pending weight-gradient microbatches (duration-free)."""

    ranks: int
    steps: tuple[tuple[int, ActionKind, tuple[int, ...]], ...]
    stash: float
    pending: float

    def step(self, forward: float, backward: float) -> tuple[float, float, float]:
        """(step, bubble fraction, the first rank's peak stash) with every stage's forward
        ``forward`` and backward ``backward`` a microbatch, no transfer: the simulator's figures."""
        durations = {
            ActionKind.F: forward,
            ActionKind.B: backward,
            ActionKind.I: backward * _SPLIT,
            ActionKind.W: backward * (1.0 - _SPLIT),
        }
        free = [0.0] * self.ranks
        busy = [0.0] * self.ranks
        end: list[float] = []
        for r, kind, deps in self.steps:
            at = 0.0
            for d in deps:
                at = max(at, end[d])
            start = max(free[r], at)
            done = start + durations[kind]
            end.append(done)
            free[r] = done
            busy[r] += done - start
        step = max(free) if free else 0.0
        bubble = 1.0 - sum(busy) / (self.ranks * step) if step > 0 else 0.0
        return step, bubble, self.stash


def _replay_order(schedule: str, pp: int, m: int, v: int) -> _Order | None:
    """The order the simulator runs ``schedule``'s actions in over ``pp`` ranks and ``m``
    microbatches (NOTE: [Replaying one order]); None where an action repeats (the simulator is then
    asked directly). O(actions x ranks), once per lists."""
    chunks = virtual_stages(schedule, v)
    lists = actions(schedule, pp, m, True, v)
    stages = pp * chunks
    replay = _Replay(lists, [1.0] * stages, [2.0] * stages, 0.0, _SPLIT)
    replay.replay()
    index = {(e.stage, e.kind, e.microbatch): i for i, e in enumerate(replay.timeline)}
    if len(index) != len(replay.timeline) or len(replay.free) != pp:
        return None
    steps = tuple(
        (e.rank, e.kind, tuple(index[k] for k, _ in replay.needs(e.stage, e.kind, e.microbatch, e.rank)))
        for e in replay.timeline
    )
    pending = replay.pending_weight_peaks()
    return _Order(pp, steps, replay.rank_peaks()[0], pending[0] if pending else 0.0)
