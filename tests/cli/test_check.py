"""``check``, in process: the CLI's own plan passes it, every violation kind fails it with its
message, and :func:`check_plan`'s messages and notes behind them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import DEVICES, EDITS, LABEL, MODEL, SETTINGS, bad_device, cycle, edited, missing, run_main, unknown

import partitioner
import sample_models
from partitioner import Plan
from partitioner.accelerator.check import check_plan


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory, base_plan: Plan) -> Path:
    """A folder with base.json and one plan file per edit in :data:`EDITS`."""
    work = tmp_path_factory.mktemp("check")
    (work / "base.json").write_text(base_plan.to_json())
    for name, edit in EDITS.items():
        (work / f"{name}.json").write_text(json.dumps(edited(base_plan, edit)))
    return work


def test_plan_then_check_round_trip_passes(tmp_path, capsys):
    rt, split = tmp_path / "rt.json", tmp_path / "split.json"
    argv = ["--devices", DEVICES, "--out", str(rt), "--export", "pipeline-split-spec", "--export-out", str(split)]
    code, _, err = run_main(capsys, "plan", *MODEL, *argv)
    assert code == 0 and f"wrote plan to {rt}" in err
    code, out, _ = run_main(capsys, "check", str(rt), *MODEL, "--devices", DEVICES, "--max-memory-utilisation", "0.9")
    assert code == 0 and out.startswith(f"OK: {rt} is valid for {LABEL}")
    assert "4 partition(s)" in out and "within --max-memory-utilisation 0.9" in out
    plan = Plan.from_json(rt.read_text())
    assert len(plan.partitions) == 4 and plan.model.startswith("mlp(")
    spec = json.loads(split.read_text())
    assert spec["split_spec"] == {"layers.1": "beginning", "layers.2": "beginning", "layers.3": "beginning"}


@pytest.mark.parametrize(
    "file, flags, expected",
    [
        ("missing", [], "1 node(s) of the model are in no partition: 'relu_1'; assign each to a partition"),
        ("unknown", [], "node(s) in the plan do not exist in the model: 'ghost' (partition 0); remove them"),
        (
            "base",
            ["--devices", "4x16KiB"],
            "device dev_0 (id 0) holds partition(s) [0] using 22.2 KiB of its 16 KiB (6.25 KiB over)",
        ),
        ("cycle", [], "partitions depend on each other in a cycle 0 -> 1 -> 2 -> 0"),
        (
            "bad_device",
            ["--devices", DEVICES],
            "partition 3 is placed on unknown device 7; known logical ids are [0, 1, 2, 3]",
        ),
        (
            "base",
            ["--max-latency", "1e-9", "--max-memory-utilisation", "0.5"],
            "exceeds the budget --max-latency 1e-09",
        ),
    ],
    ids=["missing", "unknown", "memory", "cycle", "device", "budget"],
)
def test_check_reports_each_violation_kind_and_exits_1(plans, capsys, file, flags, expected):
    code, out, _ = run_main(capsys, "check", str(plans / f"{file}.json"), *MODEL, *flags)
    assert code == 1 and out.startswith("FAIL: ")
    assert expected in out
    if "--max-latency" in flags:
        assert "exceeds the budget --max-memory-utilisation 0.5 (50.0%)" in out
        assert "2 violations" in out


def test_check_plan_messages(graph, base_plan):
    devs = partitioner.parse_devices(DEVICES)
    assert check_plan(base_plan, graph, devs).ok

    def violations(edit: Any, devices: Any = devs, **kw: Any) -> str:
        plan = Plan.from_dict(edited(base_plan, edit)) if edit else base_plan
        result = check_plan(plan, graph, devices, **kw)
        assert not result.ok
        return "\n".join(v.message for v in result.violations)

    assert "in no partition: 'relu_1'" in violations(missing)
    assert "do not exist in the model: 'ghost' (partition 0)" in violations(unknown)
    assert "cycle 0 -> 1 -> 2 -> 0" in violations(cycle)
    assert "unknown device 7" in violations(bad_device)
    memory = violations(None, partitioner.parse_devices("4x16KiB"))
    assert memory.count("of its 16 KiB (") == memory.count(" over); move nodes") == 4 and " B)" not in memory

    def dup(parts: list[dict[str, Any]]) -> None:
        parts[1]["node_names"].append("relu")

    assert "node 'relu' is in partition 0 and partition 1" in violations(dup)
    latency = violations(None, max_latency_s=1e-9)
    assert "end-to-end latency" in latency and "exceeds the budget max_latency_s = 1e-09 s" in latency
    util = violations(None, max_memory_utilisation=0.5)
    assert "on device(s) dev_0 (id 0) 79.5%" in util and "dev_3 (id 3) 72.3%" in util
    # Budgets cannot be scored while nodes are missing: a note says so.
    result = check_plan(Plan.from_dict(edited(base_plan, missing)), graph, devs, max_latency_s=1.0)
    assert any("budgets (max_latency_s) not checked" in n for n in result.notes)
    with pytest.raises(partitioner.PartitionError, match="not op nodes of the graph: ghost"):
        check_plan(base_plan, graph, devs, node_latency={"ghost": (1.0, 1.0)})


def test_check_plan_changed_model_is_a_note_unless_strict(base_plan):
    module, inputs = sample_models.build("mlp", **{**SETTINGS, "batch_size": 4})
    smaller = partitioner.trace(module, inputs)
    devs = partitioner.parse_devices(DEVICES)
    result = check_plan(base_plan, smaller, devs)
    assert result.ok and "graph changed since the plan was made" in result.notes[0]
    strict = check_plan(base_plan, smaller, devs, strict=True)
    assert not strict.ok and "strict=False" in strict.violations[0].message


def test_check_under_both_cost_models(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert run_main(capsys, "plan", *MODEL, "--devices", DEVICES, "--transfer-rate", "1e9", "--out", str(out))[0] == 0
    code, text, _ = run_main(capsys, "check", str(out), *MODEL, "--cost-model", "both")
    assert code == 0
    assert "physical" in text and "torch" in text and "[torch cost model]" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith(("physical ", "torch "))}
    assert set(rows) == {"physical", "torch"}
    assert run_main(capsys, "plan", *MODEL, "--devices", DEVICES, "--cost-model", "torch", "--out", str(out))[0] == 0
    plan = Plan.from_json(out.read_text())
    assert plan.cost_model == "torch"
