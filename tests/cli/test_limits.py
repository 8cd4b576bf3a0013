"""The command line refuses work past its limits before doing any: layer counts, microbatches and
plan sizes, each with the rule, the value and the fix (exit 2)."""

from __future__ import annotations

import json

import pytest

from cli import pipeline as cli_pipeline
from cli.main import main
from partitioner import PartitionError, parse_devices, pipeline
from partitioner.pipeline.stages import MAX_MICROBATCHES
from partitioner.plan.size import MAX_PLAN_ENTRIES
from partitioner.testing.synthetic import synthetic_graph


def test_too_many_microbatches_exit_2_before_the_model_loads(monkeypatch, capsys):
    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(cli_pipeline, "load_model", never)
    assert main(["pipeline", "mlp", "--microbatches", "10000000"]) == 2
    err = capsys.readouterr().err
    assert f"at most {MAX_MICROBATCHES:,} microbatches" in err and "10000000" in err and "fewer, larger" in err


def test_the_library_refuses_too_many_microbatches_and_takes_the_cap():
    graph = synthetic_graph([(i, i + 1) for i in range(7)], [1000] * 8)
    devices = parse_devices("2x1GiB")
    with pytest.raises(PartitionError, match=rf"at most {MAX_MICROBATCHES:,} \(got {MAX_MICROBATCHES + 1:,}\)"):
        pipeline.plan(graph, devices, stages=2, microbatches=MAX_MICROBATCHES + 1, schedule="gpipe")
    assert (
        pipeline.plan(graph, devices, stages=2, microbatches=MAX_MICROBATCHES, schedule="gpipe").microbatches
        == MAX_MICROBATCHES
    )


def test_a_layer_count_past_the_cap_exits_2_naming_it(capsys):
    assert main(["plan", "mlp", "--set", "n_layer=100000000", "--set", "hidden=1"]) == 2
    err = capsys.readouterr().err
    assert "n_layer=100000000 would trace 200,000,001 operations" in err and "lower n_layer" in err


def test_a_plan_file_past_the_size_cap_exits_2(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["plan", "mlp", "--set", "n_layer=2", "--out", str(plan)]) == 0
    raw = json.loads(plan.read_text())
    part = dict(raw["partitions"][0], node_names=["x"])
    raw["partitions"] = [part] * (MAX_PLAN_ENTRIES + 1)  # only the count matters: refused before it is read
    big = tmp_path / "big.json"
    big.write_text(json.dumps(raw))
    capsys.readouterr()
    for argv in (["render", str(big), "--format", "dot"], ["diff", str(plan), str(big)]):
        assert main(argv) == 2
        assert f"at most {MAX_PLAN_ENTRIES:,} partitions" in capsys.readouterr().err
