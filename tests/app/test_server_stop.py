"""The server stops cleanly while a session is inside torch (NOTE: [Stopping while a script runs] in
explorer/shutdown.py): Streamlit's script threads are daemons, and a process that exits while one is
in a matrix product aborted in C++'s static destructors ("terminate called without an active
exception", exit 134: 3 of 3 runs) until the router's exit hook ended it first. The hook acts only
in a server told to stop, so a test process or an exit on an error keeps its own exit code."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from explorer import shutdown

ROOT = Path(__file__).resolve().parents[2]
BUSY = """
import sys, threading, time
sys.path.insert(0, {root!r})
import torch
if {hook}:  # as install_exit_hook registers it, with the server told to stop
    import atexit, os
    from explorer import shutdown
    atexit.register(shutdown.exit_busy, os._exit, shutdown._shut_down, lambda: True)
def busy():
    a = torch.randn(256, 256)
    while True:
        (a @ a).sum()
threading.Thread(target=busy, daemon=True, name="ScriptRunner.scriptThread").start()
time.sleep(0.5)
print("main thread done", flush=True)
"""


def _exit_of(hook: bool) -> subprocess.CompletedProcess[str]:
    code = BUSY.format(root=str(ROOT), hook=hook)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_process_exiting_while_a_script_thread_is_in_torch_ends_cleanly():
    done = _exit_of(hook=True)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "terminate called" not in done.stderr and "main thread done" in done.stdout


def test_the_hook_acts_only_in_a_server_told_to_stop():
    calls: list[int] = []
    shut: list[bool] = []
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="ScriptRunner.scriptThread", daemon=True)
    thread.start()
    try:
        # not a stopped server (a test process, an exit on an error): its own exit, its own code
        assert not shutdown.exit_busy(calls.append, lambda: shut.append(True)) and calls == [] and shut == []
        assert not shutdown.exit_busy(calls.append, lambda: shut.append(True), lambda: False) and calls == []
        assert (
            shutdown.exit_busy(calls.append, lambda: shut.append(True), lambda: True)
            and calls == [0]
            and shut == [True]
        )
    finally:
        release.set()
        thread.join(5)
