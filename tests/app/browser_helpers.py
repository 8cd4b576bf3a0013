"""A real Streamlit server for the browser tests, and headless Chromium with its settings: every
browser test starts the app and the browser the same way and leaves neither behind."""

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
from typing import IO, TYPE_CHECKING, Iterator

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

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
TIMEOUT_MS = 120_000  # a page's slower answers (a cluster search, a Hugging Face trace)
VIEWPORT = {"width": 1600, "height": 1400}


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


def read_output(proc: subprocess.Popen, log: IO[str] | None = None) -> tuple[queue.Queue[str | None], threading.Thread]:
    """Read the server's output in a thread (blocking reads): each line queued, then None at its end,
    and each also written to ``log`` when one is given. Returns the queue and the reading thread."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if log is not None:
                log.write(line)
            lines.put(line)
        lines.put(None)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return lines, thread


def wait_for_line(proc: subprocess.Popen, lines: queue.Queue[str | None], needle: str, timeout_s: float) -> list[str]:
    """Take the server's output lines (:func:`read_output`) until one contains ``needle``."""
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
def app_server(log: Path | None = None) -> Iterator[tuple[subprocess.Popen, str]]:
    """The app served by ``streamlit run`` on a free local port: (its process, its base URL).
    Stopped on exit (terminated, killed after 15 s); its whole output is then in ``log`` when one
    is given."""
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
    out = log.open("w") if log is not None else None
    lines, reader = read_output(proc, out)
    try:
        wait_for_line(proc, lines, "URL:", START_TIMEOUT_S)
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=15)  # the output's last lines, read to its end
        if out is not None:
            out.close()


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Headless Chromium with :data:`CHROMIUM_ARGS`, closed on exit."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def fresh_page(browser: Browser) -> Page:
    """A page in a browser context of its own: another person's browser, no session and no state."""
    return browser.new_context(viewport=VIEWPORT).new_page()


def settled(page: Page) -> None:
    """Wait until the script run is over (Streamlit's running indicator gone), never a sleep."""
    from playwright.sync_api import expect

    expect(page.get_by_test_id("stStatusWidget")).to_have_count(0, timeout=TIMEOUT_MS)


def enter(page: Page, box: Locator, value: str, written: str) -> None:
    """Type ``value`` into the field ``box`` and press Enter, then wait until the page's URL holds
    ``written`` (a field bound to the URL writes it there in the browser)."""
    box.fill(value)
    box.press("Enter")
    page.wait_for_url(f"**{written}**", timeout=TIMEOUT_MS)


def run_over(page: Page) -> None:
    """Wait for the run a changed field started to end: a field bound to the URL writes it in the
    browser before the run starts, so the running indicator is awaited (unless it came and went)."""
    from playwright.sync_api import expect

    try:
        expect(page.get_by_test_id("stStatusWidget")).to_have_count(1, timeout=10_000)
    except AssertionError:  # the run was over before the indicator was looked for
        pass
    settled(page)
