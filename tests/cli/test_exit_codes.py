"""A failed run exits 4 from every command that runs something (a rank or a worker failed), and a
plan made for another model is refused alike by check, export and run (exit 1)."""

from __future__ import annotations

import json

import pytest

import partitioner.pipeline
import partitioner.remat
import partitioner.runtime.execute
import partitioner.sharding.tp_run
from cli.main import main
from examples import set_args
from partitioner.errors import RunError

MLP = ["mlp", *set_args(n_layer=2, hidden=32, in_features=32, out_features=32, batch_size=4)]


def _fails(*args, **kwargs):
    raise RunError("rank 1 died (signal 9)", rank=1)


@pytest.mark.parametrize(
    "argv, where, name",
    [
        (["remat", *MLP, "--budget", "0.5"], partitioner.remat, "sweep"),
        (
            ["cluster", *MLP, "--max-nodes", "1", "--global-batch", "8", "--seq-len", "4", "--min-cut-budgets", "0.5"],
            partitioner.remat,
            "sweep",
        ),
        (["shard", *MLP, "--devices", "2x1GiB", "--suggest", "--run"], partitioner.sharding.tp_run, "run_sharded"),
        (
            [
                "pipeline",
                *MLP,
                "--devices",
                "2x1GiB",
                "--stages",
                "2",
                "--microbatches",
                "2",
                "--schedule",
                "gpipe",
                "--run",
            ],
            partitioner.pipeline,
            "run",
        ),
    ],
    ids=["remat", "cluster --min-cut-budgets", "shard --run", "pipeline --run"],
)
def test_a_failed_run_exits_4_with_the_cause(argv, where, name, monkeypatch, capsys):
    monkeypatch.setattr(where, name, _fails)
    assert main(argv) == 4
    err = capsys.readouterr().err
    assert "rank 1 died (signal 9)" in err and "Traceback" not in err


def test_a_failed_plan_run_exits_4(monkeypatch, capsys, tmp_path):
    plan = tmp_path / "plan.json"
    assert main(["plan", *MLP, "--devices", "2x1GiB", "--force-partition", "--out", str(plan)]) == 0
    monkeypatch.setattr(partitioner.runtime.execute, "run", _fails)  # imported when run starts
    capsys.readouterr()
    assert main(["run", str(plan), *MLP]) == 4
    assert "rank 1 died" in capsys.readouterr().err


def test_a_plan_for_another_model_is_refused_by_check_export_and_run(tmp_path, capsys, monkeypatch):
    plan = tmp_path / "plan.json"
    wider = [*MLP, "--set", "hidden=48"]  # the same node names, other sizes: a plan that still "fits"
    assert main(["plan", *wider, "--devices", "2x1GiB", "--out", str(plan)]) == 0
    assert json.loads(plan.read_text())["model"].startswith("mlp(") and "hidden=48" in plan.read_text()
    monkeypatch.setattr(partitioner.runtime.execute, "run", lambda *a, **k: pytest.fail("run started processes"))
    capsys.readouterr()
    said = "the plan was made for model 'mlp(batch_size=4,hidden=48,"
    assert main(["check", str(plan), *MLP]) == 1
    out, err = capsys.readouterr()
    assert said in out and "FAIL" in out and "graph changed since" not in err
    assert main(["export", str(plan), *MLP, "--kind", "fx-aot", "--out", str(tmp_path / "aot.json")]) == 1
    assert said in capsys.readouterr().err and not (tmp_path / "aot.json").exists()
    assert main(["run", str(plan), *MLP]) == 1
    assert said in capsys.readouterr().err
    # The model it was made for passes.
    assert main(["check", str(plan), *wider]) == 0
