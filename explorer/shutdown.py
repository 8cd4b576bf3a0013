"""The server's exit when it is told to stop while a session's script still runs (NOTE: [Stopping
while a script runs]): registered once a process by the router (:func:`install_exit_hook`)."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from typing import Callable

__all__ = ["install_exit_hook", "exit_busy", "server_stopped"]

# NOTE: [Stopping while a script runs] Streamlit's script threads are daemons: on SIGTERM the
# server stops and Python exits while a session may still be inside torch (a trace, a search).
# exit() then runs C++'s static destructors, and torch's thread pool, joinable in that thread,
# calls std::terminate: "terminate called without an active exception", exit 134 (reproduced
# with a daemon thread in a matrix product loop: 3 of 3 runs). When a server told to stop exits
# with a thread still running, the hook below ends the process at the end of Python's own
# shutdown instead: multiprocessing's children ended and joined, the logs flushed, then os._exit
# skips the destructors. Worker processes started otherwise end as on SIGKILL (they watch their
# parent). Any other exit (a test process, an error) keeps its own course and exit code.
_hook: list[bool] = []


def _shut_down() -> None:
    """What Python's exit would still do that matters here: multiprocessing's children ended and
    joined (its own atexit function), the logs and the output flushed."""
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        try:
            mp_util._exit_function()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - shutting down: nothing left to report to
            pass
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def server_stopped() -> bool:
    """Whether this process is a Streamlit server that was told to stop (SIGTERM, SIGINT): its
    exit is 0, the code os._exit gives."""
    from streamlit.runtime import Runtime
    from streamlit.runtime.runtime import RuntimeState

    return Runtime.exists() and Runtime.instance().state in (RuntimeState.STOPPING, RuntimeState.STOPPED)


def exit_busy(
    exit_now: Callable[[int], None] = os._exit,
    shut_down: Callable[[], None] = _shut_down,
    stopped: Callable[[], bool] = server_stopped,
) -> bool:
    """At exit of a server told to stop: when a thread still runs (a session's script thread, a
    worker thread it started), end the process without C++'s static destructors (NOTE: [Stopping
    while a script runs]); True when it did."""
    me = threading.current_thread()
    if not any(t is not me and t.daemon and t.is_alive() for t in threading.enumerate()):
        return False  # nothing left running: Python's own exit is clean
    if not stopped():  # another exit (a test process, an error) keeps its own code and course
        return False
    shut_down()
    exit_now(0)
    return True


def install_exit_hook() -> None:
    """Register :func:`exit_busy` once a process (the router calls it on every run)."""
    if not _hook:
        _hook.append(True)
        atexit.register(exit_busy)
