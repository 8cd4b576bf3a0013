"""The one table of pipeline schedules (:data:`SCHEDULES`: a frozen :class:`Schedule` record per
name, found by :func:`get_schedule` as torch's ``get_schedule_class`` finds its classes), the
per-rank action lists of each in torch.distributed.pipelining's order, and the microbatch counts
torch's schedule classes accept. Every other module reads schedules here: the simulator, the
closed forms, the cluster search, the layout records, the real runs and the engine exports.

An action is :class:`Action` ``(stage, kind, microbatch)`` with kind ``F`` (forward), ``B`` (full
backward), ``I`` (backward for inputs) or ``W`` (backward for weights); its text form is torch's
``_Action``'s (``"1F3"``: stage 1, forward, microbatch 3) and :meth:`Action.parse` reads it back.
Every schedule's lists are generated here, in pure Python, and equal torch's lists (torch's own
``_schedule_visualizer.get_schedule_ops`` in the tests) except where torch 2.13's own
``Schedule1F1B`` list numbers the last rank's forwards 1..m (the runtime is right; its list is
not).

# NOTE: [Interleaved orders written here]
``ScheduleInterleaved1F1B`` and ``ScheduleInterleavedZeroBubble`` make their order in
``_calculate_single_rank_operations`` (torch 2.13: ``_get_warmup_ops`` and ``_get_1f1b_rank_ops``
in ``torch/distributed/pipelining/schedules.py``); :func:`_interleaved` restates those two
functions without the idle slots (torch's ``None``; zero bubble's ``_add_bubbles_to_actions``
adds only those). Reading the order from torch instead (its visualizer builds each class over
mocked stages) imports ``torch.distributed.pipelining`` (about 2.5 s) and costs about 70 ms a
shape, which made the first cluster search of a process seconds slower;
``tests/pipeline/test_schedules.py`` holds the two equal over a grid of ranks, microbatches and
stages a rank.

# NOTE: [Microbatch counts torch accepts]
Read from ``torch/distributed/pipelining/schedules.py`` (2.13), the checks in the schedule
classes' ``__init__``; :func:`check_microbatches` states the same rules (a record's
:class:`MicrobatchRule`), and ``tests/pipeline/test_schedules.py`` compares it with the classes
themselves:

- ``ScheduleGPipe``: no check (any m >= 1).
- ``Schedule1F1B``: ``n_microbatches >= num_stages`` ("Number of microbatches (m) must be greater
  than or equal to the number of stages (p)").
- ``ScheduleInterleaved1F1B`` and ``ScheduleInterleavedZeroBubble``: with
  ``rounds = max(1, n_microbatches // pp_group_size)`` (the ranks, not the stages),
  ``n_microbatches % rounds == 0``: p = 4 takes 1..8, 10, 12 but not 9 or 11.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import NamedTuple

from partitioner.errors import PartitionError

__all__ = [
    "Action",
    "ActionKind",
    "Schedule",
    "MicrobatchRule",
    "StepForm",
    "SCHEDULES",
    "NO_SCHEDULE",
    "get_schedule",
    "searched_schedules",
    "virtual_stages",
    "MicrobatchError",
    "actions",
    "check_microbatches",
    "accepted_microbatches",
    "stages_per_rank",
    "MAX_LISTED",
]


class ActionKind(StrEnum):
    """What an action computes, as torch's ``_ComputationType`` prints it."""

    F = "F"  # forward
    B = "B"  # full backward (inputs and weights)
    I = "I"  # noqa: E741 - torch's letter: backward for the inputs
    W = "W"  # backward for the weights


_TEXT = re.compile(r"^(\d+)([FBIW])(\d+)$")


class Action(NamedTuple):
    """One step of one rank: ``kind`` of ``microbatch`` on ``stage``."""

    stage: int
    kind: ActionKind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    def __repr__(self) -> str:  # as torch's _Action: "1F3"
        return self.__str__()

    @classmethod
    def parse(cls, text: str) -> "Action":
        """The action ``str(action)`` wrote (``"1F3"``), as torch's ``_Action.from_str`` reads it."""
        found = _TEXT.match(text.strip())
        if found is None:
            raise PartitionError(f"an action reads stage, kind (F, B, I or W), microbatch, e.g. '1F3' (got {text!r})")
        return cls(int(found[1]), ActionKind(found[2]), int(found[3]))


