"""Pipeline plans run for real with torch.distributed.pipelining (gloo, spawned processes): the
outputs, loss and gradients equal the single-process model's; a rank that dies ends the run with
a clear error and no process left. Each run costs seconds (every rank imports torch): few cases,
each covering several things."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import partitioner
import sample_models
from partitioner import Device, PartitionError, RunError, pipeline
from partitioner.pipeline.runner import check_runnable
from partitioner.pipeline.schedules import MicrobatchError
from partitioner.pipeline.stage_modules import build_stage_modules
from partitioner.processes.records import RankStep
from partitioner.testing import faults

ROOT = Path(__file__).resolve().parents[2]
BIG = [Device(f"d{i}", 1 << 30, i) for i in range(4)]


@pytest.fixture(scope="module")
def gpt():
    """The sample GPT at batch 4: token ids, a causal mask, residual (skip) connections and an LM
    head tied to the embedding, so stages carry values past their neighbours and share a weight."""
    module, inputs, _ = sample_models.load("transformer", {"batch_size": 4})
    return module, partitioner.trace(module, inputs)


def test_stage_modules_chained_equal_the_model(gpt):
    module, graph = gpt
    pp = pipeline.plan(graph, BIG, stages=4, microbatches=2, schedule="gpipe")
    modules = build_stage_modules(graph, pp.stages, graph.example_inputs)
    value = graph.example_inputs
    for stage in modules:
        out = stage(*value)
        value = out if isinstance(out, tuple) else (out,)
    with torch.no_grad():
        torch.testing.assert_close(value[0], module(*graph.example_inputs))
    # Stage modules keep the model's parameter names (gradients compare by name).
    names = {n for m in modules for n, _ in m.named_parameters()}
    assert names <= {n for n, _ in module.named_parameters(remove_duplicate=False)}


@pytest.mark.slow
def test_training_with_1f1b_equals_the_model_in_loss_outputs_and_gradients(gpt, monkeypatch):
    from partitioner.pipeline import runner

    seen: list[RankStep] = []
    real = runner.launch
    monkeypatch.setattr(runner, "launch", lambda *a, **k: seen.extend(real(*a, **k)) or seen)
    _, graph = gpt
    pp = pipeline.plan(graph, BIG, stages=2, microbatches=4, schedule="1f1b", training="sgd")
    before = faults.child_pids()
    result = pipeline.run(pp, graph, graph.example_inputs, timeout_s=120)
    assert result.outputs_equal and result.gradients_equal
    assert result.loss is not None and result.loss > 0
    assert result.world_size == 2 and len(result.stage_forward_s) == 2
    assert all(t > 0 for t in result.rank_step_s) and result.measured_step_s == max(result.rank_step_s)
    assert [type(r) for r in seen] == [RankStep] * 2 and [r.rank for r in seen] == [0, 1]
    assert seen[0].outputs is None and seen[1].outputs  # the last stage's rank holds the outputs
    assert result.rank_step_s == tuple(r.step_s for r in seen)
    assert faults.child_pids() <= before


@pytest.mark.slow
def test_interleaved_runs_two_stages_per_process_and_equals_the_model():
    torch.manual_seed(0)
    module, inputs, _ = sample_models.load("mlp", {"batch_size": 8})
    graph = partitioner.trace(module, inputs)
    pp = pipeline.plan(graph, BIG[:2], stages=4, microbatches=4, schedule="interleaved_1f1b")
    result = pipeline.run(pp, graph, graph.example_inputs, timeout_s=120)
    assert result.world_size == 2 and len(result.stage_forward_s) == 4
    assert result.outputs_equal and result.gradients_equal is None


@pytest.mark.slow
def test_a_rank_that_dies_is_a_clear_error_and_leaves_nothing():
    torch.manual_seed(0)
    model, x = faults.DiesOnRank(rank=1).eval(), torch.randn(4, 8)
    graph = partitioner.trace(model, (x,))
    pp = pipeline.plan(graph, BIG[:2], stages=2, microbatches=2, schedule="gpipe")
    names = [name for stage in pp.stages for name in stage]
    cut = names.index("die_on_rank")  # the dying node on rank 1
    pp = dataclasses.replace(pp, stages=(tuple(names[:cut]), tuple(names[cut:])))
    before = faults.child_pids()
    with pytest.raises(RunError, match=r"rank 1 died \(exit code 7\).*rank 1 runs stage\(s\) \[1\]"):
        pipeline.run(pp, graph, (x,), timeout_s=60)
    assert faults.child_pids() <= before


def test_what_cannot_run_is_refused_before_any_process_starts(gpt):
    _, graph = gpt
    zb = pipeline.plan(graph, BIG, stages=4, microbatches=4, schedule="zero_bubble", training="sgd")
    with pytest.raises(PartitionError, match="simulated only"):
        pipeline.run(zb, graph, graph.example_inputs)
    odd = pipeline.plan(graph, BIG, stages=2, microbatches=3, schedule="gpipe")
    with pytest.raises(
        MicrobatchError,
        match=r"microbatches must divide the example batch's first dimension: 4 "
        r"does not split into 3 .*choose microbatches in 1, 2, 4",
    ) as info:
        pipeline.run(odd, graph, graph.example_inputs)
    assert info.value.batch == 4 and "batch_size" not in str(info.value)  # the library's words, not a front end's
    # torch's Schedule1F1B refuses fewer microbatches than stages: so does the project, before any process.
    one = pipeline.plan(graph, BIG, stages=2, microbatches=2, schedule="1f1b")
    with pytest.raises(MicrobatchError, match=r"microbatches must be >= 2 \(got 1\)"):
        check_runnable(dataclasses.replace(one, microbatches=1), graph.example_inputs)
    with pytest.raises(MicrobatchError, match=r"microbatches must be >= 4 \(got 2\)"):
        pipeline.plan(graph, BIG, stages=4, microbatches=2, schedule="1f1b")


@pytest.mark.slow
def test_the_command_line_runs_a_pipeline_and_prints_the_run_in_its_json():
    cli = [
        sys.executable,
        "-m",
        "cli",
        "pipeline",
        "mlp",
        "--devices",
        "2x1GiB",
        "--stages",
        "2",
        "--microbatches",
        "4",
        "--training",
        "adam",
        "--run",
        "--out",
        "-",
    ]
    done = subprocess.run(cli, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["kind"] == "pipeline" and len(data["stages"]) == 2
    assert data["run"]["outputs_equal"] is True and data["run"]["gradients_equal"] is True
    assert data["run"]["measured_step_s"] > 0
    bad = subprocess.run(
        [*cli[:-3], "--microbatches", "3", "--run"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert bad.returncode == 2 and "does not split into 3" in bad.stderr and "Traceback" not in bad.stderr
    assert "--set batch_size=" in bad.stderr  # the command line names its own knob


@pytest.mark.slow
def test_the_command_line_refuses_what_torch_refuses_before_loading_the_model():
    cli = [
        sys.executable,
        "-m",
        "cli",
        "pipeline",
        "mlp",
        "--devices",
        "4x1GiB",
        "--stages",
        "4",
        "--microbatches",
        "3",
        "--schedule",
        "1f1b",
        "--run",
    ]
    done = subprocess.run(cli, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--microbatches 3: 1f1b needs at least as many microbatches as stages" in done.stderr
    assert "use 4 or more microbatches" in done.stderr


class _Heads(torch.nn.Module):
    """A projection split into heads, then the heads transposed (as attention does)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heads = self.a(x).unflatten(-1, (2, 4))  # [batch, seq, heads, dim]
        return self.b(heads.transpose(1, 3)).sum()


def test_a_gradient_sent_back_over_a_cut_is_dense_after_the_stage_is_pickled():
    """NOTE: [Dense gradients at a cut]: gloo receives only into contiguous buffers, and torch
    shapes the buffer like the gradient the next stage computes."""
    import pickle

    x = torch.randn(1, 3, 8)
    graph = partitioner.trace(_Heads(), (x,))
    names = [graph.nodes[v].name for v in graph.op_indices]
    cut = next(i for i, n in enumerate(names) if n.startswith("unflatten")) + 1
    first, second = (
        pickle.loads(pickle.dumps(m)) for m in build_stage_modules(graph, [names[:cut], names[cut:]], (x,))
    )
    heads = first(x).detach().requires_grad_()
    (grad,) = torch.autograd.grad(second(heads), heads)
    assert grad.is_contiguous()
    # Without it the gradient comes back with the transpose's strides (what gloo refused).
    plain = heads.detach().requires_grad_()
    (raw,) = torch.autograd.grad(graph.graph_module.b(plain.transpose(1, 3)).sum(), plain)
    assert not raw.is_contiguous()
    torch.testing.assert_close(grad, raw)
