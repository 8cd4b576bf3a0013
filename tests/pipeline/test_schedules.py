"""Schedules follow torch's rules: the microbatch counts the project accepts are exactly those
torch's schedule classes accept (the classes themselves are the oracle, built over mocked stages
by torch's own ``get_schedule_ops``, no process started), and actions are typed records whose
text form is torch's ``_Action``'s and parses back."""

from __future__ import annotations

import pytest

from partitioner import PartitionError, pipeline
from partitioner.pipeline.schedules import (
    SCHEDULES,
    Action,
    ActionKind,
    MicrobatchError,
    Schedule,
    check_microbatches,
    get_schedule,
)


def _torch_accepts(schedule: str, ranks: int, m: int) -> bool:
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    s = SCHEDULES[schedule]
    try:
        get_schedule_ops(
            s.torch_name, ranks, m, num_stages_per_rank=s.stages_per_rank
        )  # runs the class's __init__ checks
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("ranks", [2, 4])
def test_the_microbatch_counts_accepted_are_torchs(schedule, ranks):
    per_rank = SCHEDULES[schedule].stages_per_rank
    for m in range(1, 13):
        theirs = _torch_accepts(schedule, ranks, m)
        try:
            check_microbatches(schedule, ranks, m)
            ours = True
        except MicrobatchError:
            ours = False
        assert ours == theirs, (schedule, ranks, m)
        # The simulator (and so pipeline.plan) accepts and refuses the same counts.
        try:
            pipeline.simulate([0.01] * (ranks * per_rank), m, schedule)
            simulated = True
        except MicrobatchError:
            simulated = False
        assert simulated == theirs, (schedule, ranks, m)


def test_refusals_say_the_rule_the_values_and_the_fix():
    with pytest.raises(MicrobatchError, match=r"microbatches must be >= 4 \(got 3\).*use 4 or more") as info:
        check_microbatches("1f1b", 4, 3)
    assert info.value.accepted[0] == 4 and info.value.microbatches == 3
    with pytest.raises(
        MicrobatchError,
        match=r"9 microbatches make 2 rounds.*choose one of 1, 2, 3, 4, 5, 6, 7, "
        r"8, 10, 12",
    ):
        check_microbatches("interleaved_1f1b", 4, 9)
    # What the project refused before and torch takes: interleaved and zero bubble with m = 6 or 10 on 4 ranks.
    for schedule in ("interleaved_1f1b", "zero_bubble"):
        for m in (6, 10):
            assert pipeline.simulate([0.01] * 8, m, schedule).microbatches == m


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_actions_are_typed_and_their_text_is_torchs(schedule):
    from torch.distributed.pipelining.schedules import _Action

    lists = pipeline.actions(schedule, 4, 8)
    for acts in lists:
        for a in acts:
            assert isinstance(a, Action) and isinstance(a.kind, ActionKind)
            text = str(a)
            assert Action.parse(text) == a
            theirs = _Action.from_str(text)  # torch reads our text as the same action
            assert (theirs.stage_index, theirs.computation_type.value, theirs.microbatch_index) == tuple(a)
    assert str(Action(1, ActionKind.F, 3)) == "1F3" == repr(Action(1, ActionKind.F, 3))
    assert Action(1, ActionKind.F, 3) == (1, "F", 3)  # still reads as a plain tuple
    with pytest.raises(PartitionError, match="e.g. '1F3'"):
        Action.parse("1X3")


def test_torchs_generated_actions_print_as_ours():
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    ours = pipeline.actions("zero_bubble", 2, 4)
    theirs = [[str(a) for a in rank if a is not None] for rank in get_schedule_ops("InterleavedZeroBubble", 2, 4)]
    assert [[str(a) for a in rank] for rank in ours] == theirs


@pytest.mark.parametrize("schedule", ["interleaved_1f1b", "zero_bubble"])
def test_interleaved_orders_written_here_are_torchs(schedule):
    """NOTE: [Interleaved orders written here]: the lists equal torch's own, shape for shape,
    over the ranks, microbatch counts (every one torch takes) and stages a rank of a search."""
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    s = SCHEDULES[schedule]
    checked = 0
    for ranks in (1, 2, 3, 4, 8):
        for per_rank in (2, 3, 4) if s.choose_virtual else (s.stages_per_rank,):
            for m in pipeline.accepted_microbatches(schedule, ranks, up_to=3 * ranks + 1, limit=64):
                theirs = get_schedule_ops(s.torch_name, ranks, m, num_stages_per_rank=per_rank)
                ours = pipeline.actions(schedule, ranks, m, virtual=per_rank)
                assert [[str(a) for a in r] for r in ours] == [
                    [str(a) for a in r if a is not None and a.microbatch_index is not None] for r in theirs
                ], (ranks, m, per_rank)
                checked += 1
    assert checked > 40


