"""Run one function in a fresh worker process with a time limit (solvers, and other work that
can hang or abort the whole process).

The worker is a new Python interpreter (``python -m partitioner.processes.worker``), not a
``multiprocessing`` child: it never re-imports the caller's main script, so it works the same
from a script without a ``__main__`` guard, from a notebook and from a Streamlit server. The
function and its arguments go in by pickle on stdin; the result, or the error, comes back by
pickle on stdout. When the time limit passes the worker is killed and reaped: no process is left
behind. This module imports no torch, so a worker that runs only the torch-free algorithms starts
in well under a second.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import traceback
from typing import Any, Callable

from partitioner.errors import RunError
from partitioner.processes.frames import (
    Reply,
    child_env,
    exit_with_parent,
    quiet_server_loggers,
)  # not defined here: this module runs as __main__

__all__ = ["run_in_worker", "WorkerTimeout"]

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds the package


class WorkerTimeout(RunError):
    """The worker passed its time limit and was stopped."""


def run_in_worker(fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float, what: str) -> Any:
    """``fn(*args)`` in a new interpreter; its result, or :class:`RunError` naming ``what`` and
    the cause (an exception in the worker, the worker dying, or :class:`WorkerTimeout`).
    ``fn`` must be a module-level function and ``args`` picklable."""
    env = child_env(_ROOT)
    env["STREAMLIT_LOGGER_LEVEL"] = "error"  # no server runs there (quiet_server_loggers)
    proc = subprocess.Popen(
        [sys.executable, "-m", "partitioner.processes.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        out, err = proc.communicate(pickle.dumps((fn, args)), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise WorkerTimeout(
            f"{what} did not finish within {timeout_s:.0f} s and was stopped; "
            "give it a longer time limit or a smaller problem"
        ) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        reply: Reply = pickle.loads(out)
    except Exception:
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        raise RunError(
            f"{what} worker died (exit code {proc.returncode}) before it sent a result"
            + (f": {' | '.join(tail)}" if tail else "")
        ) from None
    if not reply.ok:
        raise RunError(f"{what} failed in its worker: {reply.value}")
    return reply.value


def _serve() -> None:
    """The worker's side: one call read from stdin, its outcome written to stdout."""
    exit_with_parent()
    channel = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything the function prints stays off the result channel
    try:
        fn, args = pickle.loads(sys.stdin.buffer.read())
        quiet_server_loggers()
        result = Reply(True, fn(*args))
    except BaseException as exc:  # report every failure to the parent, whatever it was
        result = Reply(False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}")
    channel.write(pickle.dumps(result))
    channel.flush()


if __name__ == "__main__":
    _serve()