class MicrobatchRule(StrEnum):
    """Which microbatch counts a schedule's torch class takes (NOTE: [Microbatch counts torch accepts])."""

    ANY = "any"  # ScheduleGPipe: no check
    AT_LEAST_RANKS = "at least one per rank"  # Schedule1F1B: m >= stages
    ROUNDS = "a multiple of the rounds"  # interleaved classes: m % max(1, m // ranks) == 0


class StepForm(StrEnum):
    """The closed form of a schedule's step with equal stages (:func:`partitioner.pipeline.steps.closed_form`)."""

    FLUSH = "flush"  # (m + pp - 1)(1 + r): the simulator's figure exactly
    INTERLEAVED = "interleaved"  # (max(m, pp) + (min(m, pp) - 1) / v)(1 + r), checked against the simulator
    BOUND = "interleaved bound"  # the interleaved form, an upper bound (a split backward fills more)


@dataclass(frozen=True)
class Schedule:
    """One pipeline schedule: our name and what every part of the project needs to know of it."""

    name: str  # ours: the CLI's --schedule, the Pipeline page's, a layout's word
    torch_name: str  # torch's get_schedule_class name; also torchtitan's pipeline_parallel_schedule
    torch_class: str  # its class in torch.distributed.pipelining.schedules
    stages_per_rank: int  # stages a rank holds in torch's class (its num_stages_per_rank)
    microbatches: MicrobatchRule
    step_form: StepForm
    forwards_first: bool = False  # every forward before any backward (GPipe): a stage stashes all m
    choose_virtual: bool = False  # a layout chooses its chunks a rank (``virtual``); else stages_per_rank
    searched_virtual: tuple[int, ...] = ()  # chunks a rank the cluster search tries (): the layout's default
    splits_backward: bool = False  # the backward runs as I (inputs) then W (weights), as zero bubble
    searched: bool = True  # the cluster search tries it
    runs: bool = False  # pipeline.run runs it (torch's class over our stages)
    runs_composed: bool = False  # a composed pp x dp x tp run runs it (one stage a rank)

    @property
    def interleaved(self) -> bool:
        """Whether a rank holds more than one stage (chunks that must divide the layers)."""
        return self.stages_per_rank > 1


SCHEDULES: dict[str, Schedule] = {
    s.name: s
    for s in (
        Schedule(
            "gpipe",
            "GPipe",
            "ScheduleGPipe",
            1,
            MicrobatchRule.ANY,
            StepForm.FLUSH,
            forwards_first=True,
            runs=True,
            runs_composed=True,
        ),
        Schedule(
            "1f1b",
            "1F1B",
            "Schedule1F1B",
            1,
            MicrobatchRule.AT_LEAST_RANKS,
            StepForm.FLUSH,
            runs=True,
            runs_composed=True,
        ),
        Schedule(
            "interleaved_1f1b",
            "Interleaved1F1B",
            "ScheduleInterleaved1F1B",
            2,
            MicrobatchRule.ROUNDS,
            StepForm.INTERLEAVED,
            choose_virtual=True,
            searched_virtual=(2, 4),
            runs=True,
        ),
        Schedule(
            "zero_bubble",
            "InterleavedZeroBubble",
            "ScheduleInterleavedZeroBubble",
            2,
            MicrobatchRule.ROUNDS,
            StepForm.BOUND,
            splits_backward=True,
        ),
    )
}

NO_SCHEDULE = "none"  # a layout without pipeline stages; with stages, a composed run takes it as GPipe


def get_schedule(name: str) -> Schedule:
    """The record of schedule ``name`` (case-insensitive; torch's names such as ``"Interleaved1F1B"``
    too), as torch's ``get_schedule_class`` finds its classes. Raises :class:`PartitionError`
    naming the schedules there are. O(1) for a schedule's own name, else O(schedules)."""
    if name in SCHEDULES:
        return SCHEDULES[name]
    key = str(name).strip().lower()
    for s in SCHEDULES.values():
        if key in (s.name, s.torch_name.lower(), s.torch_class.lower()):
            return s
    raise PartitionError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}")


