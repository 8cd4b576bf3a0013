"""Start one process per rank on torch's distributed engine, as ``torchrun`` starts jobs.

Each rank is a fresh interpreter (``python -m partitioner.processes._rank``), never a
``multiprocessing`` child, so the launcher works from a script without a ``__main__`` guard, from
a notebook and from a Streamlit server alike. Each child gets the torchrun environment
(``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), one thread, and
``init_process_group`` (gloo on CPU, NCCL where GPUs are present) with a short timeout; it runs
``entry(rank, world_size, *args)`` and sends back its result, or its error, as pickled frames on
its stdout. The parent reads every child's frames while it waits, so large results never block a
child, and ends the run when a rank raises, dies or passes the time limit: every child is
terminated, killed if it must be, and reaped. A child whose parent dies sees its stdin close and
exits, so no rank outlives the run. A failure raises :class:`~partitioner.errors.RunError`
naming the rank and the cause. Same pattern as torch's own ``MultiProcessTestCase``
(``torch/testing/_internal/common_distributed.py``).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from partitioner.errors import PartitionError, RunError
from partitioner.processes.frames import Message, child_env, read_frame, write_frame

__all__ = ["launch", "free_port", "report_progress", "default_backend", "MAX_LOCAL_PROCESSES"]

logger = logging.getLogger(__name__)

# Processes one local run may start: torch's import costs about 250 MB a process, and more ranks
# than a few per core only queue for the cores.
MAX_LOCAL_PROCESSES = max(8, 4 * (os.cpu_count() or 1))

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds the package


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_backend() -> str:
    import torch
    import torch.distributed as dist

    return "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"


def report_progress(text: str) -> None:
    """From inside an entry function: a short status line for the parent's ``progress``."""
    from partitioner.processes.frames import send

    send(Message("progress", int(os.environ.get("RANK", -1)), text))


_CONSEQUENCES = ("Connection reset by peer", "Connection closed by peer", "gloo/transport", "Broken pipe")