def test_timeline_entries_are_named():
    sim = pipeline.simulate([0.01, 0.02], 2, "gpipe")
    first = sim.timeline[0]
    assert (first.rank, first.stage, first.kind, first.microbatch, first.start_s) == (0, 0, ActionKind.F, 0, 0.0)
    assert all(e.end_s > e.start_s for e in sim.timeline)
    backward = [e for e in sim.timeline if e.kind == ActionKind.B]
    assert len(backward) == 4 and max(e.end_s for e in backward) == pytest.approx(sim.step_time_s)
    # Plain tuples still simulate (the kinds are read as ActionKind).
    plain = pipeline.simulate_actions([[(0, "F", 0), (0, "B", 0)]], [0.01], [0.02])
    assert plain.timeline[1].kind == ActionKind.B and plain.step_time_s == pytest.approx(0.03)


def test_a_refusal_on_many_ranks_still_names_the_counts_taken():
    from partitioner.pipeline.schedules import MicrobatchError, check_microbatches

    with pytest.raises(MicrobatchError, match="use 32 or more microbatches"):
        check_microbatches("1f1b", 32, 8)


def test_a_huge_stage_count_is_refused_at_once(capsys, monkeypatch):
    """`pipeline mlp --stages 1000000000` looped 3 x 10^9 times building the refusal's hint; the
    hint is the first accepted counts, found in a bounded scan (a call count, not a timing)."""
    from partitioner.pipeline import schedules

    calls = []
    real = schedules._refusal

    def counted(*args):
        calls.append(args)
        assert len(calls) < 1000, "the hint's scan is not bounded"  # fails fast where it once ran for minutes
        return real(*args)

    monkeypatch.setattr(schedules, "_refusal", counted)
    with pytest.raises(MicrobatchError, match="use 1000000000 or more microbatches") as info:
        check_microbatches("1f1b", 10**9, 8)
    assert info.value.accepted[0] == 10**9 and len(info.value.accepted) <= schedules.MAX_LISTED
    assert len(calls) <= 4 * schedules.MAX_LISTED + 2
    calls.clear()
    with pytest.raises(MicrobatchError, match=r"choose one of 1, 2, 3"):
        check_microbatches("interleaved_1f1b", 7, 15)
    assert len(calls) <= 4 * schedules.MAX_LISTED + 2
    from cli.main import main

    assert main(["pipeline", "mlp", "--stages", "1000000000"]) == 2
    assert "--microbatches 8: 1f1b needs at least as many microbatches as stages" in capsys.readouterr().err


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_each_record_names_torchs_own_class(schedule):
    """torch's table is the oracle: its ``get_schedule_class`` finds the record's class by the
    record's torch name, and the class runs as many stages a rank as the record says."""
    from torch.distributed.pipelining import schedules as torch_schedules

    record = SCHEDULES[schedule]
    assert isinstance(record, Schedule) and record.name == schedule
    cls = getattr(torch_schedules, record.torch_class)
    assert torch_schedules.get_schedule_class(record.torch_name) is cls
    multi = issubclass(cls, torch_schedules.PipelineScheduleMulti)
    assert multi == record.interleaved, schedule
    if record.runs_composed:  # composed runs put one stage on a rank
        assert issubclass(cls, torch_schedules.PipelineScheduleSingle)


def test_a_schedule_is_found_as_torch_finds_it():
    assert get_schedule("1F1B") is get_schedule("1f1b") is SCHEDULES["1f1b"]
    assert get_schedule("Interleaved1F1B").name == "interleaved_1f1b"
    assert get_schedule("ScheduleInterleavedZeroBubble").name == "zero_bubble"
    with pytest.raises(PartitionError, match=r"unknown schedule 'zig'; choose one of gpipe, 1f1b, interleaved_1f1b"):
        get_schedule("zig")
    with pytest.raises(Exception):  # frozen
        SCHEDULES["gpipe"].stages_per_rank = 2  # type: ignore[misc]
