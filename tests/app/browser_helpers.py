"""A real Streamlit server for the browser tests, and headless Chromium's settings: every
browser test starts the app the same way and leaves no server behind."""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
START_TIMEOUT_S = 60
RENDER_TIMEOUT_MS = 90_000


def require_chromium() -> None:
    """Fail (never skip) naming the fix when the browser is missing."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: install Chromium (apt-get install chromium, or "
            "bash scripts/setup.sh --test) to run the browser tests"
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_line(proc: subprocess.Popen, needle: str, timeout_s: float) -> list[str]:
    """Read the server's output until a line contains ``needle`` (blocking reads in a thread)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"streamlit did not start within {timeout_s} s; output:\n{''.join(seen)}")
        if line is None:
            raise AssertionError(f"streamlit exited with {proc.wait()}; output:\n{''.join(seen)}")
        seen.append(line)
        if needle in line:
            return seen


@contextlib.contextmanager
def app_server() -> Iterator[tuple[subprocess.Popen, str]]:
    """The app served by ``streamlit run`` on a free local port: (its process, its base URL).
    Stopped on exit (terminated, killed after 15 s)."""
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    port = free_port()
    command = [
        str(Path(sys.executable).with_name("streamlit")),
        "run",
        "explorer/app.py",
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
    ]
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_line(proc, "URL:", START_TIMEOUT_S)
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
