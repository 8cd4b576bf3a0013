"""Nothing a user types crashes the command line: every malformed input is exit 2 with a message
that names the input, never a traceback or "internal error" (exit 3)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import partitioner
from cli.main import main
from examples import set_args
from partitioner import Device, PartitionError
from partitioner.interop.readers import read_node_latency_text
from partitioner.testing.synthetic import synthetic_graph

MLP = ["mlp", *set_args(n_layer=2, hidden=32, in_features=32, out_features=32, batch_size=2)]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    (d / "binary.json").write_bytes(b"\x00\xff\xfe\x80" * 50)
    (d / "folder.json").mkdir()
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "string_id.json").write_text(json.dumps([{"memory_bytes": 1000, "logical_id": "zero"}]))
    (d / "not_list.json").write_text(json.dumps({"devices": 3}))
    (d / "nan.csv").write_text("linear,nan,1\n")
    (d / "inf.csv").write_text("linear,inf,1\n")
    (d / "neg.json").write_text(json.dumps({"linear": [-1, 1]}))
    (d / "deep_latency.json").write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    (d / "plan_text.json").write_text("this is not json")
    (d / "plan_list.json").write_text("[1, 2, 3]")
    (d / "plan_huge_level.json").write_text(
        '{"schema_version": 2, "mode": "x", "partitions": [{"id": 0, "node_names": [], "device_ids": [0], '
        '"memory_bytes": 0, "memory_latency_s": 0, "compute_latency_s": 0, "latency_s": 0, '
        '"bfs_level": 1e400, "parents": [], "children": []}], "devices": [], "latency_s": 0}'
    )
    (d / "plan_deep.json").write_text('{"schema_version": 2, "partitions": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (d / "mapping_deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "mapping_bad.json").write_text(
        json.dumps({"node_to_partition": {"linear": "one"}, "partition_to_devices": {}})
    )
    (d / "empty.csv").write_text("")
    (d / "spec_nested.json").write_text(json.dumps({"layers.0.weight": [[2], 1]}))
    (d / "spec_bool.json").write_text(json.dumps({"layers.0.weight": [True, 2]}))
    (d / "spec_float.json").write_text(json.dumps({"layers.0.weight": [2.5, 1]}))
    # issue 54: device profiles with a value of the wrong type or a list past its limit
    from partitioner.profiles import gpu_profile

    good = gpu_profile("h100-80gb").to_dict()
    pair = {"kind": "p2p", "processes": 2, "latency_s": 1e-5, "bandwidth_bytes_per_s": 1e9}
    for name, profile in PROFILES(good, pair).items():
        (d / f"{name}.json").write_text(json.dumps(profile))
    return d


def PROFILES(good: dict, pair: dict) -> dict[str, dict]:
    """name -> a hostile profile, each what issue 54 found accepted, converted or named wrongly."""
    gpu = good["gpu"]
    return {
        "profile_memory_true": {**good, "memory_bytes": True},
        "profile_cores_true": {**good, "cores": True},
        "profile_memory_text": {**good, "memory_bytes": "80000000000"},
        "profile_4097_collectives": {**good, "collectives": [pair] * 4097},
        "profile_1025_slowdown": {**good, "slowdown": [[k + 1, 1.0] for k in range(1025)]},
        "profile_17_dtypes": {**good, "matmul": {f"d{i}": [[1.0, 1e-6]] for i in range(17)}},
        "profile_gpu_17_dtypes": {
            **good,
            "gpu": {**gpu, "matmul": {f"d{i}": [[1.0, 8.0, 8.0, 1e-5]] for i in range(17)}},
        },
    }


# what each hostile profile's refusal must name (the list or field, and its limit)
PROFILE_WORDS = {
    "profile_memory_true": ("memory_bytes", "must be a number"),
    "profile_cores_true": ("cores", "must be a number"),
    "profile_memory_text": ("memory_bytes", "must be a number"),
    "profile_4097_collectives": ("collectives has 4,097", "at most 4,096"),
    "profile_1025_slowdown": ("slowdown has 1,025", "at most 1,024"),
    "profile_17_dtypes": ("matmul has 17", "at most 16"),
    "profile_gpu_17_dtypes": ("matmul has 17", "at most 16"),
}


BAD = [
    ["plan", *MLP, "--devices", "4x16GiB,"],
    ["plan", *MLP, "--devices", ",,"],
    ["plan", *MLP, "--devices", ""],
    ["plan", *MLP, "--devices", "4x1e400GiB"],
    ["plan", *MLP, "--devices", "4x99999999999999999999TiB"],
    ["plan", *MLP, "--devices", "10000000x1GiB"],
    ["plan", *MLP, "--devices", "0x16GiB"],
    ["plan", *MLP, "--devices", "4xlots"],
    ["plan", *MLP, "--devices", "-4x16GiB"],
    ["plan", *MLP, "--devices", "4x16XB"],
    ["plan", *MLP, "--devices", "{binary.json}"],
    ["plan", *MLP, "--devices", "{folder.json}"],
    ["plan", *MLP, "--devices", "{deep.json}"],
    ["plan", *MLP, "--devices", "{string_id.json}"],
    ["plan", *MLP, "--devices", "{not_list.json}"],
    ["plan", *MLP, "--devices", "{missing.json}"],
    ["plan", *MLP, "--node-latency", "{nan.csv}"],
    ["plan", *MLP, "--node-latency", "{inf.csv}"],
    ["plan", *MLP, "--node-latency", "{neg.json}"],
    ["plan", *MLP, "--node-latency", "{deep_latency.json}"],
    ["plan", *MLP, "--node-latency", "{empty.csv}"],
    ["plan", *MLP, "--transfer-rate", "nan"],
    ["plan", *MLP, "--transfer-rate", "-5"],
    ["plan", *MLP, "--transfer-rate", "1e400"],
    ["plan", *MLP, "--search-budget", "-3"],
    ["plan", "mlp", "--set", "hidden=100000000"],
    ["plan", "hf:llama"],
    ["plan", "hf:no_such_type", "--devices", "2x1GiB"],
    ["plan", "hf:gpt2", "--set", "n_layers=2", "--devices", "2x1GiB"],
    ["plan", "mlp", "--set", "n_layer=-1"],
    ["plan", "mlp", "--set", "hidden"],
    ["plan", "mlp", "--set", "nope=1"],
    ["plan", "no_such_model"],
    ["plan", "no_such_module_xyz:build", "--devices", "2x1GiB"],
    ["plan", *MLP, "--mode", "aot_based", "--aot-mapping", "{mapping_deep.json}"],
    ["plan", *MLP, "--mode", "aot_based", "--aot-mapping", "{mapping_bad.json}"],
    ["check", "{plan_text.json}", *MLP],
    ["check", "{plan_list.json}", *MLP],
    ["check", "{plan_huge_level.json}", *MLP],
    ["check", "{plan_deep.json}", *MLP],
    ["check", "{missing.json}", *MLP],
    ["render", "{plan_text.json}"],
    ["diff", "{plan_list.json}", "{plan_text.json}"],
    ["export", "{plan_deep.json}", "--kind", "fx-aot"],
    ["check", "{plan_text.json}", *MLP, "--max-latency", "nan"],
    # issue 47: each once ended in a hang, "This is a bug" (exit 3), a wrong exit code or no word at all
    ["pipeline", "mlp", "--stages", "1000000000"],
    ["plan", "hf:vit", "--set", "image_size=100000", "--devices", "2x1GiB"],
    ["plan", "hf:vit", "--set", "image_size=4096", "--set", "patch_size=1", "--devices", "2x1GiB"],
    ["shard", *MLP, "--devices", "2x1GiB", "--spec", "{spec_nested.json}"],
    ["shard", *MLP, "--devices", "2x1GiB", "--spec", "{spec_bool.json}"],
    ["shard", *MLP, "--devices", "2x1GiB", "--spec", "{spec_float.json}"],
    ["compare", *MLP, "--modes", ",,,"],
    ["compare", *MLP, "--modes", "optimal", "--time-limit", "1e12"],
    ["plan", *MLP, "--mode", "optimal", "--time-limit", "inf"],
    ["cluster", *MLP, "--price-per-hour", "inf"],
    ["cluster", *MLP, "--price-per-hour", "-1"],
    ["cluster", *MLP, "--top", "-1"],
    ["cluster", *MLP, "--top", "0"],
    ["cluster", *MLP, "--max-nodes", "1000000000"],
    ["cluster", *MLP, "--max-nodes", "1e9"],
    ["cluster", *MLP, "--devices-per-node", "0"],
    ["cluster", *MLP, "--min-cut-budgets", ""],
    ["cluster", *MLP, "--min-cut-budgets", "nan"],
    ["cluster", *MLP, "--min-cut-budgets", "0.5,2"],
    ["cluster", *MLP, "--global-batch", "1e40"],
    ["cluster", *MLP, "--global-batch", "1" + "0" * 40],
    ["cluster", *MLP, "--seq-len", "0"],
    ["cluster", *MLP, "--generate", "-1"],
    ["cluster", *MLP, "--train-tokens", "inf"],
    ["cluster", *MLP, "--headroom", "100GiB"],
    ["cluster", *MLP, "--timeout", "1e12"],
    ["remat", *MLP, "--timeout", "1e12"],
    ["run", "{plan_text.json}", *MLP, "--repeats", "1000000000"],
    # issue 54: profiles that were read as 1 B, passed, or refused naming a valid value
    *(["plan", *MLP, "--devices", f"2x{{{name}.json}}"] for name in PROFILE_WORDS),
]


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a[:1] + a[-2:]) for a in BAD])
def test_bad_input_is_exit_2_with_a_message(argv, files, capsys):
    args = [_file(files, a) for a in argv]
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    assert err.strip(), "the error must say what is wrong"
    flag = next((a for a in argv if a.startswith("--") and a not in ("--set", "--devices")), None)
    if argv[0] == "cluster" and flag:  # a number out of range: the message names the field and the value
        value = argv[argv.index(flag) + 1]
        assert flag in err and (value in err or repr(value) in err), err
        assert " from " in err or "at most" in err, f"the allowed range is not said: {err}"


def _file(files: Path, arg: str) -> str:
    """``{name}`` -> the fixture file's path; ``2x{name}`` -> a device group of it."""
    if "{" in arg and arg.endswith("}"):
        head, _, name = arg.partition("{")
        return head + str(files / name[:-1])
    return arg


