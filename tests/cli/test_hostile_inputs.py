"""Hostile and odd input on the command line: plan files of the wrong shape, a byte order mark,
0 B devices and Hugging Face config fields out of range or of the wrong type. Each exits 2 with a
message naming the input and the rule, never 3 ("internal error ... This is a bug")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from examples import set_args

FIXTURES = Path(__file__).resolve().parents[1] / "plan" / "fixtures"
MLP = ["mlp", *set_args(n_layer=2, hidden=32, in_features=32, out_features=32, batch_size=2)]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["plan", *MLP, "--devices", "2x1MiB", "--force-partition", "--out", str(path)]) == 0
    return path


def bad_plans(good: dict) -> dict[str, tuple[object, str]]:
    v1 = json.loads((FIXTURES / "plan_v1_transformer_kl.json").read_text())
    first = good["partitions"][0]
    return {
        "options_int": ({**v1, "options": 3}, "options must be an object or null in a schema-1 plan (got 3)"),
        "edge_out_of_range": (
            {**good, "edges": [{"src": 0, "dst": 7, "bytes": 1, "latency_s": 0.0}]},
            "edges[0].dst names partition 7, which the plan does not have",
        ),
        "negative_id": (
            {**good, "partitions": [{**first, "id": -1}, *good["partitions"][1:]]},
            "partitions[0].id must be a whole number from 0",
        ),
        "children_out_of_range": (
            {**good, "partitions": [{**first, "children": [5]}, *good["partitions"][1:]]},
            "partitions[0].children names partition 5",
        ),
        "string_bytes": (
            {**good, "partitions": [{**first, "memory_bytes": "lots"}, *good["partitions"][1:]]},
            "partitions[0].memory_bytes must be a whole number",
        ),
        "missing_devices": ({k: v for k, v in good.items() if k != "devices"}, "plan JSON lacks the field 'devices'"),
    }


@pytest.mark.parametrize(
    "case",
    ["options_int", "edge_out_of_range", "negative_id", "children_out_of_range", "string_bytes", "missing_devices"],
)
@pytest.mark.parametrize("command", ["check", "render", "export"])
def test_plan_files_of_the_wrong_shape_exit_2_naming_the_rule(plan_file, tmp_path, capsys, case, command):
    data, message = bad_plans(json.loads(plan_file.read_text()))[case]
    path = tmp_path / f"{case}.json"
    path.write_text(json.dumps(data))
    argv = {
        "check": ["check", str(path), *MLP],
        "render": ["render", str(path), "--format", "dot"],
        "export": ["export", str(path), "--kind", "fx-aot"],
    }[command]
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert message in err and str(path) in err, err
    assert "internal error" not in err and "bug" not in err


def test_a_plan_file_with_a_byte_order_mark_is_read(plan_file, tmp_path, capsys):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + plan_file.read_bytes())
    code, out, err = run(["check", str(path), *MLP], capsys)
    assert code == 0, err
    assert run(["diff", str(path), str(plan_file)], capsys)[0] == 0


@pytest.mark.parametrize("spec", ["4x0B", "2x16GiB,1x0KiB", "0 B"])
def test_a_device_of_no_memory_exits_2_naming_the_spec(spec, capsys):
    code, _, err = run(["plan", *MLP, "--devices", spec], capsys)
    assert code == 2, err
    assert f"device memory must be more than 0 B in {spec!r}" in err


def test_a_devices_file_with_no_memory_exits_2(tmp_path, capsys):
    path = tmp_path / "devices.json"
    path.write_text(json.dumps([{"memory_bytes": "16GiB"}, {"name": "empty", "memory_bytes": 0}]))
    code, _, err = run(["plan", *MLP, "--devices", str(path)], capsys)
    assert code == 2 and "device #1 ('empty'): memory_bytes must be more than 0 (got 0)" in err, err


HF = [
    ("hf:gpt2", ["n_layer=1", "n_head=0"], "n_head must be at least 1 (got 0)"),
    ("hf:gpt2", ["n_layer=1", "n_embd=0"], "n_embd must be at least 1 (got 0)"),
    ("hf:gpt2", ["n_layer=1", "vocab_size=0"], "vocab_size must be at least 1 (got 0)"),
    ("hf:gpt2", ["n_layer=abc"], "'n_layer' expected int, got str (value: 'abc')"),
    ("hf:llama", ["num_hidden_layers=1", "num_attention_heads=0"], "num_attention_heads must be at least 1 (got 0)"),
    ("hf:vit", ["num_hidden_layers=1", "patch_size=0"], "patch_size must be at least 1 (got 0)"),
    ("hf:llama", ["num_hidden_layers=1", 'rope_parameters={"rope_type": "bogus"}'], "(got 'bogus')"),
    # rope_scaling reaches transformers 5's rope_parameters again; a linear scaling without its factor
    # is refused there, named
    ("hf:llama", ['rope_scaling={"type": "linear"}'], "Missing required keys in `rope_parameters`"),
    ("hf:llama", ['quantization_config={"quant_method": "gptq"}'], "has no config field 'quantization_config'"),
]


@pytest.mark.parametrize("spec, sets, message", HF, ids=[" ".join(s) for _, s, _ in HF])
def test_hugging_face_fields_out_of_range_exit_2(spec, sets, message, capsys):
    pytest.importorskip("transformers")
    argv = ["plan", spec, "--devices", "2x1GiB"]
    for item in sets:
        argv += ["--set", item]
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert message in err and spec in err, err
    assert "internal error" not in err


def test_devices_and_latency_files_with_a_byte_order_mark_are_read(tmp_path, capsys):
    devices = tmp_path / "devices.json"
    devices.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"memory_bytes": "1MiB"}] * 2).encode())
    latency = tmp_path / "latency.csv"
    latency.write_bytes(b"\xef\xbb\xbfname,mem_s,compute_s\nlayers_0,1e-6,2e-6\n")
    code, out, err = run(["plan", *MLP, "--devices", str(devices), "--node-latency", str(latency)], capsys)
    assert code == 0, err


def test_a_device_speed_beyond_a_float_exits_2(tmp_path, capsys):
    path = tmp_path / "devices.json"
    path.write_text(json.dumps([{"memory_bytes": "1MiB", "peak_flops": 10**400}] * 2))
    code, _, err = run(["plan", *MLP, "--devices", str(path)], capsys)
    assert code == 2 and "peak_flops must be a positive number up to 1e+300" in err, err
