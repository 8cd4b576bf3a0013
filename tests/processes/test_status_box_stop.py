"""The app's status box around a worker: each status line becomes its label; Streamlit's Stop,
raised from a label update, stops the worker, leaves no process and comes out of the box, which
never says the run finished; a RunError becomes a message."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from partitioner.errors import RunError
from partitioner.processes.worker import report, run_in_worker


def _steps_then_sleep(steps: int, seconds: float) -> int:
    report(f"pid {os.getpid()}")
    for i in range(steps):
        report(f"step {i}")
    time.sleep(seconds)
    return steps


class FakeStatus:
    """``st.status``'s box: its labels and states; ``stop_at`` (a label) raises what a pressed
    Stop button raises from there on (Streamlit stays stopped: every later call raises too)."""

    def __init__(self, stop_at: str | None = None) -> None:
        self.labels: list[str] = []
        self.states: list[str] = []
        self.stop_at = stop_at
        self.stopped = False

    def __call__(self, label: str, expanded: bool = False) -> FakeStatus:
        self.labels.append(label)
        return self

    def __enter__(self) -> FakeStatus:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def update(self, label: str | None = None, state: str | None = None) -> None:
        from streamlit.runtime.scriptrunner_utils.exceptions import StopException

        if self.stopped or label == self.stop_at:
            self.stopped = True
            raise StopException()
        if label is not None:
            self.labels.append(label)
        if state is not None:
            self.states.append(state)


@pytest.fixture
def box(monkeypatch):
    from explorer import panels

    def make(stop_at: str | None = None) -> FakeStatus:
        status = FakeStatus(stop_at)
        monkeypatch.setattr(panels.st, "status", status)
        monkeypatch.setattr(panels.st, "error", lambda text: status.labels.append(f"error: {text}"))
        return status

    return make


def test_each_status_line_becomes_the_label_then_the_run_finishes(box):
    from explorer.panels import run_with_status

    status = box()
    done = run_with_status(lambda progress: run_in_worker(_steps_then_sleep, (2, 0), 120, "steps", progress))
    assert done == 2
    assert status.labels[0] == "Starting processes..." and status.labels[1].startswith("pid ")
    assert status.labels[2:] == ["step 0", "step 1", "Run finished"] and status.states == ["complete"]


def test_a_stop_pressed_during_the_run_stops_the_worker_and_goes_on_up(box):
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    from explorer.panels import run_with_status

    status = box(stop_at="step 1")
    began = time.monotonic()
    with pytest.raises(StopException):
        run_with_status(lambda progress: run_in_worker(_steps_then_sleep, (3, 600), 600, "steps", progress))
    assert time.monotonic() - began < 300  # the worker sleeps 600 s: only a hang fails this
    assert status.labels[2:] == ["step 0"] and "Run finished" not in status.labels and "complete" not in status.states
    pid = int(status.labels[1].split()[1])
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)


def test_a_run_error_becomes_a_message(box):
    from explorer.panels import run_with_status

    status = box()

    def fail(progress):
        progress("working")
        raise RunError("rank 1 died")

    assert run_with_status(fail) is None
    assert status.labels[1:] == ["working", "The run failed", "error: The run failed: rank 1 died"]
    assert status.states == ["error"]


def test_any_other_exception_goes_on_up_and_the_box_says_the_run_did_not_finish(box):
    from explorer.panels import run_with_status

    status = box()

    def broken(progress):
        progress("working")
        raise KeyError("a bug")

    with pytest.raises(KeyError, match="a bug"):
        run_with_status(broken)
    assert status.labels[1:] == ["working", "The run did not finish"] and status.states == ["error"]
