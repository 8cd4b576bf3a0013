"""Pipeline stages composed with tensor and data parallelism (pp x dp x tp on one mesh) equal one
process; a failing rank is named with its rank, mesh coordinates and role, and leaves no process."""

from __future__ import annotations

import os

import pytest
import torch
import torch.fx

import partitioner
import sample_models
from partitioner import cluster
from partitioner.cluster.run.compose import linear_pairs_plan, parse_layout, run_layout
from partitioner.cluster.run.pipelined import coordinates, role, stage_cuts
from partitioner.errors import PartitionError, RunError
from partitioner.processes.records import RankStep
from partitioner.testing import faults


def fail_on_rank(x: torch.Tensor, bad: int) -> torch.Tensor:
    if int(os.environ.get("RANK", "-1")) == bad:
        raise ValueError("injected failure in stage 2")
    return x


torch.fx.wrap("fail_on_rank")  # a call node in the trace, run by the rank that holds it


class FailsInStageTwo(torch.nn.Module):
    """Two Linear pairs; between them (so in the second stage) a call that raises on rank ``bad``."""

    def __init__(self, bad: int) -> None:
        super().__init__()
        self.bad = bad
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers[1](torch.relu(self.layers[0](x)))
        x = fail_on_rank(x, self.bad)
        return self.layers[3](torch.relu(self.layers[2](x)))


def mlp() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return sample_models.build("mlp", n_layer=4, hidden=32, in_features=32, out_features=32, batch_size=8)


def test_ranks_sit_on_the_mesh_row_major_with_tp_fastest():
    layout = cluster.Layout(pp=2, dp=2, tp=2)
    assert [coordinates(r, layout) for r in range(8)] == [
        (0, 0, 0),
        (0, 0, 1),
        (0, 1, 0),
        (0, 1, 1),
        (1, 0, 0),
        (1, 0, 1),
        (1, 1, 0),
        (1, 1, 1),
    ]
    assert role(5, layout) == ("rank 5 (pp=1, dp=0, tp=1: pipeline stage 2 of 2, tensor shard 2 of 2, replica 1 of 2)")


def test_stages_take_whole_linear_pairs():
    model, inputs = mlp()
    graph = partitioner.trace(model, inputs)
    plan = linear_pairs_plan(model, 2)
    cuts = stage_cuts(graph, plan, [], 2)
    assert len(cuts) == 2 and sum(map(len, cuts)) == len(graph.op_indices)
    first = [graph.nodes[graph.index[n]].target for n in cuts[0]]
    second = [graph.nodes[graph.index[n]].target for n in cuts[1]]
    assert "layers.1" in first and "layers.0" in first and "layers.2" in second and "layers.3" in second
    with pytest.raises(PartitionError, match=r"whole Linear pairs: the model has 2, which pp=4 does not divide"):
        stage_cuts(graph, plan, [], 4)


def test_what_a_pipelined_run_cannot_do_is_refused_before_any_process_starts():
    model, inputs = mlp()
    with pytest.raises(PartitionError, match=r"ZeRO 0 or 1 .*got pp=2 zero3"):
        run_layout(model, inputs, cluster.Layout(dp=2, pp=2, zero=3))
    with pytest.raises(PartitionError, match=r"gpipe or 1f1b \(got interleaved_1f1b\)"):
        run_layout(model, inputs, cluster.Layout(pp=2, schedule="interleaved_1f1b"))


@pytest.mark.slow
@pytest.mark.parametrize("text", ["pp2 tp2 gpipe mb2", "pp2 dp2 1f1b mb2"])
def test_pipeline_stages_with_tensor_or_data_parallelism_equal_one_process(text: str, rank_steps: list[RankStep]):
    model, inputs = mlp()
    layout = parse_layout(text, batch=8)
    before = faults.child_pids()
    run = run_layout(model, inputs, layout, timeout_s=240)
    assert run.outputs_equal and run.gradients_equal and run.loss_equal, run.mismatch
    assert run.max_abs_diff < 1e-5
    expected_loss = float(model(*inputs).detach().sum())
    assert run.loss == pytest.approx(expected_loss, rel=1e-5, abs=1e-4)
    assert [(r.pp, r.dp, r.tp) for r in run.ranks] == [coordinates(r, layout) for r in range(4)]
    # Every rank's report crossed the process boundary as the typed record, its place on the mesh in it.
    assert [type(r) for r in rank_steps] == [RankStep] * 4
    assert [r.coords for r in rank_steps] == [coordinates(r, layout) for r in range(4)]
    assert [r.rank for r in rank_steps] == [0, 1, 2, 3]
    # Each stage holds one pair of Linear(32, 32): with tp2 half of each weight and of the
    # column-parallel bias, all of the row-parallel bias; with dp2 (no tp) the whole pair.
    pair = 2 * (32 * 32 + 32) * 4
    want = (32 * 32 * 4 + 16 * 4 + 32 * 4) if layout.tp == 2 else pair
    assert all(r.parameter_bytes == want for r in run.ranks)
    assert faults.child_pids() == before


@pytest.mark.slow
def test_a_failing_rank_is_named_with_its_coordinates_and_role():
    model = FailsInStageTwo(bad=3)
    inputs = (torch.randn(4, 8),)
    before = faults.child_pids()
    with pytest.raises(
        RunError,
        match=r"rank 3 \(pp=1, dp=0, tp=1: pipeline stage 2 of 2, tensor shard 2 of 2.*"
        r"injected failure in stage 2",
    ) as caught:
        run_layout(model, inputs, parse_layout("pp2 tp2 mb2", batch=4), timeout_s=240)
    assert caught.value.rank == 3
    assert faults.child_pids() == before
