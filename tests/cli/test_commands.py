"""The plan commands in process: plan, render, compare, diff and export, their help, usage
errors and options."""

from __future__ import annotations

import json

import pytest
from cli_helpers import DEVICES, MODEL, run_main

import partitioner
from cli.inputs import CLIError, read_node_latency
from cli.main import main
from cli.report import describe_devices
from partitioner import Plan
from sample_models import parse_overrides


def test_unknown_model_is_a_usage_error(capsys):
    code, _, err = run_main(capsys, "plan", "mlpp")
    assert code == 2 and "unknown model 'mlpp'; did you mean 'mlp'?" in err


def test_render_writes_svg(tmp_path, capsys, base_plan):
    (tmp_path / "base.json").write_text(base_plan.to_json())
    svg_file = tmp_path / "plan.svg"
    code, _, _ = run_main(capsys, "render", str(tmp_path / "base.json"), "--format", "svg", "--out", str(svg_file))
    svg = svg_file.read_text()
    assert code == 0 and svg.lstrip().startswith("<?xml") and "<svg" in svg and "P3" in svg


def test_compare_json_lists_every_mode(capsys):
    code, out, _ = run_main(capsys, "compare", *MODEL, "--devices", DEVICES, "--json", "--time-limit", "2")
    data = json.loads(out)
    results = {r["mode"]: r for r in data["results"]}
    assert code == 0
    assert list(results) == ["size_based", "largest_first", "sparse_nn", "cost_aware", "kl_based", "optimal"]
    for r in results.values():  # measured against the strongest bound, and against optimal
        if r["error"] is None:
            assert r["gap_to_bound"] >= 0 and r["gap_to_optimal"] >= -1e-9
    assert "embedding" in results["sparse_nn"]["error"] and results["sparse_nn"]["latency_s"] is None
    assert results["size_based"]["partitions"] == 4 and results["size_based"]["error"] is None
    assert data["model"].startswith("mlp(") and len(data["devices"]) == 4


def test_diff_shows_moved_node_and_removed_partition(tmp_path, capsys, graph, base_plan):
    two = partitioner.evaluate_plan(
        graph,
        partitioner.parse_devices(DEVICES),
        {**base_plan.node_to_partition(), "layers_3": 2},
        {0: [0], 1: [1], 2: [2]},
    )
    (tmp_path / "base.json").write_text(base_plan.to_json())
    (tmp_path / "moved.json").write_text(two.to_json())
    code, out, _ = run_main(capsys, "diff", str(tmp_path / "base.json"), str(tmp_path / "moved.json"))
    assert code == 0 and "1 node(s) moved between partitions" in out
    assert "layers_3  3 on [3]" in out and "2 on [2]" in out
    assert "partitions removed: 3" in out and "end-to-end latency:" in out


def test_export_fx_aot_to_stdout(tmp_path, capsys, base_plan):
    (tmp_path / "base.json").write_text(base_plan.to_json())
    code, out, _ = run_main(capsys, "export", str(tmp_path / "base.json"), "--kind", "fx-aot")
    data = json.loads(out)
    assert code == 0
    assert data["partition_to_logical_device_mapping"] == {"0": [0], "1": [1], "2": [2], "3": [3]}
    assert data["node_to_partition"]["layers_3"] == 3


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
        if command == "plan":  # filled in when the help is printed
            assert "MODEL is a sample model (mlp, cnn, transformer," in out and "a100-40gb" in out
            assert '--node-latency FILE: JSON {"node": [mem_s, compute_s]}' in out


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


def test_an_hf_model_without_devices_is_refused_before_it_is_built(capsys, monkeypatch):
    import sample_models

    def no_build(*_args, **_kwargs):
        raise AssertionError("the model was built before --devices was checked")

    monkeypatch.setattr(sample_models, "load", no_build)
    code = main(["plan", "hf:gpt2"])
    err = capsys.readouterr().err
    assert code == 2 and "--devices is required for 'hf:gpt2'" in err and "Traceback" not in err