@pytest.mark.parametrize("name", sorted(PROFILE_WORDS))
@pytest.mark.parametrize("flag", ["--devices", "--accelerator"])
def test_a_hostile_profile_is_refused_naming_the_list_and_its_limit(name, flag, files, capsys):
    path = str(files / f"{name}.json")
    argv = ["plan", *MLP, "--devices", f"2x{path}"] if flag == "--devices" else ["cluster", *MLP, "--accelerator", path]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "got 'eager'" not in err
    assert all(word in err for word in PROFILE_WORDS[name]), err
    assert "calibrate" in err or "must be a number" in err, err


OPEN_BEFORE_THE_WORK = [
    ("recompute-min-cut-0.5", ["--min-cut-budgets 0.5", "measures none"]),
    ("v4", ["interleaved_1f1b", "drop v4"]),
    ("pp2 1f1b v4", ["interleaved_1f1b", "'pp2 1f1b v4': 1f1b"]),
    ("sp", ["tp1", "add tp2"]),
    ("dp2 " * 20_000, ["80,000 characters", "at most 500"]),
]


@pytest.mark.parametrize("words, said", OPEN_BEFORE_THE_WORK, ids=[w[:20] for w, _ in OPEN_BEFORE_THE_WORK])
@pytest.mark.parametrize("flag", ["--open", "--run"])
def test_a_layout_word_that_cannot_act_is_refused_before_the_model_loads(words, said, flag, monkeypatch, capsys):
    import cli.cluster

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(cli.cluster, "load_model", never)
    assert main(["cluster", *MLP, flag, words]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(s in err for s in said), err
    assert len(err) < 1000, len(err)  # a long layout is cut, not echoed


@pytest.mark.parametrize("command", ["plan", "compare", "pipeline", "shard", "check"])
def test_a_bad_device_spec_is_refused_before_the_model_is_traced(command, base_plan, tmp_path, monkeypatch, capsys):
    """Llama-3-70B's trace takes minutes: a device spec that does not parse is said first."""
    from partitioner.tracing import cache

    def never(*args, **kwargs):
        raise AssertionError("the model was traced")

    monkeypatch.setattr(cache, "cached_trace", never)
    (tmp_path / "plan.json").write_text(base_plan.to_json())
    head = ["check", str(tmp_path / "plan.json")] if command == "check" else [command]
    tail = ["--suggest"] if command == "shard" else []
    assert main([*head, "hf:llama-3-70b", "--devices", "4xlots", *tail]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "4xlots" in err, err


def test_a_min_cut_budget_the_sweep_did_not_measure_is_refused_before_the_search():
    from cli._cluster_open import checked_layout
    from partitioner import cluster
    from partitioner.cluster.words import parse_layout

    graph = synthetic_graph([(0, 1)], [1000, 1000])
    prof = cluster.profile(graph, "tiny")
    work = cluster.Workload("training", 8, 16)
    with pytest.raises(PartitionError, match="recompute-min-cut-0.5 reads functorch's min-cut at that budget"):
        checked_layout(parse_layout("recompute-min-cut-0.5"), prof, work, 8)


def test_nan_and_infinite_node_latencies_are_refused_everywhere():
    graph = synthetic_graph([(0, 1)], [10, 10])
    devices = [Device("d", 1000, 0)]
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(PartitionError, match="node_latency\\['op0'\\] must be finite"):
            partitioner.partition(graph, devices, node_latency={"op0": (bad, 1.0)})
        with pytest.raises(PartitionError, match="op0"):
            read_node_latency_text(f"op0,{bad},1\n", "lat.csv")


def test_huge_device_counts_fail_fast_and_checks_are_linear():
    with pytest.raises(PartitionError, match="more than 4096 devices"):
        partitioner.parse_devices("10000000x1GiB")
    # 4,096 devices with distinct ids pass the boundary check quickly (it was quadratic).
    devices = [Device(f"d{i}", 10**6, i) for i in range(4096)]
    assert partitioner.accelerator.api.check_devices(devices) == devices
    with pytest.raises(PartitionError, match=r"unique; \[7\] repeat"):
        partitioner.accelerator.api.check_devices(devices[:10] + [Device("again", 10, 7)])


def test_a_factory_with_wrong_shapes_gives_one_clean_message(tmp_path, monkeypatch, capsys):
    (tmp_path / "shapes_for_test.py").write_text(
        "import torch\n"
        "def build():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(16, 16)), (torch.randn(2, 8),)\n"
        "def leave():\n"
        "    import sys\n"
        "    sys.exit(3)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["plan", "shapes_for_test:build", "--devices", "2x1GiB"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "example_inputs match the model's forward()" in err[0]
    assert main(["plan", "shapes_for_test:leave", "--devices", "2x1GiB"]) == 2
    assert "called sys.exit(3)" in capsys.readouterr().err
