"""The launcher's limits: a deadline that holds under a stream of progress reports, a cap on
local processes stated before any starts, and children that die with their parent."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from partitioner import PartitionError, RunError
from partitioner.processes.launch import MAX_LOCAL_PROCESSES, launch
from partitioner.testing import faults

ROOT = Path(__file__).resolve().parents[2]


def test_more_processes_than_the_machine_holds_are_refused_before_any_starts():
    before = faults.child_pids()
    with pytest.raises(PartitionError, match=rf"at most {MAX_LOCAL_PROCESSES} on this machine"):
        launch(faults.all_reduce_rank, MAX_LOCAL_PROCESSES + 1)
    assert faults.child_pids() <= before


@pytest.mark.slow
def test_the_deadline_holds_while_ranks_report_progress():
    seen: list[str] = []
    began = time.monotonic()
    with pytest.raises(RunError, match="time limit of 8 s"):
        launch(faults.chatty_sleep_on, 2, (120.0,), timeout_s=8.0, progress=seen.append)
    assert time.monotonic() - began < 30
    assert any("still here" in s for s in seen)


@pytest.mark.slow
def test_ranks_and_workers_die_with_a_killed_parent(tmp_path):
    script = tmp_path / "parent.py"
    pids = tmp_path / "pids.txt"
    script.write_text(
        textwrap.dedent(f"""
        import os, threading, time
        from partitioner.processes.launch import launch
        from partitioner.testing import faults

        def note():
            time.sleep(6)
            kids = [p for p in faults.child_pids()]
            open({str(pids)!r}, "w").write(" ".join(map(str, kids)))
        threading.Thread(target=note, daemon=True).start()
        launch(faults.chatty_sleep_on, 2, (600.0,), timeout_s=600)
    """)
    )
    parent = subprocess.Popen([sys.executable, str(script)], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 2
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 15
    alive = children
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [
            p
            for p in children
            if Path(f"/proc/{p}").exists() and "zombie" not in Path(f"/proc/{p}/status").read_text().lower()
        ]
    assert alive == [], f"ranks outlived their parent: {alive}"


def test_a_plan_that_breaks_a_rule_is_refused_before_any_rank_starts(monkeypatch):
    import dataclasses

    import torch

    import partitioner
    from partitioner import InvalidPlanError
    from partitioner.runtime import execute

    def started(*args, **kwargs):
        raise AssertionError("a rank was launched for a plan that breaks a rule")

    monkeypatch.setattr(execute, "launch", started)

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    x = torch.randn(2, 4)
    graph = partitioner.trace(model, (x,))
    plan = partitioner.partition(graph, partitioner.parse_devices("2x1MiB"), force_partition=True)
    homeless = dataclasses.replace(
        plan, partitions=(dataclasses.replace(plan.partitions[0], device_ids=()), *plan.partitions[1:])
    )
    before = faults.child_pids()
    with pytest.raises(InvalidPlanError, match="no device"):
        partitioner.run(homeless, graph, (x,))
    assert faults.child_pids() <= before


@pytest.mark.slow
def test_a_worker_whose_parent_died_while_it_was_starting_exits_at_once(tmp_path):
    """The parent is killed before the worker has imported anything: the worker, re-parented
    already when it first looks, still sees that its parent is gone and exits."""
    script = tmp_path / "parent.py"
    pid_file = tmp_path / "worker.pid"
    script.write_text(
        textwrap.dedent(f"""
        import os, subprocess, sys, time
        from partitioner.processes.frames import child_env
        env = child_env({str(ROOT)!r})
        # the worker sleeps (as an import of torch does) before it first looks at its parent
        code = ("import time, os; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(2); "
                "from partitioner.processes.frames import exit_with_parent; exit_with_parent(); time.sleep(600)")
        subprocess.Popen([sys.executable, "-c", code], env=env)
        time.sleep(600)
    """)
    )
    parent = subprocess.Popen([sys.executable, str(script)], cwd=ROOT)
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while (
        Path(f"/proc/{worker}").exists()
        and "zombie" not in Path(f"/proc/{worker}/status").read_text().lower()
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    gone = not Path(f"/proc/{worker}").exists() or "zombie" in Path(f"/proc/{worker}/status").read_text().lower()
    assert gone, "the worker outlived its parent"
