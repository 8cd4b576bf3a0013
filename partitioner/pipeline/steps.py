"""The step of a pipeline schedule with equal stages, as the cluster planner and the composed
runs' prediction ask for it: the one formula (:func:`step_slots`, read by :func:`closed_form`;
GPipe, 1F1B, interleaved 1F1B, zero-bubble bounded by it), checked against the Pipeline page's
simulator by the tests, and :func:`step_simulator`, which answers from the closed form or the
simulator and caches. Torch-free."""

from __future__ import annotations

from typing import Callable

from partitioner.pipeline.schedules import StepForm, check_microbatches, get_schedule, virtual_stages

__all__ = ["closed_form", "step_slots", "step_simulator", "SIMULATE_UP_TO", "StepSimulator"]

# Interleaved and zero-bubble schedules are simulated up to this many stage-microbatches (pp x m);
# beyond it they take the closed form.
SIMULATE_UP_TO = 256

StepSimulator = Callable[[str, int, int, float], tuple[float, float, int]]


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


def closed_form(schedule: str, pp: int, m: int, ratio: float, v: int = 2) -> tuple[float, float, int]:
    """(step, bubble fraction, a stage's peak stash) of ``schedule`` with ``pp`` equal stages of
    forward 1 and backward ``ratio`` and ``m`` microbatches: the step is :func:`step_slots` times
    (1 + ratio); GPipe's bubble is (pp - 1) / (m + pp - 1). GPipe stashes m microbatches, 1F1B
    min(m, pp); interleaved 1F1B min(m, v pp) per chunk when pp divides m (torch's order holds up
    to (v + 1) pp otherwise: that bound is used). The tests check these against the simulator,
    which the search uses up to :data:`SIMULATE_UP_TO` (zero-bubble schedules beyond it take
    interleaved 1F1B's figures: an upper bound on their step, whose split backward fills the bubble)."""
    s = get_schedule(schedule)
    step = step_slots(schedule, pp, m, v) * (1 + ratio)
    bubble = 1 - m * (1 + ratio) / step
    if s.step_form == StepForm.FLUSH:
        return step, bubble, m if s.forwards_first else min(m, pp)
    v = virtual_stages(schedule, v)
    return step, bubble, min(m, v * pp if m % pp == 0 else (v + 1) * pp)


def step_simulator() -> StepSimulator:
    """``sim(schedule, pp, m, backward_ratio)`` -> (step, bubble fraction, peak stash) of ``schedule``
    with ``pp`` unit forward stages and ``m`` microbatches, cached per call of this function."""
    from partitioner.pipeline.simulate import simulate

    cache: dict[tuple[str, int, int, float], tuple[float, float, int]] = {}

    def sim(schedule: str, pp: int, m: int, ratio: float) -> tuple[float, float, int]:
        if get_schedule(schedule).step_form == StepForm.FLUSH:  # the simulator's figures exactly (tested)
            check_microbatches(schedule, pp, m)  # what torch's class refuses, the simulator refuses
            return closed_form(schedule, pp, m, ratio)
        # Interleaved and zero-bubble schedules beyond 32 stage-microbatches: the backward-to-forward
        # ratio to 2 significant digits (2.37 -> 2.4), so each is simulated once for the ratios a
        # search meets (within 2 % of the step), not once for each layout.
        if pp * m > 32:
            ratio = float(f"{ratio:.2g}")
        key = (schedule, pp, m, ratio)
        if key not in cache:
            v = get_schedule(schedule).stages_per_rank
            if pp * m <= SIMULATE_UP_TO:
                out = simulate([1.0 / v] * (pp * v), m, schedule, backward_s=[ratio / v] * (pp * v))
                cache[key] = (out.step_time_s, out.bubble_fraction, max(out.stage_peak_stash[:v]))
            else:
                cache[key] = closed_form(schedule, pp, m, ratio)
        return cache[key]

    sim.check = check_microbatches  # type: ignore[attr-defined]
    return sim