class _Child:
    """One rank's interpreter and the threads that read its frames (into the shared queue) and
    its stderr (kept for the error report)."""

    def __init__(self, rank: int, env: dict[str, str], job: tuple[Any, ...], results: queue.Queue[Any]) -> None:
        self.rank = rank
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "partitioner.processes._rank"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.stderr: list[bytes] = []
        self.ended_at = float("inf")  # when its stdout closed: the order in which ranks died
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self._threads = [
            threading.Thread(target=self._frames, args=(self.proc.stdout, results), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True),
        ]
        for t in self._threads:
            t.start()
        try:
            write_frame(self.proc.stdin, job)  # stdin stays open: its closing tells the rank to stop
        except BrokenPipeError:
            pass

    def _frames(self, stream: Any, results: queue.Queue[Any]) -> None:
        while True:
            try:
                results.put(read_frame(stream))
            except EOFError:
                self.ended_at = time.monotonic()
                return
            except Exception as exc:  # noqa: BLE001 - a frame that does not unpickle here
                results.put(Message("error", self.rank, f"its result could not be read: {exc}"))
                return

    def _drain(self, stream: Any) -> None:
        for line in iter(stream.readline, b""):
            self.stderr = (self.stderr + [line])[-20:]

    @property
    def reading(self) -> bool:
        return self._threads[0].is_alive()

    @property
    def exitcode(self) -> int | None:
        return self.proc.poll()

    def last_words(self) -> str:
        lines = [ln.decode(errors="replace").rstrip() for ln in self.stderr if ln.strip()]
        return " | ".join(lines[-3:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=1)


def _died(child: _Child) -> str:
    words = child.last_words()
    return f"rank {child.rank} died (exit code {child.exitcode}) before reporting a result" + (
        f": {words}" if words else ""
    )


def _root_cause(
    rank: int, message: str, results: queue.Queue[Any], procs: list[_Child], grace_s: float = 2.0
) -> RunError:
    """The first failure reported is often a peer's consequence (its connection to the failed
    rank broke): wait a moment for the others and report the one that is not, or the rank that
    died without a word."""
    errors = [(rank, message)]
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            got = results.get(timeout=0.1)
        except queue.Empty:
            continue
        if got.kind == "error":
            errors.append((got.rank, got.value))
    cause = next(((r, m) for r, m in errors if not any(c in m for c in _CONSEQUENCES)), None)
    if cause is None:
        dead = sorted((c for c in procs if c.exitcode not in (None, 0)), key=lambda c: c.ended_at)
        if dead:
            return RunError(f"{_died(dead[0])}; rank {rank} lost its connection to it", rank=dead[0].rank)
        cause = errors[0]
    return RunError(f"rank {cause[0]} failed: {cause[1]}", rank=cause[0])


def launch(
    entry: Callable[..., Any],
    world_size: int,
    args: tuple[Any, ...] = (),
    *,
    timeout_s: float = 120.0,
    backend: str = "gloo",
    progress: Callable[[str], None] | None = None,
) -> list[Any]:
    """Run ``entry(rank, world_size, *args)`` on ``world_size`` spawned processes; returns each
    rank's result in rank order. ``entry`` must be a module-level (picklable) function. Raises
    :class:`RunError` when a rank raises, dies or the run passes ``timeout_s``; no child outlives
    the call."""
    if world_size < 1:
        raise RunError(f"a run needs at least one process (got world_size={world_size})")
    if world_size > MAX_LOCAL_PROCESSES:
        raise PartitionError(
            f"a local run starts one process per device, at most {MAX_LOCAL_PROCESSES} on this machine "
            f"({os.cpu_count()} cores; each process holds a few hundred MB of torch); this run needs "
            f"{world_size}: plan for fewer devices, or run it under torchrun across hosts"
        )
    results: queue.Queue[Any] = queue.Queue()
    port = free_port()
    if progress:
        progress(f"starting {world_size} processes ({backend}, port {port})")
    base = dict(child_env(_ROOT), STREAMLIT_LOGGER_LEVEL="error")  # no server runs in a rank (quiet_server_loggers)
    # Children unpickle torch objects before any of our code runs: keep torch's deprecation
    # notices out of the person's terminal.
    base["PYTHONWARNINGS"] = "ignore::FutureWarning,ignore::DeprecationWarning"
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world_size), OMP_NUM_THREADS="1")
    procs: list[_Child] = []
    done: dict[int, Any] = {}
    failure: RunError | None = None
    deadline = time.monotonic() + timeout_s
    try:
        for r in range(world_size):
            env = dict(base, RANK=str(r), LOCAL_RANK=str(r))
            procs.append(_Child(r, env, (entry, args, backend, timeout_s), results))
        while len(done) < world_size and failure is None:
            if time.monotonic() > deadline:  # holds however many progress reports arrive
                waiting = [r for r in range(world_size) if r not in done]
                failure = RunError(
                    f"the run passed its time limit of {timeout_s:g} s; rank(s) "
                    f"{waiting} had not finished (a hang, or a peer that failed)",
                    rank=waiting[0] if waiting else None,
                )
                break
            try:
                kind, rank, value = results.get(timeout=0.2)
            except queue.Empty:
                # Exited and said all it will (its frames are read): a death, or an exit without
                # a word; unless a frame arrived meanwhile.
                dead = sorted(
                    (c for c in procs if c.exitcode is not None and not c.reading and c.rank not in done),
                    key=lambda c: c.ended_at,
                )
                if dead and results.empty():
                    failure = RunError(_died(dead[0]), rank=dead[0].rank)
                continue
            if kind == "progress":
                if progress:
                    progress(f"rank {rank}: {value}")
            elif kind == "ok":
                done[rank] = value
                if progress:
                    progress(f"rank {rank} finished")
            else:
                failure = _root_cause(rank, value, results, procs)
    finally:
        for child in procs:
            child.stop()
    if failure is not None:
        raise failure
    return [done[r] for r in range(world_size)]
