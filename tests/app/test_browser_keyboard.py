"""The graph viewer works from the keyboard in a real browser: its buttons carry names, Tab
reaches the drawing and its partitions, the keys pan and zoom, Enter opens a partition."""

from __future__ import annotations

import re

import pytest
from browser_helpers import RENDER_TIMEOUT_MS, app_server, chromium

# The focused element, inside the component's shadow root when it has one.
ACTIVE = (
    "(() => { let a = document.activeElement; while (a && a.shadowRoot && a.shadowRoot.activeElement) "
    "a = a.shadowRoot.activeElement; return a; })()"
)


@pytest.mark.slow
@pytest.mark.browser
def test_the_viewer_is_reachable_and_usable_from_the_keyboard():
    from playwright.sync_api import expect

    with app_server() as (_, url), chromium() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 1400})
        page.goto(f"{url}/")
        dag = page.locator(".pe-stage svg").first
        expect(dag).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        for name in ("Zoom in", "Zoom out", "Fit the whole graph"):
            expect(page.get_by_role("button", name=name, exact=True).first).to_be_visible()
        stage = page.locator(".pe-stage").first
        assert stage.get_attribute("tabindex") == "0" and "arrow keys" in (stage.get_attribute("aria-label") or "")
        page.get_by_role("button", name="Fit the whole graph", exact=True).first.focus()
        page.keyboard.press("Tab")  # from the toolbar to the drawing
        assert page.evaluate(f"{ACTIVE}.classList.contains('pe-stage')")
        before = dag.get_attribute("viewBox")
        page.keyboard.press("+")
        expect(dag).not_to_have_attribute("viewBox", before or "", timeout=RENDER_TIMEOUT_MS)
        zoomed = dag.get_attribute("viewBox") or ""
        page.keyboard.press("ArrowRight")
        expect(dag).not_to_have_attribute("viewBox", zoomed, timeout=RENDER_TIMEOUT_MS)
        page.keyboard.press("0")
        expect(dag).to_have_attribute("viewBox", before or "", timeout=RENDER_TIMEOUT_MS)
        page.keyboard.press("Tab")  # into the drawing: the first partition
        focused = page.evaluate(f"[{ACTIVE}.id, {ACTIVE}.getAttribute('aria-label')]")
        assert focused[0] == "p0" and focused[1].startswith("Open P0"), focused
        page.keyboard.press("Enter")
        picker = page.get_by_role("combobox", name="Show the nodes inside a partition")
        expect(picker).to_have_value(re.compile(r"^P0 \("), timeout=RENDER_TIMEOUT_MS)
        expect(page.locator(".pe-stage svg")).to_have_count(2, timeout=RENDER_TIMEOUT_MS)  # P0's nodes drawn
        expect(page.get_by_test_id("stException")).to_have_count(0)
