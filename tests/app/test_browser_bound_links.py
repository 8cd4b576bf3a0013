"""In headless Chromium, the Plan a cluster page's fields held in the URL by Streamlit's binding: a
link with a changed sequence length, price and link inside a node reopens with them, a field
changed writes the link, a visit to another page and back keeps them, a value no widget can hold
is a note, a sidebar link without a model applies to the default one, and the server logs no
"created with a default value but also had its value set via the Session State API" warning."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from browser_helpers import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, ROOT, START_TIMEOUT_S, free_port, require_chromium

TIMEOUT_MS = 120_000
VIEWPORT = {"width": 1600, "height": 1400}


def _settled(page) -> None:
    from playwright.sync_api import expect

    expect(page.get_by_test_id("stStatusWidget")).to_have_count(0, timeout=TIMEOUT_MS)


def _run_over(page) -> None:
    """Wait for the run a changed field started to end: a field bound to the URL writes it in the
    browser before the run starts, so the running indicator is awaited (unless it came and went)."""
    from playwright.sync_api import expect

    try:
        expect(page.get_by_test_id("stStatusWidget")).to_have_count(1, timeout=10_000)
    except AssertionError:  # the run was over before the indicator was looked for
        pass
    _settled(page)


def _serve(log: Path) -> tuple[subprocess.Popen, str]:
    """The app on a free port, its output in ``log`` (read after it stops)."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("streamlit")), "run", "explorer/app.py", "--server.headless", "true"]
    command += ["--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while "URL:" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)  # polling the server's log for its start line, not waiting for the app
    return proc, f"http://127.0.0.1:{port}"


@pytest.mark.slow
@pytest.mark.browser
def test_cluster_fields_bound_to_the_url_reopen_keep_across_pages_and_warn_nothing(tmp_path):
    require_chromium()
    from playwright.sync_api import expect, sync_playwright

    log = tmp_path / "server.log"
    proc, url = _serve(log)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_context(viewport=VIEWPORT).new_page()
                page.goto(f"{url}/cluster?model=mlp&cl_seq=2048&cl_price_h100-80gb=3.5&cl_intra_h100-80gb=pcie5")
                seq = page.get_by_label("Sequence length (tokens)", exact=True)
                expect(seq).to_have_value("2048", timeout=TIMEOUT_MS)
                expect(page.get_by_label("$ per device-hour", exact=True)).to_have_value("3.50")
                _settled(page)
                per_node = page.get_by_label("Devices per node", exact=True)
                per_node.fill("4")
                per_node.press("Enter")
                page.wait_for_url("**cl_per_node=4**", timeout=TIMEOUT_MS)
                _run_over(page)
                shared = page.url
                query = parse_qs(urlparse(shared).query)
                assert query["cl_seq"] == ["2048"] and query["cl_price_h100-80gb"] == ["3.5"], shared
                assert query["cl_intra_h100-80gb"] == ["pcie5"], shared
                page.get_by_role("link", name="Training memory").first.click()
                expect(page.get_by_label("Loss", exact=True)).to_be_visible(timeout=TIMEOUT_MS)
                _settled(page)
                page.get_by_role("link", name="Plan a cluster").first.click()
                expect(page.get_by_label("Devices per node", exact=True)).to_have_value("4", timeout=TIMEOUT_MS)
                expect(page.get_by_label("Sequence length (tokens)", exact=True)).to_have_value("2048")
                _settled(page)
                other = browser.new_context(viewport=VIEWPORT).new_page()  # a colleague's browser
                other.goto(shared)
                expect(other.get_by_label("Devices per node", exact=True)).to_have_value("4", timeout=TIMEOUT_MS)
                expect(other.get_by_label("Sequence length (tokens)", exact=True)).to_have_value("2048")
                _settled(other)
                other.screenshot(path=str(ARTIFACTS / "browser_cluster_bound_link.png"))
                other.goto(f"{url}/cluster?model=mlp&cl_per_node=999&cl_min_cut_run=1")
                expect(other.get_by_text("cl_per_node=999 in the link was ignored")).to_be_visible(timeout=TIMEOUT_MS)
                expect(other.get_by_text("cl_min_cut_run in the link was ignored").first).to_be_visible()
                _settled(other)
                assert "cl_min_cut_run" not in other.url and "cl_per_node" not in other.url, other.url
                other.goto(f"{url}/?mode=kl_based")
                other.wait_for_url("**model=**", timeout=TIMEOUT_MS)
                _settled(other)
                assert parse_qs(urlparse(other.url).query)["mode"] == ["kl_based"], other.url
                expect(other.get_by_test_id("stException")).to_have_count(0)
            finally:
                browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "created with a default value" not in log.read_text(), log.read_text()[-4000:]
