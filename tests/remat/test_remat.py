"""Training memory from torch's own min-cut: what the backward reads and what it recomputes, at a
budget, named by the traced graph's nodes; in a worker process with a time limit."""

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import partitioner
import sample_models
from partitioner import Device, PartitionError, RunError, remat
from partitioner.testing.faults import DiesOnRank, child_pids


class GeluMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2, self.l3 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 256), torch.nn.Linear(256, 64)

    def forward(self, x):
        return self.l3(F.gelu(self.l2(F.gelu(self.l1(x)))))


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    model, x = GeluMLP(), torch.randn(32, 64)
    graph = partitioner.trace(model, (x,))
    return graph, remat.sweep(graph, (x,), (0.0, 0.5, 1.0), timeout_s=None)


@pytest.fixture(scope="module")
def block():
    model, inputs, _ = sample_models.load("transformer", {"n_layer": 1})
    graph = partitioner.trace(model, inputs)
    return graph, remat.sweep(graph, inputs, (0.0, 0.5, 1.0), timeout_s=None)


@pytest.mark.parametrize("case", ["mlp", "block"])
def test_budgets_from_save_all_to_recompute_all(case, request):
    graph, (zero, half, one) = request.getfixturevalue(case)
    assert one.recomputed == () and one.recompute_flops == 0  # save what min-cut would: no recompute
    assert zero.saved == () and zero.saved_activation_bytes == 0  # only parameters and inputs saved
    assert zero.saved_input_bytes > 0 and len(zero.recomputed) > len(half.recomputed) > 0
    assert zero.saved_activation_bytes <= half.saved_activation_bytes < one.saved_activation_bytes
    assert zero.recompute_flops > half.recompute_flops > 0
    names = set(graph.index)
    for r in (zero, half, one):
        assert set(r.saved) <= names and set(r.recomputed) <= names
        assert sum(r.saved_bytes_by_node.values()) == r.saved_activation_bytes
        assert r.gradients_equal  # the split forward and backward give eager's gradients


def test_a_budget_in_between_recomputes_the_cheap_pointwise_ops_first(mlp):
    graph, (_, half, one) = mlp
    assert set(half.recomputed) == {"gelu", "gelu_1"}  # not the matmuls
    assert {"gelu", "gelu_1"} <= set(one.saved) and not {"gelu", "gelu_1"} & set(half.saved)


def test_training_memory_per_device_and_the_budget_that_fits(mlp):
    graph, results = mlp
    devices = [Device("a", 1 << 30, 0), Device("b", 1 << 30, 1)]
    plan = partitioner.partition(graph, devices, mode="largest_first", force_partition=True)
    one = results[-1]
    used = remat.training_memory(plan, graph, one, optimizer="adam")
    assert sum(u.activations for u in used.values()) == one.saved_activation_bytes
    params = sum(p.numel() * 4 for p in GeluMLP().parameters())
    assert sum(u.parameters for u in used.values()) == params
    assert all(u.optimizer == 2 * u.parameters == 2 * u.gradients for u in used.values())
    # "none" trains without optimizer state (weights and gradients); None is inference (weights alone).
    plain = remat.training_memory(plan, graph, one, optimizer="none")
    assert all(u.gradients == u.parameters and u.optimizer == 0 for u in plain.values())
    inference = remat.training_memory(plan, graph, one, optimizer=None)
    assert all(u.gradients == u.optimizer == 0 and u.parameters > 0 for u in inference.values())
    with pytest.raises(PartitionError, match="unknown optimizer 'adamw'; choose one of adam, sgd, none"):
        remat.training_memory(plan, graph, one, optimizer="adamw")
    # Each device exactly as large as budget 0.5 needs: 1.0 does not fit, 0.5 is the largest that does.
    need = {r.budget: {d: u.total_bytes for d, u in remat.training_memory(plan, graph, r).items()} for r in results}
    assert sum(need[0.0].values()) <= sum(need[0.5].values()) < sum(need[1.0].values())
    tight = [Device(d.name, need[0.5][d.logical_id], d.logical_id) for d in devices]
    tight_plan = partitioner.evaluate_plan(
        graph, tight, plan.node_to_partition(), {p.id: list(p.device_ids) for p in plan.partitions}
    )
    assert remat.largest_fitting_budget(tight_plan, graph, results).budget == 0.5
    smaller = [Device(d.name, need[0.0][d.logical_id] - 1, d.logical_id) for d in devices]
    assert (
        remat.largest_fitting_budget(
            partitioner.evaluate_plan(
                graph, smaller, plan.node_to_partition(), {p.id: list(p.device_ids) for p in plan.partitions}
            ),
            graph,
            results,
        )
        is None
    )


@pytest.mark.slow
def test_the_worker_reports_a_crash_and_a_time_limit_and_leaves_no_process(monkeypatch):
    before = child_pids()
    x = torch.randn(4, 8)
    graph = partitioner.trace(DiesOnRank(rank=0), (x,))  # traced here, where RANK is not 0
    monkeypatch.setenv("RANK", "0")  # the worker inherits it: its forward exits at once
    with pytest.raises(RunError, match=r"worker died \(exit code 7\)"):
        remat.analyze(graph, (x,), budget=0.5, timeout_s=120)
    monkeypatch.delenv("RANK")
    with pytest.raises(RunError, match="time limit"):
        remat.analyze(GeluMLP(), (torch.randn(4, 64),), budget=0.5, timeout_s=0.5)
    assert child_pids() <= before


def test_bad_budget_and_loss_are_named():
    with pytest.raises(PartitionError, match="budget must be between 0 and 1"):
        remat.analyze(GeluMLP(), (torch.randn(4, 64),), budget=1.5)
    with pytest.raises(PartitionError, match="unknown loss 'max'"):
        remat.analyze(GeluMLP(), (torch.randn(4, 64),), loss="max")


@pytest.mark.slow
def test_cli_remat_json_and_bad_budget():
    cli = [sys.executable, "-m", "cli"]
    done = subprocess.run(
        cli + ["remat", "mlp", "--budget", "0.5", "--out", "-"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    (result,) = data["results"]
    assert result["budget"] == 0.5 and result["gradients_equal"] and result["recomputed"]
    bad = subprocess.run(cli + ["remat", "mlp", "--budget", "2"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "budget must be between 0 and 1" in bad.stderr and "Traceback" not in bad.stderr
