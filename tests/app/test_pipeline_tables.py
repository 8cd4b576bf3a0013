"""The Pipeline page's numbers without Streamlit: the plan re-simulated at other microbatch counts
(GPipe's bubble (p-1)/(m+p-1), from the GPipe paper, Huang et al. 2019), the sweep skipping counts
a schedule refuses, the split and stage tables, and a real run read against its simulation."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

import partitioner
from explorer.builders import pipeline_tables
from partitioner import pipeline


@pytest.fixture(scope="module")
def pp(mlp) -> pipeline.PipelinePlan:
    devices = partitioner.parse_devices("4x1GiB")
    return pipeline.plan(mlp, devices, stages=4, microbatches=8, schedule="gpipe")


def test_the_plans_own_count_simulates_to_the_plans_own_step_time(pp):
    assert pipeline_tables.resimulate(pp, pp.microbatches).step_time_s == pytest.approx(pp.step_time_s)
    assert pipeline_tables.transfer_s(pp, pp.microbatches) == list(pp.stage_transfer_s)
    halved = pipeline_tables.transfer_s(pp, 2 * pp.microbatches)  # the same batch in twice the pieces
    assert halved == pytest.approx([t / 2 for t in pp.stage_transfer_s])


@pytest.mark.parametrize("m", [1, 4, 8, 32])
def test_equal_stages_give_gpipes_published_bubble(pp, m):
    equal = dataclasses.replace(
        pp, stage_forward_s=(0.01,) * 4, stage_backward_s=(0.0,) * 4, stage_transfer_s=(0.0,) * 3
    )
    p = 4
    assert pipeline_tables.resimulate(equal, m).bubble_fraction == pytest.approx((p - 1) / (m + p - 1))


def test_the_sweep_skips_counts_the_schedule_refuses(pp):
    gpipe = pipeline_tables.microbatch_sweep(pp)
    assert [m for m, _, _ in gpipe] == list(pipeline_tables.SWEEP)  # gpipe takes any count
    steps = [s for _, s, _ in gpipe]
    bubbles = [b for _, _, b in gpipe]
    assert bubbles == sorted(bubbles, reverse=True)  # more microbatches, a smaller bubble
    assert all(s > 0 for s in steps)
    one_f1b = dataclasses.replace(pp, schedule="1f1b")
    counts = [m for m, _, _ in pipeline_tables.microbatch_sweep(one_f1b)]
    assert min(counts) >= len(pp.stages) and counts  # fewer than one per stage: refused by 1f1b
    assert pipeline_tables.twin_simulation(pp, 8, "gpipe") is None
    twin = pipeline_tables.twin_simulation(pp, 8, "interleaved_1f1b")
    assert twin is None or twin.step_time_s > 0


def test_split_and_stage_tables(pp, mlp):
    splits = pipeline_tables.splits_table(pp)
    assert len(splits) == 1 + len(pp.baselines) and splits["against this split"].iloc[0] == "-"
    assert splits["operations per stage"].iloc[0] == str([len(s) for s in pp.stages])
    names = {i: f"dev{i}" for i in range(4)}
    caps = [2**30] * len(pp.stages)
    stages = pipeline_tables.stages_table(pp, names, caps, mlp)
    assert stages["Stage"].tolist() == [f"S{s}" for s in range(len(pp.stages))]
    assert stages["Ops"].sum() == sum(len(s) for s in pp.stages)
    assert "Backward" not in stages.columns  # inference: no backward column (issue 56: readable at 1,280 px)
    assert "Device holds" not in stages.columns  # one stage a device: its share is "Of device"
    assert stages["Transfer out"].iloc[-1] == "-"  # the last stage sends nothing on


def test_a_count_that_does_not_divide_the_batch_says_which_knob_to_change(pp, mlp):
    assert pipeline_tables.why_not_runnable(pp, mlp) == ""  # batch 8 in 8 microbatches
    odd = dataclasses.replace(pp, microbatches=3)
    why = pipeline_tables.why_not_runnable(odd, mlp)
    assert "batch_size=9" in why and "Size knobs" in why, why


def test_a_real_run_is_read_against_its_simulation():
    run = SimpleNamespace(
        outputs_equal=True, gradients_equal=None, measured_step_s=0.011, simulated_step_s=0.010, world_size=2
    )
    same, words = pipeline_tables.run_verdict(run)
    assert same and words.startswith("Outputs equal") and "+10" in words and "2 processes" in words
    same, words = pipeline_tables.run_verdict(SimpleNamespace(**{**vars(run), "gradients_equal": False}))
    assert not same and words.startswith("Outputs and gradients differ from")
    table = pipeline_tables.run_table([0.002, 0.0], [0.003, 0.001])
    assert table["stage"].tolist() == ["S0", "S1"] and table["error"].iloc[1] == "-"
    assert table["error"].iloc[0].startswith("+50")
