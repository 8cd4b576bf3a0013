"""The command line: each command as a subprocess (run concurrently, once per module), every
failing case of ``check``, and the helpers and error paths in process.

A subprocess costs about 2 s of torch import plus about 2 s for its first trace (FakeTensorMode
imports torch._dynamo), so the subprocess cases are few and run in parallel; everything else
calls :func:`cli.main.main` or the helpers directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import partitioner
import sample_models
from cli.inputs import CLIError, read_node_latency
from cli.main import main
from cli.report import describe_devices
from partitioner import Plan
from partitioner.accelerator.api import check_plan
from sample_models import parse_overrides

SETTINGS = dict(n_layer=4, hidden=64, in_features=64, out_features=64, batch_size=8)
SETS = [a for k, v in SETTINGS.items() for a in ("--set", f"{k}={v}")]
MODEL = ["mlp", *SETS]
DEVICES = "4x28KiB"  # four partitions of the small MLP, one per device
SCRIPT = Path(sys.executable).with_name("partition-explorer")
FACTORY = """
import torch

def tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    return model, (torch.randn(2, 8),)
"""


@pytest.fixture(scope="module")
def graph() -> partitioner.Graph:
    module, inputs = sample_models.build("mlp", **SETTINGS)
    return partitioner.trace(module, inputs, name="mlp")


@pytest.fixture(scope="module")
def base_plan(graph: partitioner.Graph) -> Plan:
    plan = partitioner.partition(graph, partitioner.parse_devices(DEVICES))
    assert [p.node_names for p in plan.partitions] == [
        ("layers_0", "relu"),
        ("layers_1", "relu_1"),
        ("layers_2", "relu_2"),
        ("layers_3",),
    ]
    return plan


def edited(plan: Plan, edit: Any) -> dict[str, Any]:
    data = json.loads(plan.to_json())
    edit(data["partitions"])
    return data


def _missing(parts: list[dict[str, Any]]) -> None:
    parts[1]["node_names"].remove("relu_1")


def _unknown(parts: list[dict[str, Any]]) -> None:
    parts[0]["node_names"].append("ghost")


def _cycle(parts: list[dict[str, Any]]) -> None:
    parts[2]["node_names"].remove("relu_2")
    parts[0]["node_names"].append("relu_2")  # 0 -> 1 -> 2 -> 0


def _bad_device(parts: list[dict[str, Any]]) -> None:
    parts[3]["device_ids"] = [7]


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, graph: partitioner.Graph, base_plan: Plan
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every subprocess case, run concurrently; name -> the finished process."""
    work = tmp_path_factory.mktemp("cli")
    (work / "base.json").write_text(base_plan.to_json())
    for name, edit in [("missing", _missing), ("unknown", _unknown), ("cycle", _cycle), ("bad_device", _bad_device)]:
        (work / f"{name}.json").write_text(json.dumps(edited(base_plan, edit)))
    (work / "broken.json").write_text('{\n  "schema_version": 1,\n  "mode": "size_based",\n  "partitions": [\n')
    two = partitioner.evaluate_plan(
        graph,
        partitioner.parse_devices(DEVICES),
        {**base_plan.node_to_partition(), "layers_3": 2},
        {0: [0], 1: [1], 2: [2]},
    )
    (work / "moved.json").write_text(two.to_json())
    (work / "my_models.py").write_text(FACTORY)
    py = [sys.executable, "-m", "cli"]
    jobs: dict[str, list[list[str]]] = {
        # plan -> check round trip: the CLI's own plan passes the CI-style check.
        "round_trip": [
            py
            + [
                "plan",
                *MODEL,
                "--devices",
                DEVICES,
                "--out",
                "rt.json",
                "--export",
                "pipeline-split-spec",
                "--export-out",
                "split.json",
            ],
            py + ["check", "rt.json", *MODEL, "--devices", DEVICES, "--max-memory-utilisation", "0.9"],
        ],
        "check_missing": [py + ["check", "missing.json", *MODEL]],
        "check_unknown": [py + ["check", "unknown.json", *MODEL]],
        "check_memory": [py + ["check", "base.json", *MODEL, "--devices", "4x16KiB"]],
        "check_cycle": [py + ["check", "cycle.json", *MODEL]],
        "check_device": [py + ["check", "bad_device.json", *MODEL, "--devices", DEVICES]],
        "check_budget": [
            py + ["check", "base.json", *MODEL, "--max-latency", "1e-9", "--max-memory-utilisation", "0.5"]
        ],
        "check_malformed": [py + ["check", "broken.json", *MODEL]],
        "plan_unknown_model": [py + ["plan", "mlpp"]],
        "render": [py + ["render", "base.json", "--format", "svg", "--out", "plan.svg"]],
        "compare": [py + ["compare", *MODEL, "--devices", DEVICES, "--json", "--time-limit", "2"]],
        "diff": [py + ["diff", "base.json", "moved.json"]],
        "export": [py + ["export", "base.json", "--kind", "fx-aot"]],
        # The installed console script, on the user's own factory in the working folder.
        "script": [[str(SCRIPT), "plan", "my_models:tiny", "--devices", "2x1MiB", "--out", "-"]],
    }

    def run(commands: list[list[str]]) -> subprocess.CompletedProcess[str]:
        done = None
        for argv in commands:
            done = subprocess.run(
                argv,
                cwd=work,
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
            if done.returncode != 0:
                break
        assert done is not None
        done.cwd = work  # type: ignore[attr-defined]
        return done

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(run, commands) for name, commands in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def ok(run: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert run.returncode == code, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "Traceback" not in run.stderr
    return run.stdout


# --------------------------------------------------------------------------------------------
# Subprocesses


def test_plan_then_check_round_trip_passes(runs):
    out = ok(runs["round_trip"])
    assert out.startswith("OK: rt.json is valid for mlp(batch_size=8,hidden=64,in_features=64,n_layer=4,")
    assert "4 partition(s)" in out and "within --max-memory-utilisation 0.9" in out
    work = runs["round_trip"].cwd  # type: ignore[attr-defined]
    plan = Plan.from_json((work / "rt.json").read_text())
    assert len(plan.partitions) == 4 and plan.model.startswith("mlp(")
    spec = json.loads((work / "split.json").read_text())
    assert spec["split_spec"] == {"layers.1": "beginning", "layers.2": "beginning", "layers.3": "beginning"}


@pytest.mark.parametrize(
    "case, expected",
    [
        ("check_missing", "1 node(s) of the model are in no partition: 'relu_1'; assign each to a partition"),
        ("check_unknown", "node(s) in the plan do not exist in the model: 'ghost' (partition 0); remove them"),
        ("check_memory", "device dev_0 (id 0) holds partition(s) [0] using 22.2 KiB of its 16 KiB (6.25 KiB over)"),
        ("check_cycle", "partitions depend on each other in a cycle 0 -> 1 -> 2 -> 0"),
        ("check_device", "partition 3 is placed on unknown device 7; known logical ids are [0, 1, 2, 3]"),
        ("check_budget", "exceeds the budget --max-latency 1e-09 s"),
    ],
)
def test_check_reports_each_violation_kind_and_exits_1(runs, case, expected):
    out = ok(runs[case], code=1)
    assert out.startswith("FAIL: ")
    assert expected in out
    if case == "check_budget":
        assert "exceeds the budget --max-memory-utilisation 0.5 (50.0%)" in out
        assert "2 violations" in out


def test_check_malformed_json_names_file_and_line(runs):
    run = runs["check_malformed"]
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "plan file broken.json: not valid JSON at line 5" in run.stderr


def test_unknown_model_is_a_usage_error(runs):
    run = runs["plan_unknown_model"]
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "unknown model 'mlpp'; did you mean 'mlp'?" in run.stderr


def test_render_writes_svg(runs):
    ok(runs["render"])
    svg = (runs["render"].cwd / "plan.svg").read_text()  # type: ignore[attr-defined]
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "P3" in svg


def test_compare_json_lists_every_mode(runs):
    data = json.loads(ok(runs["compare"]))
    results = {r["mode"]: r for r in data["results"]}
    assert list(results) == ["size_based", "largest_first", "sparse_nn", "cost_aware", "kl_based", "optimal"]
    for r in results.values():  # measured against the strongest bound, and against optimal
        if r["error"] is None:
            assert r["gap_to_bound"] >= 0 and r["gap_to_optimal"] >= -1e-9
    assert "embedding" in results["sparse_nn"]["error"] and results["sparse_nn"]["latency_s"] is None
    assert results["size_based"]["partitions"] == 4 and results["size_based"]["error"] is None
    assert data["model"].startswith("mlp(") and len(data["devices"]) == 4


def test_diff_shows_moved_node_and_removed_partition(runs):
    out = ok(runs["diff"])
    assert "1 node(s) moved between partitions" in out
    assert "layers_3  3 on [3]" in out and "2 on [2]" in out
    assert "partitions removed: 3" in out and "end-to-end latency:" in out


def test_export_fx_aot_to_stdout(runs):
    data = json.loads(ok(runs["export"]))
    assert data["partition_to_logical_device_mapping"] == {"0": [0], "1": [1], "2": [2], "3": [3]}
    assert data["node_to_partition"]["layers_3"] == 3


def test_installed_script_plans_a_factory_model_from_the_working_folder(runs):
    plan = Plan.from_json(ok(runs["script"]))
    assert plan.model == "my_models:tiny" and len(plan.partitions) == 1
    assert SCRIPT.exists()


# --------------------------------------------------------------------------------------------
# check_plan in process: each kind's message


def test_check_plan_messages(graph, base_plan):
    devs = partitioner.parse_devices(DEVICES)
    assert check_plan(base_plan, graph, devs).ok

    def violations(edit: Any, devices: Any = devs, **kw: Any) -> str:
        plan = Plan.from_dict(edited(base_plan, edit)) if edit else base_plan
        result = check_plan(plan, graph, devices, **kw)
        assert not result.ok
        return "\n".join(v.message for v in result.violations)

    assert "in no partition: 'relu_1'" in violations(_missing)
    assert "do not exist in the model: 'ghost' (partition 0)" in violations(_unknown)
    assert "cycle 0 -> 1 -> 2 -> 0" in violations(_cycle)
    assert "unknown device 7" in violations(_bad_device)
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
    result = check_plan(Plan.from_dict(edited(base_plan, _missing)), graph, devs, max_latency_s=1.0)
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


# --------------------------------------------------------------------------------------------
# main() in process: usage errors and options


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_bad_inputs_exit_2_with_the_fix(capsys, tmp_path):
    code, _, err = run_main(capsys, "plan", *MODEL, "--devices", "4xlots")
    assert code == 2 and "'lots' is neither a size (e.g. '16GiB') nor a preset" in err
    code, _, err = run_main(capsys, "plan", "mlp", "--set", "n_layers=3")
    assert code == 2 and "no setting 'n_layers'; did you mean 'n_layer'?" in err
    code, _, err = run_main(capsys, "plan", "mlp", "--set", "n_layer=four")
    assert code == 2 and "n_layer of model 'mlp' must be an int (e.g. n_layer=4)" in err
    code, _, err = run_main(capsys, "plan", "my_models:tiny", "--set", "n_layer=3", "--devices", "1x1MiB")
    assert code == 2 and "--set applies to sample and hf: models only" in err
    code, _, err = run_main(capsys, "compare", "my_models:tiny")
    assert code == 2 and "--devices is required for 'my_models:tiny'" in err
    code, _, err = run_main(capsys, "plan", *MODEL, "--mode", "aot_based")
    assert code == 2 and "--mode aot_based needs --aot-mapping FILE" in err
    code, _, err = run_main(capsys, "check", str(tmp_path / "nope.json"), "mlp")
    assert code == 2 and "nope.json' does not exist" in err
    (tmp_path / "lacking.json").write_text('{"schema_version": 1, "mode": "size_based"}')
    code, _, err = run_main(capsys, "check", str(tmp_path / "lacking.json"), "mlp")
    assert code == 2 and "lacking.json: plan JSON breaks the plan schema" in err
    assert "plan JSON lacks the field 'partitions'" in err and "plan JSON lacks the field 'devices'" in err
    with pytest.raises(SystemExit) as exc:
        main(["plan", "mlp", "--mode", "fastest"])
    assert exc.value.code == 2
    assert "invalid choice: 'fastest'" in capsys.readouterr().err


def test_infeasible_plan_exits_1(capsys):
    code, _, err = run_main(capsys, "plan", *MODEL, "--devices", "2x16KiB")
    assert code == 1 and "no valid plan" in err and "add devices or memory" in err


def test_help_has_examples_for_every_command(capsys):
    for command in ("plan", "check", "render", "compare", "diff", "export"):
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert "examples:" in out and f"partition-explorer {command}" in out and "exit codes:" in out


def test_plan_summary_aot_mapping_and_node_latency(capsys, tmp_path, base_plan):
    code, out, _ = run_main(capsys, "plan", *MODEL, "--devices", DEVICES)
    assert code == 0
    assert "partition  devices  nodes" in out and "79.5% of 28 KiB" in out
    assert "end-to-end latency:" in out and "critical path: partitions 0 -> 1 -> 2 -> 3" in out
    saved = tmp_path / "base.json"
    saved.write_text(base_plan.to_json())
    code, out, _ = run_main(capsys, "plan", *MODEL, "--devices", DEVICES, "--aot-mapping", str(saved), "--out", "-")
    again = Plan.from_json(out)
    assert code == 0 and again.mode == "aot_based"
    assert again.node_to_partition() == base_plan.node_to_partition()
    csv_file = tmp_path / "lat.csv"
    csv_file.write_text("name,mem_s,compute_s\n# measured\nlayers_0,0.5,1.0\n\nrelu,0.1,0.2\n")
    json_file = tmp_path / "lat.json"
    json_file.write_text('{"layers_0": [0.5, 1.0], "relu": [0.1, 0.2]}')
    assert (
        read_node_latency(str(csv_file))
        == read_node_latency(str(json_file))
        == {"layers_0": (0.5, 1.0), "relu": (0.1, 0.2)}
    )
    code, out, _ = run_main(capsys, "plan", *MODEL, "--devices", DEVICES, "--node-latency", str(csv_file), "--out", "-")
    plan = Plan.from_json(out)
    assert plan.options.node_latency is not None and plan.partitions[0].latency_s >= 1.2
    (tmp_path / "bad.csv").write_text("layers_0,0.5\n")
    with pytest.raises(CLIError, match="bad.csv line 1: expected the columns name,mem_s,compute_s"):
        read_node_latency(str(tmp_path / "bad.csv"))
    (tmp_path / "ghost.json").write_text('{"ghost": [1, 1]}')
    code, _, err = run_main(
        capsys, "plan", *MODEL, "--devices", DEVICES, "--node-latency", str(tmp_path / "ghost.json")
    )
    assert code == 2 and "not op nodes of the graph: ghost" in err


def test_diff_json_exit_code_and_export_fx_aot(capsys, tmp_path, base_plan, graph):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(base_plan.to_json())
    b.write_text(
        partitioner.partition(
            graph, partitioner.parse_devices(DEVICES), mode="cost_aware", transfer_rate_bytes_per_s=1e9
        ).to_json()
    )
    code, out, _ = run_main(capsys, "diff", str(a), str(b), "--json")
    assert code == 0 and json.loads(out)["mode_b"] == "cost_aware"
    code, out, _ = run_main(capsys, "diff", str(a), str(a), "--exit-code")
    assert code == 0 and "no differences" in out
    code, out, _ = run_main(capsys, "diff", str(a), str(b), "--exit-code")
    assert code == 1 and "transfer rate: not modelled -> 1e+09 B/s" in out
    code, _, err = run_main(capsys, "export", str(a), "--kind", "fx-aot", "--out", str(tmp_path / "aot.json"))
    assert code == 0 and "wrote fx-aot export" in err
    assert json.loads((tmp_path / "aot.json").read_text())["node_to_partition"]["relu_2"] == 2
    code, _, err = run_main(capsys, "export", str(a), "--kind", "pipeline-split-spec")
    assert code == 2 and "needs the model" in err


def test_compare_table(capsys):
    code, out, _ = run_main(capsys, "compare", *MODEL, "--devices", DEVICES, "--modes", "size_based,sparse_nn")
    assert code == 0
    assert "size_based*" in out and "failed: mode 'sparse_nn' found no plan: sparse_nn needs embedding nodes" in out
    code, out, _ = run_main(capsys, "compare", *MODEL, "--devices", DEVICES, "--modes", "sparse_nn")
    assert code == 1 and "no mode found a plan" in out


def test_helpers():
    assert parse_overrides("transformer", ["n_layer=2", "bias=false", "tie_weights=1"]) == {
        "n_layer": 2,
        "bias": False,
        "tie_weights": True,
    }
    with pytest.raises(ValueError, match="--set expects KEY=VALUE \\(got 'n_layer'\\)"):
        parse_overrides("mlp", ["n_layer"])
    assert describe_devices(partitioner.parse_devices("2xa100-40gb,1x8GiB")) == (
        "3 devices (2 x a100-40gb (40 GiB) + 1 x 8 GiB)"
    )


def test_check_under_both_cost_models(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["plan", *MODEL, "--devices", DEVICES, "--transfer-rate", "1e9", "--out", str(out)]) == 0
    capsys.readouterr()
    code, text, _ = run_main(capsys, "check", str(out), *MODEL, "--cost-model", "both")
    assert code == 0
    assert "physical" in text and "torch" in text and "[torch cost model]" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith(("physical ", "torch "))}
    assert set(rows) == {"physical", "torch"}
    assert main(["plan", *MODEL, "--devices", DEVICES, "--cost-model", "torch", "--out", str(out)]) == 0
    plan = Plan.from_json(out.read_text())
    assert plan.cost_model == "torch"