def searched_schedules() -> tuple[Schedule, ...]:
    """The schedules the cluster search tries, in the order it tries them: one stage a rank first,
    and 1F1B before GPipe (the same step, fewer microbatches stashed), so a tie goes to the simpler."""
    return tuple(
        sorted((s for s in SCHEDULES.values() if s.searched), key=lambda s: (s.stages_per_rank, s.forwards_first))
    )


def virtual_stages(schedule: str, virtual: int = 2) -> int:
    """Stages a pipeline rank holds under ``schedule`` (:data:`NO_SCHEDULE`: one): a layout's
    ``virtual`` where the schedule lets it choose, else torch's class's own count."""
    if schedule == NO_SCHEDULE:
        return 1
    s = get_schedule(schedule)
    return virtual if s.choose_virtual else s.stages_per_rank


class MicrobatchError(PartitionError):
    """A microbatch count torch's schedule (or the example batch) does not take. ``accepted`` are
    the first counts that would be (at most :data:`MAX_LISTED`; for the batch: the divisors of its
    first dimension), so a front end can name its own knob."""

    def __init__(
        self, message: str, schedule: str, microbatches: int, accepted: tuple[int, ...], batch: int | None = None
    ) -> None:
        super().__init__(message)
        self.schedule, self.microbatches, self.accepted, self.batch = schedule, microbatches, accepted, batch


def stages_per_rank(schedule: str) -> int:
    """Stages a rank holds in torch's class for ``schedule`` (:class:`PartitionError` if unknown)."""
    return get_schedule(schedule).stages_per_rank


