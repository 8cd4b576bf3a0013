"""Refresh the README's picture of the app (docs/img/app.png): start the app on a free local port,
open its first page in headless Chromium (/usr/bin/chromium; Playwright's own browser download is
not used), wait until the plan's DAG and charts are drawn, and save the first screen.

Usage: .venv/bin/python scripts/screenshot.py [--out docs/img/app.png] [--url-path "/?model=transformer&mode=cost_aware"]
Needs the test set-up (bash scripts/setup.sh --test: Playwright and Chromium).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]
WIDTH, HEIGHT = 1440, 1000  # the first screen of a laptop, the sidebar open
TIMEOUT_MS = 120_000


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_serving(url: str, proc: subprocess.Popen, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"screenshot: streamlit exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"screenshot: the app did not answer at {url} within {timeout_s:.0f} s")


def take(out: Path, url_path: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"screenshot: {CHROMIUM} is missing (bash scripts/setup.sh --test installs it)")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    streamlit = Path(sys.executable).with_name("streamlit")
    command = [str(streamlit), "run", "explorer/app.py", "--server.headless", "true", "--server.port", str(port)]
    command += ["--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_until_serving(url, proc)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
                page.goto(f"{url}{url_path}")
                expect(page.locator(".pe-stage svg").first).to_be_visible(timeout=TIMEOUT_MS)
                expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=TIMEOUT_MS)
                expect(page.get_by_test_id("stException")).to_have_count(0)
                expect(page.get_by_test_id("stStatusWidget")).to_have_count(0, timeout=TIMEOUT_MS)  # done running
                # The picture is the plan: fold the Start here box (the README says the same) and
                # bring the plan's heading to the top, so the DAG and a chart are on the first screen.
                page.get_by_text("Start here", exact=True).click()
                page.get_by_test_id("stMetric").first.scroll_into_view_if_needed()
                page.mouse.wheel(0, 120)
                expect(page.locator(".pe-stage svg").first).to_be_in_viewport(timeout=TIMEOUT_MS)
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out))
            finally:
                browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    print(f"screenshot: wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "app.png")
    parser.add_argument(
        "--url-path", default="/?model=transformer&mode=cost_aware", help="the page and settings to open"
    )
    args = parser.parse_args(argv)
    take(args.out.resolve(), args.url_path)


if __name__ == "__main__":
    main()
