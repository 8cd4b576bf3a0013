"""Several people on one server (a real Streamlit process, pages in headless Chromium): first loads
at the same moment all trace and plan, and a soak of random actions by several sessions keeps the
server's memory and process count bounded and the server serving. Slow; the soak's length is
``PE_SOAK_S`` seconds (default 150)."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, CHROMIUM_ARGS, app_server

from partitioner.processes.launch import MAX_LOCAL_PROCESSES

MODELS = ("mlp", "cnn", "transformer", "dlrm", "unet", "moe")
PAGES = ("", "compare", "pipeline", "learn", "review", "training", "sharding")
LOAD_TIMEOUT_MS = 240_000
RSS_LIMIT_BYTES = 4 * 2**30  # the graph cache's own bound is 2 GiB (NOTE: [Graph cache])


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found += children
        frontier += children
    return found


@pytest.fixture
def server():
    with app_server() as started:
        yield started


def shows_a_plan(page, expect) -> None:
    expect(page.locator(".pe-stage svg").first).to_be_visible(timeout=LOAD_TIMEOUT_MS)
    expect(page.get_by_test_id("stException")).to_have_count(0)
    expect(page.get_by_text("Could not build or trace")).to_have_count(0)


@pytest.mark.slow
@pytest.mark.browser
def test_first_loads_at_once_all_trace_and_a_soak_stays_bounded(server):
    from playwright.sync_api import expect, sync_playwright

    proc, base = server
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # Six sessions open six models at the same moment on a server that traced nothing yet.
            pages = [browser.new_context().new_page() for _ in MODELS]
            for page, model in zip(pages, MODELS):
                page.goto(f"{base}/?model={model}", wait_until="commit")
            for page in pages:
                shows_a_plan(page, expect)
            # The soak: each step one session does something at random and does not wait for it.
            rng = random.Random(0)
            seconds = float(os.environ.get("PE_SOAK_S", "150"))
            links = [
                lambda m: f"?model={m}&knob_{m}_bias=x",
                lambda m: "?model=mlp&transfer_gbps=nan",
                lambda m: "?model=mlp&knob_mlp_n_layer=20000&knob_mlp_hidden=1",
                lambda m: f"?model={m}&dev_count={rng.choice([1, 3, 16, 1024])}",
                lambda m: f"?model={m}&mode={rng.choice(['size_based', 'cost_aware', 'kl_based'])}",
                lambda m: f"?model={m}&knob_{m}_seed={rng.randint(0, 3)}",
            ]
            peak_rss, peak_children, steps = 0, 0, 0
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                page = rng.choice(pages)
                view = rng.choice(PAGES)
                page.goto(f"{base}/{view}{rng.choice(links)(rng.choice(MODELS))}", wait_until="commit")
                steps += 1
                page.wait_for_timeout(rng.uniform(0.5, 3.0))
                peak_rss = max(peak_rss, rss_bytes(proc.pid))
                peak_children = max(peak_children, len(descendants(proc.pid)))
                assert proc.poll() is None, "the server exited"
            # Afterwards it still serves a fresh session.
            fresh = browser.new_context().new_page()
            fresh.goto(f"{base}/?model=transformer&mode=kl_based")
            shows_a_plan(fresh, expect)
            print(
                f"soak: {steps} actions in {seconds:g} s by {len(pages)} sessions; peak server RSS "
                f"{peak_rss / 2**20:.0f} MiB, peak child processes {peak_children}, final RSS "
                f"{rss_bytes(proc.pid) / 2**20:.0f} MiB"
            )
            assert peak_rss < RSS_LIMIT_BYTES
            assert peak_children <= MAX_LOCAL_PROCESSES
        finally:
            browser.close()
