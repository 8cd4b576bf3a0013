"""Sharding as tensor parallelism: styles from a spec, predicted collectives equal to what
CommDebugMode counts on real ranks, local shards equal to the predicted shapes and memory, a
suggestion that makes the model fit, and clear errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

import partitioner
import sample_models
from partitioner import Device, ShardingError, sharding
from partitioner.sharding import tensor_parallel
from partitioner.sharding.tp_run import run_sharded


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.fc1 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 64)
        self.fc2, self.head = torch.nn.Linear(64, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.head(self.fc2(torch.relu(self.fc1(self.inp(x)))))


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(4, 16)
    return model, x, partitioner.trace(model, (x,))


def test_styles_and_predicted_collectives(mlp):
    _, _, graph = mlp
    pair = tensor_parallel.tp_plan(graph, {"fc1.weight": "2,1", "fc2.weight": "1,2"}, 2, 1e9, training=True)
    assert pair.styles == {
        "fc1": {"style": "colwise", "input": "replicate", "output": "shard"},
        "fc2": {"style": "rowwise", "input": "shard", "output": "replicate"},
    }
    assert pair.spec["fc1.bias"] == "2" and pair.spec["fc2.bias"] == "1"  # as Colwise/RowwiseParallel do
    assert pair.counts(False) == {"all_reduce": 1} and pair.counts(True) == {"all_reduce": 1}
    (forward,) = [c for c in pair.collectives if not c.backward]
    assert forward.node == "fc2" and forward.nbytes == 4 * 16 * 4
    assert forward.time_s == pytest.approx(2 * (2 - 1) / 2 * forward.nbytes / 1e9)
    alone = tensor_parallel.tp_plan(graph, {"fc1.weight": "2,1"}, 2)
    assert alone.counts() == {"all_gather": 1}  # a column-parallel output read whole is gathered


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec",
    [{"fc1.weight": "2,1", "fc2.weight": "1,2", "head.weight": "2,1"}, {"head.weight": "1,2", "fc1.weight": "2,1"}],
)
def test_real_run_matches_outputs_counts_shapes_and_memory(mlp, spec):
    model, x, graph = mlp
    plan = tensor_parallel.tp_plan(graph, spec, 2, training=True)
    result = run_sharded(model, (x,), plan, training=True, timeout_s=120)
    assert result.outputs_equal, result.max_abs_diff
    assert result.forward_counts == plan.counts(False) and result.backward_counts == plan.counts(True)
    params = sharding.parameter_shapes(graph)
    for name, value in plan.spec.items():
        assert result.local_shapes[name] == sharding.shard_shapes(params[name][0], value)[0]
    # Memory per device: the local shards' bytes (rank by rank), plus the same activations.
    activations = sharding.device_memory(graph, [Device("a", 1, 0), Device("b", 1, 1)], {})[0] - sum(
        math.prod(s) * b for s, b, _ in params.values()
    )
    used = sharding.device_memory(graph, [Device("a", 1, 0), Device("b", 1, 1)], plan.spec)
    assert [used[0] - activations, used[1] - activations] == result.local_parameter_bytes


def test_suggest_makes_the_model_fit_with_one_all_reduce_per_mlp():
    module, inputs, _ = sample_models.load("transformer")
    graph = partitioner.trace(module, inputs)
    whole = sharding.device_memory(graph, [Device("a", 1, 0), Device("b", 1, 1)], {})[0]
    devices = [Device(f"d{i}", int(whole * 0.9), i) for i in range(2)]
    spec = tensor_parallel.suggest(graph, devices)
    used = sharding.device_memory(graph, devices, spec)
    assert all(used[d.logical_id] <= d.memory_bytes for d in devices)
    plan = tensor_parallel.tp_plan(graph, spec, 2)
    pairs = {name.rpartition(".")[0].rpartition(".")[0] for name in spec}
    assert plan.counts() == {"all_reduce": len(pairs)}
    assert tensor_parallel.suggest(graph, [Device(f"d{i}", whole, i) for i in range(2)]) == {}  # fits as is
    with pytest.raises(ShardingError, match="add devices or memory"):
        tensor_parallel.suggest(graph, [Device(f"d{i}", whole // 4, i) for i in range(2)])


def test_specs_that_cannot_run_are_named(mlp):
    _, _, graph = mlp
    with pytest.raises(ShardingError, match="fc1.bias: a bias is split only with its layer's weight"):
        tensor_parallel.tp_plan(graph, {"fc1.bias": "2"}, 2)
    with pytest.raises(ShardingError, match="fc1.weight: 4 shards but 2 devices"):
        tensor_parallel.tp_plan(graph, {"fc1.weight": "4,1"}, 2)
    with pytest.raises(ShardingError, match="fc2.bias: a rowwise layer's bias is replicated"):
        tensor_parallel.tp_plan(graph, {"fc2.weight": "1,2", "fc2.bias": "2"}, 2)
    with pytest.raises(ShardingError, match="'nope.weight' the model does not have"):
        tensor_parallel.tp_plan(graph, {"nope.weight": "2,1"}, 2)


@pytest.mark.slow
def test_cli_shard_suggest_and_run(tmp_path):
    cli = [sys.executable, "-m", "cli", "shard", "transformer", "--devices", "2x7MiB"]
    done = subprocess.run(
        cli + ["--suggest", "--training", "--run", "--out", "-"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["run"]["outputs_equal"] and data["run"]["counts_match"]
    assert all(data["memory_after"][d] <= 7 * 2**20 < data["memory_before"][d] for d in data["memory_after"])
    bad = tmp_path / "spec.json"
    bad.write_text(json.dumps({"blocks.0.ln_1.weight": "2"}))
    done = subprocess.run(cli + ["--spec", str(bad)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "only the weights of Linear and Embedding" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_runs_collective_counts_read_as_words():
    from partitioner.sharding.tp_run import ShardRun

    run = ShardRun(
        outputs_equal=True,
        max_abs_diff=0.0,
        forward_counts={"all_reduce": 2, "all_gather": 1},
        backward_counts={},
        predicted_forward={"all_reduce": 2, "all_gather": 1},
        predicted_backward={},
        local_shapes={},
        local_parameter_bytes=[0, 0],
        world_size=2,
        backend="gloo",
        forward_s=1e-3,
    )
    assert run.counted() == "1 all_gather, 2 all_reduce forward, none backward" and run.counts_match
    inference = ShardRun(
        outputs_equal=True,
        max_abs_diff=0.0,
        forward_counts={},
        backward_counts=None,
        predicted_forward={},
        predicted_backward=None,
        local_shapes={},
        local_parameter_bytes=[0, 0],
        world_size=2,
        backend="gloo",
        forward_s=1e-3,
    )
    assert inference.counted() == "none forward"
