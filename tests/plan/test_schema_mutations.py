"""Plan files of the wrong shape: the reader refuses them with PlanFormatError (the rule, the
value, the fix) or reads a plan that every later step handles; never TypeError, KeyError or
IndexError. Hypothesis mutates valid plan files (types, ranges, missing keys, a byte order mark)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import partitioner
from examples import WorkedExample, reference_latencies
from explorer.builders import editing
from partitioner import Device, Plan, PlanFormatError
from partitioner.errors import PartitionError

FIXTURES = Path(__file__).parent / "fixtures"
HOSTILE = [
    None,
    True,
    False,
    0,
    -1,
    -(2**70),
    2**70,
    1.5,
    -0.5,
    math.inf,
    -math.inf,
    math.nan,
    "",
    "x",
    "-1",
    [],
    [-1],
    [99],
    ["a"],
    {},
    {"a": 1},
    [[0, 1]],
    10**400,
]


@pytest.fixture(scope="module")
def valid() -> tuple[dict[str, Any], partitioner.Graph]:
    torch.manual_seed(0)
    graph = partitioner.trace(WorkedExample(), (torch.rand(4),))
    devices = [Device(f"dev_{i}", 125, i) for i in range(4)]
    plan = partitioner.partition(
        graph, devices, mode="cost_aware", transfer_rate_bytes_per_s=2.0, node_latency=reference_latencies(graph)
    )
    return json.loads(plan.to_json()), graph


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value in the JSON tree (keys and list positions)."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data[:6]):
            out += _paths(v, prefix + (i,))
    return out


def _mutate(data: Any, path: tuple, how: str, value: Any) -> Any:
    data = json.loads(json.dumps(data))
    *head, last = path
    parent = data
    for key in head:
        parent = parent[key]
    if how == "delete":
        del parent[last]
    elif how == "append" and isinstance(parent[last], list):
        parent[last].append(value)
    else:
        parent[last] = value
    return data


def _exercise(plan: Plan, graph: partitioner.Graph) -> None:
    """What the app and the command line do with a plan that loaded (Review, check, diff)."""
    plan.violations(graph)
    plan.memory_utilisation(), plan.schedule(), plan.bound_summary(), plan.device_memory_bytes()
    assert Plan.from_json(plan.to_json()) == plan
    edit = editing.edit_from_plan(plan, source="file")
    try:
        partitioner.rescore(plan, graph)
        editing.evaluate_edit(
            edit, graph, list(plan.devices), plan.transfer_rate_bytes_per_s, plan.options.node_latency_dict, base=plan
        )
    except PartitionError:
        pass  # a plan for nodes or devices this model does not have: refused with the rule


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_plan_files_are_refused_clearly_or_read(valid, data):
    plan_dict, graph = valid
    source = data.draw(st.sampled_from(["v2", "v1"]))
    base = plan_dict if source == "v2" else json.loads((FIXTURES / "plan_v1_transformer_kl.json").read_text())
    path = data.draw(st.sampled_from(_paths(base)))
    how = data.draw(st.sampled_from(["replace", "delete", "append"]))
    value = data.draw(st.sampled_from(HOSTILE) | st.integers(-3, 8) | st.text(max_size=3))
    mutated = _mutate(base, path, how, value)
    text = json.dumps(mutated)
    if data.draw(st.booleans()):
        text = "\ufeff" + text
    payload: str | bytes = text.encode() if data.draw(st.booleans()) else text
    try:
        plan = Plan.from_json(payload)
    except PlanFormatError as exc:
        assert "\n" in str(exc) or "must" in str(exc) or "lacks" in str(exc) or "JSON" in str(exc)
        return
    _exercise(plan, graph)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["edges"][0].update(dst=9), r"edges\[0\]\.dst names partition 9, which the plan does not have"),
        (lambda d: d["partitions"][0].update(id=-1), r"partitions\[0\]\.id must be a whole number from 0 .*\(got -1\)"),
        (lambda d: d["partitions"][1].update(parents=[7]), r"partitions\[1\]\.parents names partition 7"),
        (lambda d: d.update(critical_path=[0, 12]), r"critical_path names partition 12"),
        (lambda d: d["partitions"][0].update(memory_bytes="12"), r"memory_bytes must be a whole number .*\(got '12'\)"),
        (lambda d: d.update(latency_s=float("nan")), r"latency_s must be a non-negative number \(got nan\)"),
        (lambda d: d["provenance"].update(options=3), r"provenance\.options must be an object \(got 3\)"),
        (lambda d: d["provenance"]["options"].update(saturate_host="yes"), r"saturate_host must be true or false"),
        (lambda d: d["devices"][1].update(logical_id=0), r"devices\[1\]\.logical_id 0 is used by another device"),
        (lambda d: d.update(mode=5), r"mode must be a string \(got 5\)"),
        (
            lambda d: d["provenance"]["options"]["node_latency"].update(add=[10**400, 0]),
            r"node_latency\['add'\] must be a pair \(memory seconds, compute seconds\)",
        ),
        (lambda d: d["partitions"][0].update(latency_s=10**400), r"partitions\[0\]\.latency_s must be a non-negative"),
    ],
)
def test_each_rule_names_the_field_the_value_and_the_fix(valid, change, message):
    data = json.loads(json.dumps(valid[0]))
    change(data)
    with pytest.raises(PlanFormatError, match=message) as info:
        Plan.from_json(json.dumps(data))
    assert "fix the file, or make or export the plan again" in str(info.value)


def test_schema_1_options_of_the_wrong_type_are_refused():
    data = json.loads((FIXTURES / "plan_v1_transformer_kl.json").read_text())
    data["options"] = 3
    with pytest.raises(PlanFormatError, match=r"options must be an object or null in a schema-1 plan \(got 3\)"):
        Plan.from_dict(data)
    data["options"] = {"search_budget": "many"}
    with pytest.raises(PlanFormatError, match=r"options\.search_budget must be a whole number from 1"):
        Plan.from_dict(data)


def test_a_byte_order_mark_is_read(valid):
    text = json.dumps(valid[0])
    plain = Plan.from_json(text)
    assert Plan.from_json("\ufeff" + text) == plain
    assert Plan.from_json(("\ufeff" + text).encode("utf-8")) == plain
    with pytest.raises(PlanFormatError, match="not UTF-8 text"):
        Plan.from_json(b"\xff\xfe{}")
