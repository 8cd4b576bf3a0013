"""Closed forms of the pipeline schedules with equal stages: step, bubble and peak stash (GPipe,
1F1B, interleaved 1F1B, zero-bubble bounded by it), checked against the Pipeline page's simulator
by the tests. Torch-free."""

from __future__ import annotations

__all__ = ["closed_form"]


def closed_form(schedule: str, pp: int, m: int, ratio: float, v: int = 2) -> tuple[float, float, int]:
    """(step, bubble fraction, a stage's peak stash) of ``schedule`` with ``pp`` equal stages of
    forward 1 and backward ``ratio`` and ``m`` microbatches. GPipe and 1F1B: (m + pp - 1)(1 + ratio),
    bubble (pp - 1) / (m + pp - 1) (Huang et al. 2019; Narayanan et al. 2021); GPipe stashes m
    microbatches, 1F1B min(m, pp). Interleaved 1F1B with v chunks per rank (torch's class: 2):
    (max(m, pp) + (min(m, pp) - 1) / v)(1 + ratio) (the bubble shrinks by v: Narayanan et al. 2021,
    sec. 2.2.2), stash min(m, v pp) per chunk when pp divides m (torch's order holds up to
    (v + 1) pp otherwise: that bound is used). The tests check these against the simulator, which
    the search uses up to :data:`SIMULATE_UP_TO` (zero-bubble schedules beyond it take interleaved
    1F1B's figures: an upper bound on their step, whose split backward fills the bubble)."""
    work = m * (1 + ratio)
    if schedule == "zero_bubble":
        schedule, v = "interleaved_1f1b", 2
    if schedule == "interleaved_1f1b":
        step = (max(m, pp) + (min(m, pp) - 1) / v) * (1 + ratio)
        return step, 1 - work / step, min(m, v * pp if m % pp == 0 else (v + 1) * pp)
    step = (m + pp - 1) * (1 + ratio)
    return step, 1 - work / step, m if schedule == "gpipe" else min(m, pp)
