"""One real-browser test: the app in headless Chromium draws the DAG and the charts, and a mode
change re-plans. Waits with Playwright's ``expect``, never with sleeps. Needs /usr/bin/chromium
(``bash scripts/setup.sh --test`` installs it); without it the test fails saying so."""

from __future__ import annotations

import pytest
from browser_helpers import ARTIFACTS, RENDER_TIMEOUT_MS, app_server, chromium


@pytest.mark.slow
@pytest.mark.browser
def test_app_renders_dag_and_charts_and_re_plans_on_a_mode_change():
    from playwright.sync_api import expect

    with app_server() as (_, url), chromium() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 2000})
        page.goto(f"{url}/")
        dag = page.locator(".pe-stage svg").first
        expect(dag).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(dag).to_contain_text("size_based", timeout=RENDER_TIMEOUT_MS)
        expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(page.locator(".js-plotly-plot")).to_have_count(4, timeout=RENDER_TIMEOUT_MS)
        page.get_by_label("Mode", exact=True).click()
        page.get_by_role("option", name="cost_aware", exact=True).click()
        expect(page.get_by_text("Plan: transformer | cost_aware")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(dag).to_contain_text("cost_aware", timeout=RENDER_TIMEOUT_MS)
        expect(page.locator(".js-plotly-plot")).to_have_count(4, timeout=RENDER_TIMEOUT_MS)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "browser_explore.png"))
        # Compare: every mode in one table and chart.
        page.goto(f"{url}/compare")
        expect(page.get_by_text("Every mode on transformer")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(page.locator(".pe-stage svg")).to_have_count(2, timeout=RENDER_TIMEOUT_MS)  # side by side
        page.screenshot(path=str(ARTIFACTS / "browser_compare.png"), full_page=True)
        page.get_by_text("Side by side").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser_side_by_side.png"))
        # Learn: a step of the size-based fill, the graph coloured after it.
        page.goto(f"{url}/learn")
        steps = page.locator(".pe-stage svg").first
        expect(steps).to_contain_text("not placed", timeout=RENDER_TIMEOUT_MS)
        page.get_by_role("button", name="Next").click()
        expect(page.get_by_text("2 of ")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        page.get_by_role("button", name="Next").click()
        expect(page.get_by_text("3 of ")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        page.get_by_text("Step through an algorithm").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser_learn_step.png"))
        # gpt2_small: zoom into the DAG, hover a partition for its tooltip, then the model
        # collapsed by module.
        page.goto(f"{url}/?model=gpt2_small&mode=cost_aware")
        dag = page.locator(".pe-stage svg").first
        expect(dag).to_contain_text("gpt2_small | cost_aware", timeout=180_000)
        before = dag.get_attribute("viewBox")
        box = dag.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.wheel(0, -400)
        expect(dag).not_to_have_attribute("viewBox", before or "", timeout=RENDER_TIMEOUT_MS)
        width = lambda: float((dag.get_attribute("viewBox") or "0 0 0 0").split()[2])  # noqa: E731
        assert width() < float((before or "0 0 1 0").split()[2])  # zoomed in: a smaller view box
        page.locator(".pe-toolbar button[data-act=fit]").first.click()
        dag.locator("g.node#p1").hover()
        tip = page.locator(".pe-tip").first
        expect(tip).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(tip).to_contain_text("P1 on dev_")
        expect(tip).to_contain_text("nodes:")
        page.screenshot(path=str(ARTIFACTS / "browser_gpt2_tooltip.png"))
        page.get_by_text("Model graph by module").click()
        expect(page.locator(".pe-stage svg").first).to_contain_text("blocks.0-11 (x12)", timeout=RENDER_TIMEOUT_MS)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "browser_gpt2_collapsed.png"))
        # Saturate host on 6 devices, opened from a shared link: each replica shows the
        # colours of both its devices in the drawn SVG.
        page.goto(f"{url}/?model=transformer&dev_count=6&saturate_host=true")
        dag = page.locator(".pe-stage svg").first
        expect(dag).to_contain_text("P0 on dev_0, dev_", timeout=RENDER_TIMEOUT_MS)
        shapes = dag.evaluate(
            """svg => [...svg.querySelectorAll('g.node#p0')]
                .flatMap(g => [...g.querySelectorAll('polygon, path')])
                .map(e => [e.getAttribute('fill'), e.tagName, e.getAttribute('d')])"""
        )
        fills = {f for f, _, _ in shapes if f and f not in ("none", "#f7f7f7", "transparent")}
        assert len(fills) == 2, shapes
        assert all(d for _, tag, d in shapes if tag == "path"), shapes
        page.screenshot(path=str(ARTIFACTS / "browser_saturate_host.png"))
        # Review after an edit: move a node to a new partition.
        page.goto(f"{url}/review")
        expect(page.get_by_text("Editing the size_based plan")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        page.get_by_label("Move to").click()
        page.get_by_role("option", name="a new partition").click()
        page.get_by_role("button", name="Move", exact=True).click()
        expect(page.get_by_text("size_based, edited").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "browser_review_edit.png"), full_page=True)
        # Pipeline: the schedule's timeline, the microbatch sweep and memory per stage.
        page.goto(f"{url}/pipeline")
        expect(page.get_by_text("Pipeline stages for transformer")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=RENDER_TIMEOUT_MS)
        expect(page.get_by_text("Schedule 1f1b: step")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "browser_pipeline.png"), full_page=True)
        # Training memory: min-cut in its worker, then the graph coloured by what it saves.
        page.goto(f"{url}/training")
        page.get_by_role("button", name="Trace the joint graph and run min-cut").click()
        expect(page.get_by_text("Activation memory against recomputation").first).to_be_visible(timeout=180_000)
        expect(page.locator(".js-plotly-plot")).to_have_count(2, timeout=RENDER_TIMEOUT_MS)
        expect(page.locator(".pe-stage svg").first).to_contain_text("recomputed", timeout=RENDER_TIMEOUT_MS)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "browser_training.png"), full_page=True)
        # Sharding: a suggestion on two 7 MiB devices, the memory before and after.
        page.goto(f"{url}/sharding?model=transformer&dev_count=2&dev_memory=7%20MiB")
        page.get_by_role("button", name="Suggest a spec that fits").click()
        expect(page.get_by_text("Every device fits.")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        expect(page.get_by_text("Memory per device, unsharded and with the spec").first).to_be_visible(
            timeout=RENDER_TIMEOUT_MS
        )
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "browser_sharding.png"), full_page=True)
