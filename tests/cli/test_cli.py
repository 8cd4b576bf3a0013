"""The command line as a process: the installed script and ``python -m cli`` exit 0, 1 and 2 as
documented, with no traceback.

Each process costs the torch import and a first trace (seconds), so these are the only three, run
at once; every other command-line test calls :func:`cli.main.main` in process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cli_helpers import DEVICES, MODEL, ok

import partitioner
from partitioner import Plan

SCRIPT = Path(sys.executable).with_name("partition-explorer")
FACTORY = """
import torch

def tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    return model, (torch.randn(2, 8),)
"""


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, graph: partitioner.Graph, base_plan: Plan
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every process case, run at once; name -> the finished process (its folder as ``cwd``)."""
    work = tmp_path_factory.mktemp("cli")
    (work / "base.json").write_text(base_plan.to_json())
    devices = partitioner.parse_devices(DEVICES)
    (work / "other.json").write_text(partitioner.partition(graph, devices, mode="cost_aware").to_json())
    (work / "broken.json").write_text('{\n  "schema_version": 1,\n  "mode": "size_based",\n  "partitions": [\n')
    (work / "my_models.py").write_text(FACTORY)
    py = [sys.executable, "-m", "cli"]
    jobs = {
        # The installed console script, on the user's own factory in the working folder.
        "script": [str(SCRIPT), "plan", "my_models:tiny", "--devices", "2x1MiB", "--out", "-"],
        "diff_exit_code": py + ["diff", "base.json", "other.json", "--exit-code"],
        "check_malformed": py + ["check", "broken.json", *MODEL],
    }

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=300, env=env)
        done.cwd = work  # type: ignore[attr-defined]
        return done

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {name: pool.submit(run, argv) for name, argv in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def test_installed_script_plans_a_factory_model_from_the_working_folder(runs):
    plan = Plan.from_json(ok(runs["script"]))
    assert plan.model == "my_models:tiny" and len(plan.partitions) == 1
    assert "wrote" not in runs["script"].stderr  # --out - writes the JSON alone to stdout
    assert SCRIPT.exists()


def test_plans_that_differ_exit_1_from_the_process_with_diff_exit_code(runs):
    out = ok(runs["diff_exit_code"], code=1)
    assert "mode: size_based -> cost_aware" in out


def test_malformed_json_exits_2_from_the_process_naming_file_and_line(runs):
    run = runs["check_malformed"]
    assert run.returncode == 2 and "Traceback" not in run.stderr and run.stdout == ""
    assert "plan file broken.json: not valid JSON at line 5" in run.stderr
