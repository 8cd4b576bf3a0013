"""Issue 56 in headless Chromium: a DAG too large to open whole shows its title and device legend
in a header above the drawing, without Fit (at 1500 px they were cut off), and the opening view
starts at the first partition, not at the blank they leave. Screenshot in artifacts/."""

from __future__ import annotations

import pytest
from browser_helpers import ARTIFACTS, TIMEOUT_MS, app_server, chromium, require_chromium

LINK = "/?model=transformer&mode=size_based&dev_count=12&dev_memory=1MiB&dev_headroom=0.0"


@pytest.mark.slow
@pytest.mark.browser
def test_a_large_dag_shows_its_title_and_legend_above_it_without_fit():
    require_chromium()
    from playwright.sync_api import expect

    with app_server() as (_, url), chromium() as browser:
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(f"{url}{LINK}")
        head = page.locator(".pe-head").first
        expect(head.locator(".pe-title")).to_contain_text("size_based", timeout=TIMEOUT_MS)
        legend = head.locator(".pe-legend")
        expect(legend).to_be_visible()
        expect(legend).to_contain_text("dev_11")  # the last device's row is in the header
        viewer = page.locator(".pe-viewer").first.bounding_box()
        box = legend.bounding_box()
        assert viewer and box and box["x"] + box["width"] <= viewer["x"] + viewer["width"] + 1
        stage = page.locator(".pe-stage").first.bounding_box()
        first = page.locator(".pe-stage g.node", has_text="P0 on dev_0").first.bounding_box()
        assert stage and first and stage["y"] <= first["y"] <= stage["y"] + 120  # no blank above it
        page.locator(".pe-viewer").first.screenshot(path=str(ARTIFACTS / "viewer_head.png"))
