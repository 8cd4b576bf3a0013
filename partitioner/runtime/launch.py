"""Start one process per rank on torch's distributed engine, as ``torchrun`` starts jobs.

Each child gets the torchrun environment (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``), one thread, and ``init_process_group`` (gloo on CPU, NCCL where
GPUs are present) with a short timeout; it runs ``entry(rank, world_size, *args)`` and sends back
its result, or its error, through a queue. The parent drains the queue while it waits, so large
results never block a child, and ends the run when a rank raises, dies or passes the time limit:
every child is terminated, killed if it must be, and joined. A failure raises
:class:`~partitioner.errors.RunError` naming the rank and the cause. Same pattern as torch's own
``MultiProcessTestCase`` (``torch/testing/_internal/common_distributed.py``).
"""

from __future__ import annotations

import datetime
import logging
import os
import pickle
import queue
import socket
import time
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..errors import RunError

__all__ = ["launch", "free_port", "report_progress", "default_backend"]

logger = logging.getLogger(__name__)

_PROGRESS: Any = None  # the child's queue, for report_progress


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"


def report_progress(text: str) -> None:
    """From inside an entry function: a short status line for the parent's ``progress``."""
    if _PROGRESS is not None:
        _PROGRESS.put(("progress", int(os.environ.get("RANK", -1)), text))


def _child(rank: int, world_size: int, port: int, backend: str, timeout_s: float,
           entry: Callable[..., Any], args: tuple[Any, ...], results: Any) -> None:
    global _PROGRESS
    _PROGRESS = results
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    try:
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=max(5.0, timeout_s)))
        try:
            value = entry(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        # Pickled here, so a value that cannot be sent fails in this rank's own error report
        # (a queue's feeder thread would drop it silently); plain pickle copies tensors.
        results.put(("ok", rank, pickle.dumps(value)))
    except BaseException as exc:  # sent to the parent as data, with where it happened
        last = traceback.format_exception(type(exc), exc, exc.__traceback__)
        where = "".join(last[-3:]).strip()
        results.put(("error", rank, f"{type(exc).__name__}: {exc}\n{where}"))


_CONSEQUENCES = ("Connection reset by peer", "Connection closed by peer", "gloo/transport", "Broken pipe")


def _root_cause(rank: int, message: str, results: Any, procs: list[Any], grace_s: float = 2.0) -> RunError:
    """The first failure reported is often a peer's consequence (its connection to the failed
    rank broke): wait a moment for the others and report the one that is not, or the rank that
    died without a word."""
    errors = [(rank, message)]
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            kind, r, value = results.get(timeout=0.1)
        except queue.Empty:
            continue
        if kind == "error":
            errors.append((r, value))
    cause = next(((r, m) for r, m in errors if not any(c in m for c in _CONSEQUENCES)), None)
    if cause is None:
        dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if dead:
            return RunError(f"rank {dead[0]} died (exit code {procs[dead[0]].exitcode}) before reporting a "
                            f"result; rank {rank} lost its connection to it", rank=dead[0])
        cause = errors[0]
    return RunError(f"rank {cause[0]} failed: {cause[1]}", rank=cause[0])


def launch(entry: Callable[..., Any], world_size: int, args: tuple[Any, ...] = (), *,
           timeout_s: float = 120.0, backend: str = "gloo",
           progress: Callable[[str], None] | None = None) -> list[Any]:
    """Run ``entry(rank, world_size, *args)`` on ``world_size`` spawned processes; returns each
    rank's result in rank order. ``entry`` must be a module-level (picklable) function. Raises
    :class:`RunError` when a rank raises, dies or the run passes ``timeout_s``; no child outlives
    the call."""
    if world_size < 1:
        raise RunError(f"a run needs at least one process (got world_size={world_size})")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(r, world_size, port, backend, timeout_s, entry, args, results),
                         daemon=True, name=f"partition-explorer-rank-{r}") for r in range(world_size)]
    if progress:
        progress(f"starting {world_size} processes ({backend}, port {port})")
    # Children unpickle torch objects before any of our code runs: keep torch's deprecation
    # notices out of the person's terminal.
    saved = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = "ignore::FutureWarning,ignore::DeprecationWarning"
    try:
        for p in procs:
            p.start()
    finally:
        if saved is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = saved
    done: dict[int, Any] = {}
    failure: RunError | None = None
    deadline = time.monotonic() + timeout_s
    try:
        while len(done) < world_size and failure is None:
            try:
                kind, rank, value = results.get(timeout=0.2)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in done]
                if dead:
                    failure = RunError(f"rank {dead[0]} died (exit code {procs[dead[0]].exitcode}) "
                                       "before reporting a result", rank=dead[0])
                elif time.monotonic() > deadline:
                    waiting = [r for r in range(world_size) if r not in done]
                    failure = RunError(f"the run passed its time limit of {timeout_s:g} s; rank(s) "
                                       f"{waiting} had not finished (a hang, or a peer that failed)",
                                       rank=waiting[0] if waiting else None)
                continue
            if kind == "progress":
                if progress:
                    progress(f"rank {rank}: {value}")
            elif kind == "ok":
                done[rank] = pickle.loads(value)
                if progress:
                    progress(f"rank {rank} finished")
            else:
                failure = _root_cause(rank, value, results, procs)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        results.close()
        results.join_thread()
    if failure is not None:
        raise failure
    return [done[r] for r in range(world_size)]
