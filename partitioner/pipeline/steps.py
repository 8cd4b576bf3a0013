"""The step of a pipeline schedule with equal stages, as the cluster planner and the composed
runs' prediction ask for it: the one formula (:func:`step_slots`, read by :func:`closed_form`;
GPipe, 1F1B, interleaved 1F1B, zero-bubble bounded by it), checked against the Pipeline page's
simulator by the tests, and :func:`step_simulator`, which answers from the closed form or the
simulator and caches. Torch-free."""

from __future__ import annotations

from partitioner.pipeline.schedules import StepForm, check_microbatches, get_schedule, virtual_stages
from partitioner.pipeline.simulate import simulate

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
                out = simulate(
                    [1.0 / chunks] * (pp * chunks), m, schedule, backward_s=[ratio / chunks] * (pp * chunks), virtual=v
                )
                self._cache[key] = (out.step_time_s, out.bubble_fraction, out.rank_peak_stash[0])
                self._pending[key] = out.rank_peak_pending_weight[0] if out.rank_peak_pending_weight else 0.0
            else:
                self._cache[key] = closed_form(schedule, pp, m, ratio, v)
                # torch's zero-bubble order leaves one chunk's microbatch awaiting its W on the first
                # rank at most (the simulator's figure at every count it runs): 1 / chunks
                self._pending[key] = 1.0 / chunks if get_schedule(schedule).step_form == StepForm.BOUND else 0.0
        return self._cache[key]

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
