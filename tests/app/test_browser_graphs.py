"""Llama-3-70B in headless Chromium: the trace the command line cached opens in the app, the model
graph folds its 80 layers into one box, a click opens one layer and the view follows it, a search
outlines its box, and the Learn page steps over the folded blocks. Screenshots in artifacts/."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest
from browser_helpers import ARTIFACTS, TIMEOUT_MS, app_server, chromium, require_chromium


def _in_view(page, selector: str) -> bool:
    """Whether the centre of some SVG element ``selector`` lies inside the first viewer's stage
    (Playwright's locators reach into the component's shadow root)."""
    stage = page.locator(".pe-stage").first.bounding_box()
    if stage is None:
        return False
    for element in page.locator(".pe-stage").first.locator(selector).all():
        box = element.bounding_box()
        if box is None:
            continue
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        if stage["x"] <= x <= stage["x"] + stage["width"] and stage["y"] <= y <= stage["y"] + stage["height"]:
            return True
    return False


def _comes_into_view(page, selector: str, timeout_s: float = 30.0) -> bool:
    """Whether ``selector`` comes into the first viewer's stage within ``timeout_s``: a rerun
    draws the new graph first and centres the view on its focus once the stage is laid out."""
    deadline = time.monotonic() + timeout_s
    while True:
        if _in_view(page, selector):
            return True
        if time.monotonic() > deadline:
            return False
        page.wait_for_timeout(250)


@pytest.mark.slow
@pytest.mark.browser
def test_llama_3_70b_folds_opens_a_layer_searches_and_steps(tmp_path, monkeypatch):
    require_chromium()
    pytest.importorskip("transformers")
    from playwright.sync_api import expect

    from cli import inputs as cli_inputs
    from explorer.state import HF_MODEL
    from partitioner.tracing import cache

    monkeypatch.setenv(cache.ENV, str(tmp_path))  # the command line traces once; the app reads it
    cli_inputs.load_model("hf:llama-3-70b", ["dtype=bf16"])
    query = urlencode(
        {"model": HF_MODEL, "hf_name": "llama-3-70b", "hf_set": "dtype=bf16", "dev_count": 4, "dev_memory": "40GiB"}
    )
    with app_server() as (_, url), chromium() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 1400})
        page.goto(f"{url}/?{query}")
        dag = page.locator(".pe-stage svg").first
        expect(dag).to_contain_text("hf:llama-3-70b", timeout=TIMEOUT_MS)
        page.get_by_text("Model graph by module").click()
        model = page.locator(".pe-stage svg").first
        expect(model).to_contain_text("model.layers.0-79 (x80)", timeout=TIMEOUT_MS)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "browser_70b_folded.png"))
        model.locator('g.node[id="m:fold:model.layers.0-79"]').click()
        expect(model).to_contain_text("model.layers.1-79 (x79)", timeout=TIMEOUT_MS)
        expect(model).to_contain_text("model.layers.0.self_attn", timeout=TIMEOUT_MS)
        assert _comes_into_view(page, 'g.node[id^="m:model.layers.0."]'), "the view follows the opened layer"
        expect(page.locator(".pe-mini").first).to_be_visible()  # zoomed in: the minimap shows where
        page.screenshot(path=str(ARTIFACTS / "browser_70b_layer_opened.png"))
        search = page.get_by_label("Search a node or module")
        search.fill("layers.37.mlp")
        search.press("Enter")
        expect(page.get_by_text("matches").first).to_be_visible(timeout=TIMEOUT_MS)
        expect(model.locator('g.node [stroke="#1f5fd6"]').first).to_be_attached(timeout=TIMEOUT_MS)
        page.screenshot(path=str(ARTIFACTS / "browser_70b_search.png"))
        page.goto(f"{url}/learn?{query}")
        steps = page.get_by_text("Step through an algorithm")
        expect(steps).to_be_visible(timeout=TIMEOUT_MS)
        stage = page.locator(".pe-stage svg").first
        expect(stage).to_contain_text("(x", timeout=TIMEOUT_MS)
        page.get_by_role("button", name="Next").click()
        expect(page.get_by_text("2 of ")).to_be_visible(timeout=TIMEOUT_MS)
        expect(stage.locator('g.node [stroke="#1f5fd6"]').first).to_be_attached(timeout=TIMEOUT_MS)
        assert _comes_into_view(page, 'g.node [stroke="#1f5fd6"]'), "the view follows the step's nodes"
        page.set_viewport_size({"width": 1600, "height": 2400})  # the page scrolls inside Streamlit's own box
        page.screenshot(path=str(ARTIFACTS / "browser_70b_step.png"))
        expect(page.get_by_test_id("stException")).to_have_count(0)
