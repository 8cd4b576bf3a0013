"""What the command-line tests share: the small MLP and its devices, plan edits that break one rule
each, and :func:`run_main`, which runs the command line in this process."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from cli.main import main
from examples import set_args
from partitioner import Plan

SETTINGS = dict(n_layer=4, hidden=64, in_features=64, out_features=64, batch_size=8)
SETS = set_args(**SETTINGS)
MODEL = ["mlp", *SETS]
DEVICES = "4x28KiB"  # four partitions of the small MLP, one per device
LABEL = "mlp(batch_size=8,hidden=64,in_features=64,n_layer=4,"  # how the plan names the model


def edited(plan: Plan, edit: Any) -> dict[str, Any]:
    """``plan`` as JSON data with ``edit`` applied to its partitions."""
    data = json.loads(plan.to_json())
    edit(data["partitions"])
    return data


def missing(parts: list[dict[str, Any]]) -> None:
    parts[1]["node_names"].remove("relu_1")


def unknown(parts: list[dict[str, Any]]) -> None:
    parts[0]["node_names"].append("ghost")


def cycle(parts: list[dict[str, Any]]) -> None:
    parts[2]["node_names"].remove("relu_2")
    parts[0]["node_names"].append("relu_2")  # 0 -> 1 -> 2 -> 0


def bad_device(parts: list[dict[str, Any]]) -> None:
    parts[3]["device_ids"] = [7]


EDITS = {"missing": missing, "unknown": unknown, "cycle": cycle, "bad_device": bad_device}


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``partition-explorer ARGV`` in this process: (exit status, stdout, stderr); never a traceback."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def ok(run: subprocess.CompletedProcess[str], code: int = 0) -> str:
    """The stdout of a finished process that exited ``code`` without a traceback."""
    assert run.returncode == code, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "Traceback" not in run.stderr
    return run.stdout
