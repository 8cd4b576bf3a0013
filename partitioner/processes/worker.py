"""Run one function in a fresh worker process with a time limit (solvers, and other work that
can hang or abort the whole process).

The worker is a new Python interpreter (``python -m partitioner.processes.worker``), not a
``multiprocessing`` child: it never re-imports the caller's main script, so it works the same
from a script without a ``__main__`` guard, from a notebook and from a Streamlit server. The
function and its arguments go in by pickle on stdin; its status lines (:func:`report`) and then
its result, or its error, come back as pickled frames on stdout (:mod:`.frames`), read by a
thread while the caller waits, so a large result never blocks the worker. When the time limit
passes, or the caller's ``progress`` raises (Streamlit's Stop button arrives that way), the worker
is killed and reaped: no process is left behind. This module imports no torch, so a worker that
runs only the torch-free algorithms starts in well under a second.
"""

from __future__ import annotations

import collections
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
import traceback
from typing import IO, Any, Callable

from partitioner.errors import RunError
from partitioner.processes.frames import (
    Message,
    Reply,
    child_env,
    exit_with_parent,
    quiet_server_loggers,
    read_frame,
    send,
    set_channel,
)  # not defined here: this module runs as __main__

__all__ = ["run_in_worker", "report", "WorkerTimeout"]

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds the package
_END = object()  # the worker's stdout closed


class WorkerTimeout(RunError):
    """The worker passed its time limit and was stopped."""


def report(text: str) -> None:
    """From inside a worker's function: a short status line for the caller's ``progress`` (from
    any thread). Outside a worker, nothing."""
    send(Message("progress", -1, text))


def run_in_worker(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    timeout_s: float,
    what: str,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """``fn(*args)`` in a new interpreter; its result, or :class:`RunError` naming ``what`` and
    the cause (an exception in the worker, the worker dying, or :class:`WorkerTimeout`).
    ``fn`` must be a module-level function and ``args`` picklable. Each :func:`report` the worker
    makes is passed to ``progress`` in this thread while it waits; the time limit holds however
    many arrive. Whatever raises here (``progress`` included) stops the worker before it goes on."""
    job = pickle.dumps((fn, args))  # what cannot be pickled raises here, before any process starts
    env = child_env(_ROOT)
    env["STREAMLIT_LOGGER_LEVEL"] = "error"  # no server runs there (quiet_server_loggers)
    proc = subprocess.Popen(
        [sys.executable, "-m", "partitioner.processes.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    frames: queue.Queue[Any] = queue.Queue()
    tail: collections.deque[bytes] = collections.deque(maxlen=20)
    threads = [  # the pipes, each in a thread of its own: no size of job, report or result blocks
        threading.Thread(target=_write, args=(proc.stdin, job), daemon=True, name="worker-job"),
        threading.Thread(target=_frames, args=(proc.stdout, frames), daemon=True, name="worker-frames"),
        threading.Thread(target=_drain, args=(proc.stderr, tail), daemon=True, name="worker-stderr"),
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    try:
        reply = _wait(frames, deadline, progress)
        if reply is None:
            raise WorkerTimeout(
                f"{what} did not finish within {timeout_s:.0f} s and was stopped; "
                "give it a longer time limit or a smaller problem"
            )
        try:
            proc.wait(timeout=5)  # it is exiting (its result sent, or dead): let it, unless it lingers
        except subprocess.TimeoutExpired:
            pass
    finally:
        _stop(proc, threads)
    if isinstance(reply, Message):  # its last frame did not unpickle here
        raise RunError(f"{what} worker sent a result that {reply.value}")
    if not isinstance(reply, Reply):
        lines = [ln.decode(errors="replace").strip() for ln in tail]
        last = [ln for ln in lines if ln][-3:]
        raise RunError(
            f"{what} worker died (exit code {proc.returncode}) before it sent a result"
            + (f": {' | '.join(last)}" if last else "")
        )
    if not reply.ok:
        raise RunError(f"{what} failed in its worker: {reply.value}")
    return reply.value


def _wait(frames: queue.Queue[Any], deadline: float, progress: Callable[[str], None] | None) -> Any:
    """The worker's :class:`Reply`, :data:`_END` (or an error :class:`Message`) when it closed its
    stdout without one, or None at the deadline; status lines go to ``progress`` meanwhile."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:  # checked before each frame: a stream of reports cannot hold it off
            return None
        try:
            item = frames.get(timeout=min(left, 0.5))
        except queue.Empty:
            continue
        if isinstance(item, Message) and item.kind == "progress":
            if progress is not None:
                progress(str(item.value))
            continue
        return item


def _write(stream: IO[bytes], job: bytes) -> None:
    try:
        stream.write(job)
        stream.close()
    except OSError:  # it died before reading it all: said from its exit code and stderr
        pass


def _frames(stream: IO[bytes], frames: queue.Queue[Any]) -> None:
    while True:
        try:
            frames.put(read_frame(stream))
        except EOFError:
            break
        except Exception as exc:  # noqa: BLE001 - a frame that does not unpickle here
            frames.put(Message("error", -1, f"could not be read here ({type(exc).__name__}: {exc})"))
            break
    frames.put(_END)


def _drain(stream: IO[bytes], tail: collections.deque[bytes]) -> None:
    for line in iter(stream.readline, b""):
        tail.append(line)


def _stop(proc: subprocess.Popen[bytes], threads: list[threading.Thread]) -> None:
    """Kill the worker if it still runs, reap it, and let the threads see its pipes end."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for t in threads:
        t.join(timeout=2)  # a grandchild holding the pipes open must not hold the caller
    if not any(t.is_alive() for t in threads):
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


def _serve() -> None:
    """The worker's side: one call read from stdin, its reports and outcome written to stdout."""
    exit_with_parent()
    # The channel lives in the importable frames module: this one runs as __main__, so the
    # function's report() would find another copy of it.
    set_channel(sys.stdout.buffer)
    sys.stdout = sys.stderr  # anything the function prints stays off the result channel
    try:
        fn, args = pickle.loads(sys.stdin.buffer.read())
        quiet_server_loggers()
        result = Reply(True, fn(*args))
    except BaseException as exc:  # report every failure to the parent, whatever it was
        result = Reply(False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}")
    try:
        send(result)
    except Exception as exc:  # noqa: BLE001 - a result that does not pickle, said as the error
        send(Reply(False, f"its result could not be sent ({type(exc).__name__}: {exc})"))


if __name__ == "__main__":
    _serve()