def _refusal(schedule: str, ranks: int, m: int) -> str | None:
    """Why torch's schedule class refuses ``m`` microbatches on ``ranks`` ranks, or None."""
    if m < 1:
        return f"microbatches must be >= 1 (got {m})"
    rule = get_schedule(schedule).microbatches
    if rule == MicrobatchRule.AT_LEAST_RANKS and m < ranks:
        return (
            f"1f1b needs at least as many microbatches as stages: microbatches must be >= {ranks} "
            f"(got {m}); torch's Schedule1F1B refuses fewer"
        )
    if rule == MicrobatchRule.ROUNDS:
        rounds = max(1, m // ranks)
        if m % rounds:
            return (
                f"{schedule} runs the microbatches in rounds of about one per rank: with {ranks} ranks, "
                f"{m} microbatches make {rounds} rounds, and microbatches must be a multiple of the "
                f"rounds (got {m}); torch's {get_schedule(schedule).torch_name} refuses it"
            )
    return None


MAX_LISTED = 16  # counts a refusal names: the first ones a schedule takes


def accepted_microbatches(schedule: str, ranks: int, up_to: int = 16, limit: int = MAX_LISTED) -> tuple[int, ...]:
    """The first ``limit`` microbatch counts in 1..``up_to`` that ``schedule`` takes on ``ranks`` ranks.

    O(limit), whatever ``ranks`` and ``up_to`` are (a person's ``--stages 1000000000`` once made
    this a loop of 3 x 10^9): 1f1b takes every count from ``ranks`` on, so the scan starts there;
    the interleaved schedules take every count below ``2 * ranks`` (one round). The scan looks at
    no more than ``4 * limit`` counts."""
    rule = get_schedule(schedule).microbatches
    start = max(1, ranks) if rule == MicrobatchRule.AT_LEAST_RANKS else 1
    found: list[int] = []
    for m in range(start, min(up_to, start + 4 * limit) + 1):
        if _refusal(schedule, ranks, m) is None:
            found.append(m)
            if len(found) >= limit:
                break
    return tuple(found)


def check_microbatches(schedule: str, ranks: int, microbatches: int) -> None:
    """Raise :class:`MicrobatchError` when torch's class for ``schedule`` refuses ``microbatches``
    on ``ranks`` ranks (see NOTE: [Microbatch counts torch accepts]), naming the counts it takes."""
    rule = get_schedule(schedule).microbatches
    why = _refusal(schedule, ranks, microbatches)
    if why is not None:
        ok = accepted_microbatches(schedule, ranks, up_to=max(16, 3 * ranks))
        fix = {
            MicrobatchRule.ROUNDS: f"; choose one of {', '.join(map(str, ok))}, ...",
            MicrobatchRule.AT_LEAST_RANKS: f"; use {ok[0]} or more microbatches, or fewer stages",
        }.get(rule, "")
        raise MicrobatchError(why + fix, schedule, microbatches, ok)


def _gpipe(ranks: int, m: int, training: bool) -> list[list[Action]]:
    out = []
    for r in range(ranks):
        acts = [Action(r, ActionKind.F, k) for k in range(m)]
        if training:
            acts += [Action(r, ActionKind.B, k) for k in range(m)]
        out.append(acts)
    return out


def _one_f_one_b(ranks: int, m: int) -> list[list[Action]]:
    out = []
    for r in range(ranks):
        warmup = min(ranks - 1 - r, m)
        acts = [Action(r, ActionKind.F, k) for k in range(warmup)]
        f, b = warmup, 0
        while f < m:  # steady state: one forward, one backward
            acts.append(Action(r, ActionKind.F, f))
            f += 1
            acts.append(Action(r, ActionKind.B, b))
            b += 1
        acts += [Action(r, ActionKind.B, k) for k in range(b, m)]
        out.append(acts)
    return out


@lru_cache(maxsize=256)
def _interleaved(ranks: int, m: int, per_rank: int, zero_bubble: bool) -> tuple[tuple[Action, ...], ...]:
    """Each rank's actions under ``ScheduleInterleaved1F1B`` (``zero_bubble``: the backward split
    into I and W as ``ScheduleInterleavedZeroBubble``), in torch's order without its idle slots.
    NOTE: [Interleaved orders written here]."""
    rounds = max(1, m // ranks)
    per_round = m // rounds
    total = per_rank * m  # forwards a rank runs (and backwards)
    out: list[tuple[Action, ...]] = []
    for rank in range(ranks):
        # torch's _get_warmup_ops: multiply_factor 2 for 1F1B, 1 for zero bubble
        warmup = min((per_rank - 1) * per_round + (1 if zero_bubble else 2) * (ranks - 1 - rank), total)
        seen: dict[tuple[int, ActionKind], int] = {}  # (stage, kind) -> next microbatch
        backward_ops: list[int] = []  # the op that ran each backward, in order (W follows them)
        weights = 0
        acts: list[Action] = []

        def add(stage: int, kind: ActionKind) -> None:
            seen[stage, kind] = (k := seen.get((stage, kind), 0)) + 1
            acts.append(Action(stage, kind, k))

        def stage_b(op: int) -> int:
            return (per_rank - 1 - ((op - warmup) // per_round) % per_rank) * ranks + rank

        for op in range(warmup + total):  # warm-up forwards, steady F + B, cool-down backwards
            if op < total:
                add(((op // per_round) % per_rank) * ranks + rank, ActionKind.F)
            if op >= warmup:
                add(stage_b(op), ActionKind.I if zero_bubble else ActionKind.B)
                backward_ops.append(op)
                if zero_bubble and op - warmup >= rank:  # ZB1P: a rank's W trails its I by ``rank`` ops
                    add(stage_b(backward_ops[weights]), ActionKind.W)
                    weights += 1
        for op in backward_ops[weights:] if zero_bubble else ():
            add(stage_b(op), ActionKind.W)
        out.append(tuple(acts))
    return tuple(out)


def actions(
    schedule: str, ranks: int, microbatches: int, training: bool = True, virtual: int | None = None
) -> list[list[Action]]:
    """Each rank's actions in order. Inference (``training=False``) keeps only the forwards.
    ``virtual``: the chunks a rank holds where the schedule lets a layout choose (interleaved
    1F1B: torch's class takes any count of stages a rank); None: torch's class's own count.
    Raises :class:`MicrobatchError` for a microbatch count torch's schedule refuses."""
    check_microbatches(schedule, ranks, microbatches)
    s = get_schedule(schedule)
    if s.forwards_first:
        return _gpipe(ranks, microbatches, training)
    if s.interleaved:
        per_rank = s.stages_per_rank if virtual is None else virtual_stages(schedule, virtual)
        lists = [list(r) for r in _interleaved(ranks, microbatches, per_rank, s.splits_backward)]
    else:
        lists = _one_f_one_b(ranks, microbatches)
    if not training:
        lists = [[a for a in acts if a.kind == ActionKind.F] for acts in lists]
    return lists
