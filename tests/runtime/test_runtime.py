"""Real runs on torch.distributed (gloo, spawned processes): outputs equal the model's, failures
end the run with a clear error within the time limit, and nothing is left behind. Each run costs
a few seconds (every process imports torch), so the cases are few and combined."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch

import partitioner
from examples import set_args
from partitioner import Device, RunError
from partitioner.processes.launch import free_port, launch
from partitioner.testing import faults


class ForkJoin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = (torch.nn.Linear(16, 16) for _ in range(4))

    def forward(self, x):
        h = torch.relu(self.a(x))
        left, right = self.b(h), torch.tanh(self.c(h))
        return self.d(left + right), right.sum()


@pytest.fixture(scope="module")
def fork_join():
    torch.manual_seed(0)
    model, x = ForkJoin().eval(), torch.randn(4, 16)
    return model, x, partitioner.trace(model, (x,))


@pytest.mark.slow
def test_a_fork_join_plan_on_three_processes_equals_the_model(fork_join):
    model, x, graph = fork_join
    before = faults.child_pids()
    where = {"a": 0, "relu": 0, "b": 1, "c": 2, "tanh": 2}
    plan = partitioner.evaluate_plan(
        graph,
        [Device(f"d{i}", 10**6, i) for i in range(3)],
        {n: where.get(n, 3) for n in graph.op_names},
        {0: [0], 1: [1], 2: [2], 3: [0]},
    )
    assert plan.violations(graph) == [] and len(plan.partitions) == 4
    result = partitioner.run(plan, graph, (x,), backend="gloo", timeout_s=120)
    torch.testing.assert_close(result.outputs, model(x))
    assert result.outputs_equal and result.world_size == 3 and result.measured_latency_s > 0
    by_id = {p.id: p for p in result.partitions}
    assert by_id[3].received_bytes > 0 and by_id[0].received_bytes == 0  # the join received
    assert all(p.compute_s > 0 for p in result.partitions)
    assert faults.child_pids() <= before


@pytest.mark.slow
def test_a_replicated_plan_runs_on_every_device_holding_it(fork_join):
    model, x, graph = fork_join
    need = max(partitioner.accelerator._base.node_alone_bytes(graph, v) for v in graph.op_indices)
    devices = [Device(f"d{i}", max(need, graph.total_size_bytes * 3 // 4), i) for i in range(4)]
    plan = partitioner.partition(graph, devices, saturate_host=True, force_partition=True)
    assert any(len(p.device_ids) > 1 for p in plan.partitions)
    result = partitioner.run(plan, graph, (x,), timeout_s=120)
    torch.testing.assert_close(result.outputs, model(x))
    assert {r for p in result.partitions for r in p.ranks} <= set(range(4))


@pytest.mark.slow
def test_failures_end_the_run_with_the_rank_and_leave_nothing_behind():
    before = faults.child_pids()
    assert launch(faults.all_reduce_rank, 2, timeout_s=60) == [1, 1]
    with pytest.raises(RunError, match=r"rank 1 failed: ValueError: injected failure on rank 1") as raised:
        launch(faults.raise_on, 2, (1,), timeout_s=60)
    assert raised.value.rank == 1
    with pytest.raises(RunError, match=r"time limit of 8 s; rank\(s\) \[1\] had not finished"):
        launch(faults.sleep_on, 2, (1, 600.0), timeout_s=8)
    with pytest.raises(RunError, match=r"rank 0 died \(exit code 7\)"):
        launch(faults.exit_on, 2, (0,), timeout_s=60)
    assert faults.child_pids() <= before
    for _ in range(2):  # the ports runs used are released: two in a row bind again
        with socket.socket() as s:
            s.bind(("127.0.0.1", free_port()))


def test_wrong_inputs_are_a_clear_error_before_any_process_starts(fork_join):
    _, x, graph = fork_join
    plan = partitioner.partition(graph, [Device(f"d{i}", 10**6, i) for i in range(2)], force_partition=True)
    before = faults.child_pids()
    with pytest.raises(RunError, match=r"does not run on the example inputs.*4x3 and 16x16"):
        partitioner.run(plan, graph, (torch.randn(4, 3),), timeout_s=60)  # wrong input width
    assert faults.child_pids() <= before


@pytest.mark.slow
def test_the_command_line_runs_a_plan_and_calibrates(tmp_path):
    import json
    import subprocess
    import sys

    plan = tmp_path / "plan.json"
    cli = [sys.executable, "-m", "cli"]
    model = ["mlp", *set_args(n_layer=4, hidden=64, in_features=64, out_features=64, batch_size=8)]
    subprocess.run(
        cli + ["plan", *model, "--devices", "2x64KiB", "--out", str(plan)],
        check=True,
        capture_output=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    import os

    env = dict(os.environ, PARTITION_EXPLORER_CACHE=str(tmp_path))  # measured here, not in the person's cache
    done = subprocess.run(
        cli + ["run", str(plan), *model, "--calibrate", "--json", "--timeout", "120"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["calibrated"] and report["run"]["outputs_equal"] is True
    assert report["run"]["world_size"] == 2 and report["run"]["measured_latency_s"] > 0
    assert all(p["predicted_s"] > 0 for p in report["run"]["partitions"])  # measured, not roofline zeros
    assert (tmp_path / "profiles" / "local.json").is_file()  # the profile it measured, cached


@pytest.mark.slow
def test_the_same_entry_point_runs_under_torchrun(tmp_path):
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    plan = tmp_path / "plan.json"
    subprocess.run(
        [sys.executable, "-m", "cli", "plan", "mlp", "--devices", "2x2MiB", "--out", str(plan)],
        check=True,
        capture_output=True,
        cwd=root,
    )
    torchrun = Path(sys.executable).with_name("torchrun")
    done = subprocess.run(
        [
            str(torchrun),
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "cli",
            "run",
            str(plan),
            "mlp",
            "--torchrun",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {**report, "rank": 0, "world_size": 2, "outputs_equal": True}
