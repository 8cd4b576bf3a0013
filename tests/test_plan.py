"""Plan: JSON round trip, format errors, validation messages."""

import json

import pytest

import partitioner
from partitioner import Device, Plan, PlanFormatError

from examples import reference_latencies


@pytest.fixture
def plan_and_graph(worked_example):
    graph, _ = worked_example
    devices = [Device(f"dev_{i}", 125, i) for i in range(4)]
    plan = partitioner.partition(graph, devices, mode="cost_aware", transfer_rate_bytes_per_s=2.0,
                                 node_latency=reference_latencies(graph))
    return plan, graph


def test_json_round_trip_is_exact(plan_and_graph):
    plan, _ = plan_and_graph
    text = plan.to_json()
    assert Plan.from_json(text) == plan
    data = json.loads(text)
    assert data["schema_version"] == partitioner.SCHEMA_VERSION
    assert data["options"]["node_latency"] == "given"


def test_malformed_json_names_line_and_fix():
    with pytest.raises(PlanFormatError, match=r"not valid JSON \(line 1, column 2.*export it again"):
        Plan.from_json("{oops")


def test_wrong_schema_version(plan_and_graph):
    plan, _ = plan_and_graph
    data = plan.to_dict() | {"schema_version": 99}
    with pytest.raises(PlanFormatError, match="schema_version must be 1 .got 99"):
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
    assert any("cycle" in v for v in bad.violations(graph))
    # Duplicated node, unknown device, over capacity.
    data = plan.to_dict()
    data["partitions"][1]["node_names"] += (data["partitions"][0]["node_names"][0],)
    data["partitions"][0]["device_ids"] = [9]
    broken = Plan.from_dict(data)
    problems = broken.violations(graph)
    assert any("is in partition 0 and partition 1" in p for p in problems)
    assert any("unknown device 9; known logical ids are [0, 1, 2, 3]" in p for p in problems)
    small = [Device(f"dev_{i}", 10, i) for i in range(4)]
    cramped = partitioner.evaluate_plan(graph, small, plan.node_to_partition(), plan.partition_to_devices())
    assert any("of its 10 B" in p and "move nodes to another device or add memory" in p
               for p in cramped.violations(graph))


def test_missing_and_unknown_nodes(plan_and_graph):
    plan, graph = plan_and_graph
    data = plan.to_dict()
    data["partitions"][0]["node_names"] = ["not_a_node"]
    problems = Plan.from_dict(data).violations(graph)
    assert any("do not exist in the model: 'not_a_node' (partition 0)" in p for p in problems)
    assert any("in no partition" in p for p in problems)
    with pytest.raises(partitioner.InvalidPlanError, match="violation"):
        Plan.from_dict(data).check(graph)


def test_schedule_ends_at_the_plan_latency(plan_and_graph):
    plan, _ = plan_and_graph
    times = plan.schedule()
    assert max(finish for _, finish in times.values()) == plan.latency_s
    for e in plan.edges:
        assert times[e.dst][0] >= times[e.src][1] + e.latency_s
