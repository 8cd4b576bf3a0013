"""A plan file larger than its model allows is refused before it is built (partitioner.plan.size)."""

from __future__ import annotations

import json

import pytest

from partitioner import Plan, PlanFormatError, parse_devices, partition
from partitioner.plan.size import MAX_PLAN_ENTRIES, check_plan_size, plan_from_json
from partitioner.testing.synthetic import synthetic_graph


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph([(i, i + 1) for i in range(11)], [1000] * 12, name="chain")


@pytest.fixture(scope="module")
def plan_data(graph):
    return json.loads(partition(graph, parse_devices("4x1GiB"), "size_based", force_partition=True).to_json())


def many(plan_data, n: int, per: int = 1) -> dict:
    """``n`` partitions of ``per`` node names each (one shared dict: only the counts matter here)."""
    part = dict(plan_data["partitions"][0], node_names=[f"x{k}" for k in range(per)])
    return dict(plan_data, partitions=[part] * n)


def test_a_plan_made_for_the_model_passes(graph, plan_data):
    check_plan_size(plan_data, graph)
    check_plan_size(plan_data)
    assert plan_from_json(json.dumps(plan_data), graph) == Plan.from_dict(plan_data)


def test_more_partitions_than_the_model_has_operations_are_refused(graph, plan_data):
    ops = len(graph.op_names)
    check_plan_size(many(plan_data, ops), graph)  # as many as operations: a one-op-a-partition plan
    with pytest.raises(PlanFormatError, match=rf"at most {ops} partitions; .* has {ops} operations.* has {ops + 1}\)"):
        plan_from_json(json.dumps(many(plan_data, ops + 1)), graph)


def test_more_node_entries_than_operations_are_refused(graph, plan_data):
    ops = len(graph.op_names)
    with pytest.raises(PlanFormatError, match=rf"names at most {ops} nodes.*names {2 * ops + 2}\)"):
        check_plan_size(many(plan_data, 2, per=ops + 1), graph)


def test_without_a_model_the_fixed_cap_stands_in(plan_data):
    check_plan_size(many(plan_data, MAX_PLAN_ENTRIES))
    with pytest.raises(PlanFormatError, match=f"at most {MAX_PLAN_ENTRIES:,} partitions"):
        check_plan_size(many(plan_data, MAX_PLAN_ENTRIES + 1))
    with pytest.raises(PlanFormatError, match="devices"):
        check_plan_size(dict(plan_data, devices=plan_data["devices"] * (MAX_PLAN_ENTRIES // 4 + 1)))


def test_malformed_json_keeps_from_jsons_message(graph):
    with pytest.raises(PlanFormatError, match="not valid JSON"):
        plan_from_json("{", graph)
    check_plan_size([1, 2], graph)  # not a plan's shape: from_dict reports it
