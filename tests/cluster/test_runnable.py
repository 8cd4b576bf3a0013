"""What a local composed run can run: one rule and one wording for the command line (the layout as
written) and the app (the layout reduced to this machine), GPipe for a layout without a schedule
written once."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from partitioner.cluster.layouts import Layout
from partitioner.cluster.run.runnable import EXPORTED_PIPELINE, check_runnable, local_layout, run_schedule
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import NO_SCHEDULE, SCHEDULES

BATCH = (torch.ones(8, 4),)


def _refusal(call) -> str:
    with pytest.raises(PartitionError) as info:
        call()
    return str(info.value)


def test_no_schedule_runs_as_gpipe():
    assert run_schedule(Layout(pp=2, schedule=NO_SCHEDULE)) is SCHEDULES["gpipe"]
    assert run_schedule(Layout(pp=2, schedule="1f1b")) is SCHEDULES["1f1b"]
    check_runnable(Layout(pp=2, microbatch_size=2), BATCH)  # "none" with stages: GPipe, which runs


@pytest.mark.parametrize(
    ("layout", "words"),
    [
        (Layout(pp=2, schedule="interleaved_1f1b"), "one stage a rank, gpipe or 1f1b (got interleaved_1f1b)"),
        (Layout(dp=2, pp=2, zero=3), "not with FSDP (got pp=2 zero3): choose zero0 or zero1, or pp1"),
        (Layout(dp=2, ep=2), "ep2 is planned but not run here"),
        (Layout(dp=2, zero=3, shard=2, offload=True), "shard2, offload are planned but not run here"),
    ],
)
def test_the_command_line_and_the_app_refuse_in_the_same_words(layout, words):
    written = _refusal(lambda: check_runnable(layout, BATCH))
    reduced = _refusal(lambda: local_layout(layout, BATCH, 8))
    assert words in written and written == reduced


def test_the_app_reduces_a_layout_to_this_machine_and_the_example():
    big = Layout(dp=64, tp=2, pp=2, schedule="1f1b", microbatch_size=4, zero=1, recompute="full")
    fitted = local_layout(big, BATCH, 8)
    assert fitted == dataclasses.replace(big, dp=2, microbatch_size=4, recompute="none")
    check_runnable(fitted, BATCH)  # what the app runs, the command line runs too
    assert local_layout(Layout(dp=3, zero=3, microbatch_size=3), BATCH, 8) == Layout(dp=2, zero=3, microbatch_size=2)
    assert local_layout(Layout(dp=4, tp=4, zero=2), BATCH, 4).zero == 0  # one replica left: nothing to shard
    assert "recompute" in _refusal(lambda: check_runnable(big, BATCH))  # as written, the command line refuses it


def test_what_this_machine_cannot_hold_or_split_is_said():
    said = _refusal(lambda: local_layout(Layout(tp=4, pp=4, schedule="gpipe"), BATCH, 8))
    assert "tp4 x pp4 needs 16 processes and this machine runs at most 8" in said
    assert "batch dimension" in _refusal(lambda: local_layout(Layout(), (torch.tensor(1.0),), 8))
    assert "batch dimension" in _refusal(lambda: check_runnable(Layout(), ()))
    assert "must divide over dp=3" in _refusal(lambda: check_runnable(Layout(dp=3), BATCH))


def test_a_hugging_face_pipeline_is_refused_in_one_wording():
    assert _refusal(lambda: local_layout(Layout(pp=2), BATCH, 8, exported=True)) == EXPORTED_PIPELINE
    assert _refusal(lambda: check_runnable(Layout(pp=2), BATCH, exported=True)) == EXPORTED_PIPELINE
    assert local_layout(Layout(tp=2), BATCH, 8, exported=True).tp == 2
