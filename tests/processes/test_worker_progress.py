"""A worker's status lines reach the caller while it waits, in order and in the caller's thread;
a caller that stops waiting (Streamlit's Stop raises from the progress callback) or a time limit
that passes leaves no process behind; a large job or result passes beside the reports."""

from __future__ import annotations

import os
import threading
import time

import pytest

from partitioner.errors import RunError
from partitioner.processes.worker import WorkerTimeout, report, run_in_worker


def _three_lines(answer: int) -> int:
    for word in ("one", "two", "three"):
        report(f"step {word}")
    return answer


def _pid_then_sleep(seconds: float) -> None:
    report(str(os.getpid()))
    time.sleep(seconds)


def _chatter_forever() -> None:
    report(str(os.getpid()))
    while True:
        report("still working")
        time.sleep(0.001)


def _echo_large(blob: bytes) -> bytes:
    for i in range(200):
        report(f"line {i} " + "x" * 1000)
    return blob[::-1] * 2


def _unpicklable() -> object:
    return threading.Lock()


class Stopped(Exception):
    """What Streamlit's Stop button raises from inside a status update."""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_reports_arrive_in_order_in_the_callers_thread_then_the_result():
    seen: list[tuple[str, str]] = []
    result = run_in_worker(
        _three_lines, (42,), 120, "a reporter", progress=lambda t: seen.append((t, threading.current_thread().name))
    )
    assert result == 42
    here = threading.current_thread().name
    assert seen == [("step one", here), ("step two", here), ("step three", here)]


def test_without_a_callback_the_reports_are_dropped_and_outside_a_worker_report_does_nothing():
    assert run_in_worker(_three_lines, (7,), 120, "a reporter") == 7
    report("nobody listens")  # not in a worker: no channel, no error


def test_a_callback_that_raises_stops_the_worker_and_reaps_it():
    pids: list[int] = []

    def stop(text: str) -> None:
        pids.append(int(text))
        raise Stopped("the person pressed Stop")

    began = time.monotonic()
    with pytest.raises(Stopped, match="pressed Stop"):
        run_in_worker(_pid_then_sleep, (600,), 600, "a sleeper", progress=stop)
    assert len(pids) == 1 and pids[0] != os.getpid()
    assert _gone(pids[0])  # killed and reaped, not a zombie: the pid is free
    assert time.monotonic() - began < 300  # far below the sleep and the limit: only a hang fails this


def test_the_time_limit_holds_while_reports_keep_arriving():
    lines: list[str] = []
    began = time.monotonic()
    with pytest.raises(WorkerTimeout, match="did not finish within 3 s"):
        run_in_worker(_chatter_forever, (), 3, "a chatterbox", progress=lines.append)
    assert time.monotonic() - began < 300  # a limit ignored under the stream of reports would hang here
    assert len(lines) > 2 and lines[1:3] == ["still working", "still working"]
    assert _gone(int(lines[0]))


def test_a_large_job_and_result_pass_beside_many_reports():
    blob = os.urandom(4 << 20)  # larger than any pipe's buffer, both ways
    lines: list[str] = []
    assert run_in_worker(_echo_large, (blob,), 300, "an echo", progress=lines.append) == blob[::-1] * 2
    assert [t.split()[1] for t in lines] == [str(i) for i in range(200)]


def test_a_result_that_cannot_be_sent_is_named():
    with pytest.raises(RunError, match="could not be sent.*lock"):
        run_in_worker(_unpicklable, (), 120, "a locker")
