"""In-place ops: a plan may cut between a mutation and its readers, and the split still equals
the model (the trace makes in-place ops out-of-place and rewires later readers)."""

from __future__ import annotations

import operator
import random

import torch
import torch.fx as fx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import partitioner
from partitioner import Device


class Mutates(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        y.mul_(2.0)
        return y.tanh()


def _tiny_devices(graph, count=3):
    need = max(partitioner.accelerator._base.node_alone_bytes(graph, v) for v in graph.op_indices)
    return [Device(f"d{i}", need, i) for i in range(count)]


def test_the_reported_case_splits_right():
    model, x = Mutates(), torch.randn(8)
    graph = partitioner.trace(model, (x,))
    for mode in ("size_based", "cost_aware", "kl_based"):
        plan = partitioner.partition(graph, _tiny_devices(graph), mode=mode)
        assert len(plan.partitions) == 3  # relu, mul, tanh each alone: the cut the bug needed
        assert plan.violations(graph) == []
        torch.testing.assert_close(partitioner.split(plan, graph)(x), model(x))


def test_inplace_modules_and_operators_keep_the_persons_module():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = torch.nn.ReLU(inplace=True)
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.fc(x)
            skip = h
            self.act(h)  # mutates h, which skip aliases
            skip += 1.0
            return skip * 2

    model, x = Block(), torch.randn(2, 8)
    expected = model(x.clone())
    graph = partitioner.trace(model, (x,))
    assert model.act.inplace is True  # tracing did not change the person's model
    plan = partitioner.partition(graph, _tiny_devices(graph, 4), mode="size_based")
    assert len(plan.partitions) > 1
    torch.testing.assert_close(partitioner.split(plan, graph)(x.clone()), expected)


def _random_module_with_inplace(seed: int, n_ops: int) -> tuple[fx.GraphModule, torch.Tensor]:
    rng = random.Random(seed)
    root = torch.nn.Module()
    graph = fx.Graph()
    values = [graph.placeholder("x")]
    for i in range(n_ops):
        a = rng.choice(values)
        kind = rng.random()
        if kind < 0.3:
            root.add_module(f"fc{i}", torch.nn.Linear(4, 4))
            values.append(graph.call_module(f"fc{i}", (a,)))
        elif kind < 0.55:
            values.append(graph.call_function(torch.add, (a, rng.choice(values))))
        elif kind < 0.7:
            values.append(graph.call_function(torch.relu, (a,)))
        elif kind < 0.85 and a.op != "placeholder":
            # In place: its result is the mutated tensor; later readers of `a` see the change.
            values.append(graph.call_method(rng.choice(["mul_", "add_", "sub_"]), (a, 1.5)))
        elif a.op != "placeholder":
            values.append(graph.call_function(operator.iadd, (a, 0.5)))
        else:
            values.append(graph.call_function(torch.tanh, (a,)))
    graph.output(tuple(values[1:]))
    return fx.GraphModule(root, graph), torch.randn(4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.integers(3, 14), st.sampled_from(["size_based", "cost_aware", "kl_based"]))
@example(4954, 6, "cost_aware")
def test_split_equals_the_model_with_inplace_ops(seed, n_ops, mode):
    gm, x = _random_module_with_inplace(seed, n_ops)
    expected = gm(x.clone())
    graph = partitioner.trace(gm, (x,))
    # Devices that each hold the model, so a plan always exists (half the model each can hold
    # none: seed 4954, 6 ops, where every op reads the input and each device must store it);
    # force_partition spreads the model over two or more of them all the same.
    devices = [Device(f"d{i}", graph.total_size_bytes, i) for i in range(4)]
    plan = partitioner.partition(graph, devices, mode=mode, force_partition=True)
    got = partitioner.split(plan, graph)(x.clone())
    torch.testing.assert_close(got, expected)
