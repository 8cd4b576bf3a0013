"""Plan: JSON round trip, format errors, validation messages."""

import dataclasses
import json
from pathlib import Path

import pytest

import partitioner
import sample_models
from examples import reference_latencies
from partitioner import Device, Plan, PlanFormatError
from partitioner.plan import validate


@pytest.fixture
def plan_and_graph(worked_example):
    graph, _ = worked_example
    devices = [Device(f"dev_{i}", 125, i) for i in range(4)]
    plan = partitioner.partition(
        graph, devices, mode="cost_aware", transfer_rate_bytes_per_s=2.0, node_latency=reference_latencies(graph)
    )
    return plan, graph


def test_json_round_trip_is_exact(plan_and_graph):
    plan, _ = plan_and_graph
    text = plan.to_json()
    assert Plan.from_json(text) == plan
    data = json.loads(text)
    assert data["schema_version"] == partitioner.SCHEMA_VERSION
    assert set(data["provenance"]["options"]["node_latency"]) == {n for n in plan.node_to_partition()}


def test_malformed_json_names_line_and_fix():
    with pytest.raises(PlanFormatError, match=r"not valid JSON \(line 1, column 2.*export the plan again"):
        Plan.from_json("{oops")


def test_wrong_schema_version(plan_and_graph):
    plan, _ = plan_and_graph
    data = plan.to_dict() | {"schema_version": 99}
    with pytest.raises(PlanFormatError, match=r"schema_version must be one of \[1, 2\] \(got 99\)"):
        Plan.from_dict(data)


def test_missing_field(plan_and_graph):
    plan, _ = plan_and_graph
    data = plan.to_dict()
    del data["partitions"][0]["device_ids"]
    with pytest.raises(PlanFormatError, match="lacks the field 'device_ids'"):
        Plan.from_dict(data)


def test_every_violation_kind_is_listed(plan_and_graph):
    plan, graph = plan_and_graph
    mapping = plan.node_to_partition()
    first, second = plan.partitions[0].node_names[0], plan.partitions[-1].node_names[0]
    # A cycle: put a late node into the first partition and an early one into the last.
    mapping[second], mapping[first] = 0, plan.partitions[-1].id
    bad = partitioner.evaluate_plan(graph, plan.devices, mapping, plan.partition_to_devices())
    assert any("cycle" in v.message for v in bad.violations(graph))
    # Duplicated node, unknown device, over capacity.
    data = plan.to_dict()
    data["partitions"][1]["node_names"] += (data["partitions"][0]["node_names"][0],)
    data["partitions"][0]["device_ids"] = [9]
    broken = Plan.from_dict(data)
    problems = broken.violations(graph)
    assert any("is in partition 0 and partition 1" in p.message for p in problems)
    assert any("unknown device 9; known logical ids are [0, 1, 2, 3]" in p.message for p in problems)
    small = [Device(f"dev_{i}", 10, i) for i in range(4)]
    cramped = partitioner.evaluate_plan(graph, small, plan.node_to_partition(), plan.partition_to_devices())
    assert any(
        "of its 10 B" in p.message and "move nodes to another device or add memory" in p.message
        for p in cramped.violations(graph)
    )


def test_missing_and_unknown_nodes(plan_and_graph):
    plan, graph = plan_and_graph
    data = plan.to_dict()
    data["partitions"][0]["node_names"] = ["not_a_node"]
    problems = Plan.from_dict(data).violations(graph)
    assert any("do not exist in the model: 'not_a_node' (partition 0)" in p.message for p in problems)
    assert any("in no partition" in p.message for p in problems)
    with pytest.raises(partitioner.InvalidPlanError, match="violation"):
        Plan.from_dict(data).check(graph)


def test_schedule_ends_at_the_plan_latency(plan_and_graph):
    plan, _ = plan_and_graph
    times = plan.schedule()
    assert max(finish for _, finish in times.values()) == plan.latency_s
    for e in plan.edges:
        assert times[e.dst][0] >= times[e.src][1] + e.latency_s


FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def transformer_graph():
    module, inputs, _ = sample_models.load("transformer")
    return partitioner.trace(module, inputs, name="transformer")


@pytest.mark.parametrize("name", ["plan_v1_transformer_kl.json", "plan_v1_transformer_aot.json"])
def test_schema_1_plans_written_before_still_load(name, transformer_graph):
    text = (FIXTURES / name).read_text()
    assert json.loads(text)["schema_version"] == 1
    plan = Plan.from_json(text)
    assert plan.violations(transformer_graph) == []
    # The v1 file's figures survive, and the derived schedule ends at its latency.
    assert plan.latency_s == json.loads(text)["latency_s"]
    assert max(finish for _, finish in plan.schedule().values()) == pytest.approx(plan.latency_s)
    assert plan.transfer_rate_bytes_per_s == plan.options.transfer_rate_bytes_per_s == 1e9
    # Written again it is schema 2, and reads back equal.
    again = json.loads(plan.to_json())
    assert again["schema_version"] == 2 and Plan.from_json(plan.to_json()) == plan
    # An aot_based plan no longer carries its mapping twice: the partitions are the mapping.
    assert "node_to_partition" not in json.dumps(again["provenance"])
    # Re-scored on today's model, the same partitions give the same latency.
    rescored = partitioner.evaluate_plan(
        transformer_graph,
        list(plan.devices),
        plan.node_to_partition(),
        plan.partition_to_devices(),
        plan.transfer_rate_bytes_per_s,
    )
    assert rescored.latency_s == pytest.approx(plan.latency_s)


def test_violations_are_typed_and_split_filters_by_kind(plan_and_graph):
    plan, graph = plan_and_graph
    # A node named like a device must not be mistaken for a device problem.
    data = plan.to_dict()
    big = max(range(len(plan.partitions)), key=lambda i: len(plan.partitions[i].node_names))
    lost = plan.partitions[big].node_names[-1]
    data["partitions"][big]["node_names"] = list(plan.partitions[big].node_names[:-1])
    missing = Plan.from_dict(data).violations(graph)
    assert [v.kind for v in missing] == [validate.MISSING_NODE] and missing[0].node == lost
    # A missing node is not also reported as a cycle.
    assert all(v.kind != validate.CYCLE for v in missing)
    small = [Device(f"dev_{i}", 10, i) for i in range(4)]
    cramped = partitioner.evaluate_plan(graph, small, plan.node_to_partition(), plan.partition_to_devices())
    kinds = {v.kind for v in cramped.violations(graph)}
    assert kinds == {validate.MEMORY}
    assert all(v.device is not None for v in cramped.violations(graph))
    data = plan.to_dict()
    data["partitions"][0]["device_ids"] = [9]
    unknown = Plan.from_dict(data).violations(graph)
    assert {v.kind for v in unknown} == {validate.UNKNOWN_DEVICE} and unknown[0].device == 9
    assert set(validate.KINDS) >= {v.kind for v in missing + unknown}


def test_split_keeps_a_node_called_like_a_device():
    import torch

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.to_device = torch.nn.ReLU()

        def forward(self, x):
            return self.to_device(x) * 2

    module, x = M(), torch.randn(4)
    graph = partitioner.trace(module, (x,))
    fits = partitioner.partition(graph, [Device("d", 10**6, 0)])
    plan = dataclasses.replace(fits, devices=(Device("d", 10, 0),))  # over memory: split ignores that
    assert [v.kind for v in plan.violations(graph)] == [validate.MEMORY]
    torch.testing.assert_close(partitioner.split(plan, graph)(x), module(x))
    data = plan.to_dict()
    data["partitions"][0]["node_names"] = [n for n in data["partitions"][0]["node_names"] if n != "to_device"]
    broken = Plan.from_dict(data)
    assert any(v.kind == validate.MISSING_NODE and v.node == "to_device" for v in broken.violations(graph))
    with pytest.raises(partitioner.InvalidPlanError, match="in no partition: 'to_device'"):
        partitioner.split(broken, graph)
