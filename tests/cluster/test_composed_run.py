"""A composed layout (dp x tp, ZeRO) run on local processes equals one process; a failing rank is
named with its mesh coordinates and leaves no process; the CLI's ``--run`` prints the comparison."""

from __future__ import annotations

import os

import pytest
import torch

import sample_models
from examples import host_profile, set_args
from partitioner import cluster
from partitioner.cluster.run.compose import linear_pairs_plan, parse_layout, run_layout
from partitioner.errors import PartitionError, RunError
from partitioner.processes.records import RankStep
from partitioner.testing import faults


def mlp() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return sample_models.build("mlp", n_layer=4, hidden=32, in_features=32, out_features=32, batch_size=8)


class RaisesOnRank(torch.nn.Module):
    """A Linear pair whose forward raises in the process whose ``RANK`` is ``bad``."""

    def __init__(self, bad: int) -> None:
        super().__init__()
        self.bad = bad
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if int(os.environ.get("RANK", "-1")) == self.bad:
            raise ValueError("injected failure in the forward")
        return self.b(torch.relu(self.a(x)))


def test_parse_layout_reads_short_strings():
    assert parse_layout("dp2 tp2") == cluster.Layout(dp=2, tp=2)
    assert parse_layout("dp=2, tp=1 zero3 mb2") == cluster.Layout(dp=2, tp=1, microbatch_size=2, zero=3)
    assert parse_layout("dp2 tp2", batch=8).microbatch_size == 4  # a replica's share is one microbatch
    assert parse_layout("pp2 1f1b recompute-full") == cluster.Layout(pp=2, schedule="1f1b", recompute="full")
    with pytest.raises(PartitionError, match=r"words like dp2 tp2.*got 'fast'"):
        parse_layout("dp2 fast")
    with pytest.raises(PartitionError, match=r"zero must be 0, 1, 2 or 3 \(got 4"):
        parse_layout("zero4")


def test_the_mlp_pairs_its_linear_layers_colwise_then_rowwise():
    model, _ = mlp()
    assert linear_pairs_plan(model, 2) == (
        ("layers.0", "colwise"),
        ("layers.1", "rowwise"),
        ("layers.2", "colwise"),
        ("layers.3", "rowwise"),
    )


def test_what_cannot_be_sharded_is_refused_before_any_process_starts():
    model, inputs = mlp()
    with pytest.raises(PartitionError, match=r"pairs Linear layers .* the model has 3: run it with tp1"):
        linear_pairs_plan(sample_models.build("mlp", n_layer=3)[0], 2)
    with pytest.raises(PartitionError, match=r"divide by tp=3 \(got 32 -> 32\)"):
        linear_pairs_plan(model, 3)
    transformer, _ = sample_models.build("transformer", n_layer=1)
    refused = r"Linear layers only; blocks.0.ln_1 \(LayerNorm\).*wpe \(Embedding\) and 1 more.*tp1"
    with pytest.raises(PartitionError, match=refused):
        linear_pairs_plan(transformer, 2)
    with pytest.raises(PartitionError, match=r"ZeRO 0 or 1 .*got pp=2 zero2"):
        run_layout(model, inputs, cluster.Layout(dp=2, pp=2, zero=2))
    with pytest.raises(PartitionError, match=r"must divide over dp=3"):
        run_layout(model, inputs, cluster.Layout(dp=3))


@pytest.mark.slow
@pytest.mark.parametrize("zero", [0, 2, 3])
def test_a_two_by_two_run_of_the_mlp_equals_one_process(zero: int, rank_steps: list[RankStep]):
    model, inputs = mlp()
    layout = parse_layout(f"dp2 tp2 zero{zero}", batch=8)
    before = faults.child_pids()
    run = run_layout(model, inputs, layout, timeout_s=240)
    assert run.outputs_equal and run.gradients_equal, run.mismatch
    assert run.max_abs_diff < 1e-5
    assert [(r.rank, r.dp, r.tp) for r in run.ranks] == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
    # 4 Linear(32, 32): a colwise layer keeps half its weight and bias, a rowwise half its weight
    # and all its bias; FSDP2 (ZeRO 2 and 3) halves that again over dp once the backward ends.
    # Gradients are the same size.
    params = 2 * (16 * 32 + 16) * 4 + 2 * (32 * 16 + 32) * 4
    held = params // 2 if zero >= 2 else params
    assert run.memory_bytes == (2 * held,) * 4
    assert [type(r) for r in rank_steps] == [RankStep] * 4  # the typed record crossed the boundary
    assert [r.coords for r in rank_steps] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [r.memory_bytes for r in rank_steps] == list(run.memory_bytes)
    assert run.step_s > 0 and run.data_parallel.startswith("fully_shard" if zero else "all-reduce")
    assert faults.child_pids() <= before


@pytest.mark.slow
def test_a_failing_rank_is_named_with_its_mesh_coordinates_and_no_process_is_left():
    before = faults.child_pids()
    with pytest.raises(RunError, match=r"rank 2 \(dp=1, tp=0\): rank 2 failed: ValueError: injected failure") as info:
        run_layout(
            RaisesOnRank(bad=2), (torch.randn(4, 8),), cluster.Layout(dp=2, tp=2, microbatch_size=2), timeout_s=240
        )
    assert info.value.rank == 2
    assert faults.child_pids() <= before


@pytest.mark.slow
def test_a_rank_that_dies_is_named_with_its_mesh_coordinates():
    before = faults.child_pids()
    with pytest.raises(RunError, match=r"rank 1 \(dp=1, tp=0\): rank 1 died"):
        run_layout(
            faults.DiesOnRank(rank=1), (torch.randn(4, 8),), cluster.Layout(dp=2, microbatch_size=2), timeout_s=240
        )
    assert faults.child_pids() <= before


@pytest.mark.slow
def test_the_cli_runs_a_layout_and_prints_the_comparison(capsys: pytest.CaptureFixture[str]):
    from cli.main import main

    sets = set_args(n_layer=4, hidden=32, in_features=32, out_features=32, batch_size=8)
    assert main(["cluster", "mlp", *sets, "--run", "dp2 tp2 zero3", "--timeout", "240"]) == 0
    out = capsys.readouterr().out
    assert "outputs equal one process: yes; gradients equal: yes" in out
    assert "dp=1 tp=1" in out and "predicted" in out
    assert "step: measured" in out and "on the profile 'local' of this machine: error" in out
    # The prediction part by part, as the app's "Run this layout" shows it: parts the run does not
    # time apart (FSDP's gathers inside the step), and the step end to end.
    assert "inside the rest" in out and "\nend to end " in out
    assert main(["cluster", "mlp", "--run", "dp2 pp2 zero3"]) == 2  # refused: FSDP with pipeline stages
    assert "ZeRO 0 or 1" in capsys.readouterr().err


@pytest.mark.slow
def test_a_check_in_a_worker_reports_its_progress_and_leaves_no_process():
    from partitioner.cluster.run.checked import check_layout

    profile = host_profile()  # given, so the worker measures nothing: the run and its progress are tested
    model, inputs = mlp()
    lines: list[str] = []
    before = faults.child_pids()
    check = check_layout(
        model, inputs, cluster.Layout(dp=2), profile=profile, timeout_s=240, progress=lines.append, in_worker=True
    )
    assert check.run.outputs_equal and check.run.gradients_equal, check.run.mismatch
    assert any(line.startswith("starting 2 processes") for line in lines), lines  # the launcher's, from the worker
    assert faults.child_pids() <= before
