"""A run starts a process only for the devices that hold a partition: idle devices, the first one
included, get no rank, and the outputs still equal the model."""

from __future__ import annotations

import pytest
import torch

import partitioner
from partitioner import Device
from partitioner.runtime.execute import prepare, ranked_devices
from partitioner.testing import faults


class Chain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.fixture(scope="module")
def sparse_plan():
    torch.manual_seed(0)
    model, x = Chain().eval(), torch.randn(3, 8)
    graph = partitioner.trace(model, (x,))
    devices = [Device(f"d{i}", 10**6, i) for i in range(6)]  # 0, 2, 4, 5 stay idle
    where = {"a": 0, "relu": 0}
    plan = partitioner.evaluate_plan(graph, devices, {n: where.get(n, 1) for n in graph.op_names}, {0: [3], 1: [1]})
    assert plan.violations(graph) == []
    return model, x, graph, plan


def test_only_busy_devices_get_a_rank_in_the_plans_order(sparse_plan):
    model, x, graph, plan = sparse_plan
    assert [d.logical_id for d in ranked_devices(plan)] == [1, 3]
    owners = prepare(plan, graph, (x,)).owners
    ranks = {r for held in owners.values() for r in held}
    assert ranks == {0, 1}  # device 1 is rank 0, device 3 rank 1; nothing for the four idle ones


@pytest.mark.slow
def test_a_plan_with_idle_devices_runs_on_its_busy_ones_and_equals_the_model(sparse_plan):
    model, x, graph, plan = sparse_plan
    before = faults.child_pids()
    result = partitioner.run(plan, graph, (x,), backend="gloo", timeout_s=120)
    assert result.world_size == 2 and result.outputs_equal
    torch.testing.assert_close(result.outputs, model(x))
    assert faults.child_pids() <= before
