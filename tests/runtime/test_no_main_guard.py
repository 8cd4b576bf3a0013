"""Processes from anywhere: a plain script without ``if __name__ == "__main__":`` runs the
min-cut worker and a real run (each child is a fresh interpreter, never a re-import of the
caller's script), and a run whose rank dies exits the command line with the run-failure code."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import torch
    import partitioner
    from partitioner import remat

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    x = torch.randn(2, 8)
    r = remat.analyze(model, (x,), budget=0.5, timeout_s=120)
    graph = partitioner.trace(model, (x,))
    plan = partitioner.partition(graph, partitioner.parse_devices("2x1MiB"), force_partition=True)
    result = partitioner.run(plan, graph, (x,), timeout_s=120)
    print("remat", r.gradients_equal, "run", len(result.partitions), bool(result.outputs_equal))
""")


@pytest.mark.slow
def test_a_script_without_a_main_guard_gets_remat_and_run_results(tmp_path):
    script = tmp_path / "plain_script.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["remat", "True", "run", "2", "True"]
    assert "bootstrapping" not in out.stderr


@pytest.mark.slow
def test_a_rank_that_dies_in_the_command_line_exits_with_the_run_failure_code(tmp_path):
    from cli.inputs import EXIT_RUN

    factory = tmp_path / "dying_model.py"
    factory.write_text(
        textwrap.dedent("""
        import torch
        from partitioner.testing.faults import DiesOnRank

        def build():
            return DiesOnRank(rank=1), (torch.randn(2, 8),)
    """)
    )
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    plan = tmp_path / "plan.json"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "plan",
            "dying_model:build",
            "--devices",
            "2x64KiB",
            "--force-partition",
            "--out",
            str(plan),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    ran = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(plan), "dying_model:build", "--timeout", "60"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert ran.returncode == EXIT_RUN, (ran.returncode, ran.stderr[-2000:])
    assert "rank 1" in ran.stderr and "Traceback" not in ran.stderr
