"""Hostile names in a real browser: a plan pasted on Review whose model, device, node and solver
strings are Markdown images and links, HTML and DOT syntax, and shared links whose Hugging Face
config carries the same, make headless Chromium fetch nothing from a beacon server on 127.0.0.1,
and the names show as text. Waits with Playwright's ``expect``, never with sleeps."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest
from browser_helpers import ARTIFACTS, RENDER_TIMEOUT_MS, app_server, chromium, require_chromium

import partitioner
import sample_models
from explorer.builders.config import DEFAULT_MODEL
from explorer.state import HF_MODEL


class Beacon(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        Beacon.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def hostile_plan(beacon: str) -> tuple[str, str]:
    """The app's default plan with hostile strings in it, and one naming a node the model lacks."""
    module, example = sample_models.build(DEFAULT_MODEL)
    graph = partitioner.trace(module, example, name=DEFAULT_MODEL)
    count, memory = sample_models.default_devices(DEFAULT_MODEL)
    plan = partitioner.partition(graph, partitioner.parse_devices(f"{count}x{memory}B"))
    data = json.loads(plan.to_json())
    data["model"] = f"![m]({beacon}/beacon-model.png)"
    data["graph_fingerprint"] = "made-elsewhere"  # a violation that names the model
    data["provenance"]["solver"] = f"![s]({beacon}/beacon-solver.png) [link]({beacon}/beacon-solver-link)"
    names = [
        f'<img src="{beacon}/beacon-device.png">',
        'a"];evil[label="x',
        f"[dev]({beacon}/beacon-dev-link)",
        "<b>bold</b>{braces}|<port>",
    ]
    for device, name in zip(data["devices"], names):
        device["name"] = name
    unknown = json.loads(json.dumps(data))
    unknown["partitions"][0]["node_names"][0] = f"![n]({beacon}/beacon-node.png)"  # in place of a real one
    return json.dumps(data), json.dumps(unknown)


@pytest.mark.slow
@pytest.mark.browser
def test_hostile_names_fetch_nothing_and_show_as_text():
    require_chromium()
    from playwright.sync_api import expect

    server = ThreadingHTTPServer(("127.0.0.1", 0), Beacon)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    beacon = f"http://127.0.0.1:{server.server_address[1]}"
    Beacon.hits.clear()
    valid, unknown = hostile_plan(beacon)
    requested: list[str] = []
    try:
        with app_server() as (_, url), chromium() as browser:
            page = browser.new_page(viewport={"width": 1600, "height": 2000})
            page.on("request", lambda r: requested.append(r.url) if r.url.startswith(beacon) else None)

            def paste(text: str, expect_text: str) -> None:
                area = page.get_by_label("...or paste plan JSON")
                area.fill(text)
                area.press("Control+Enter")
                page.get_by_role("button", name="Load pasted plan").click()
                expect(page.get_by_text(expect_text).first).to_be_visible(timeout=RENDER_TIMEOUT_MS)

            page.goto(f"{url}/review")
            expect(page.get_by_text("Editing the size_based plan")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
            paste(valid, "it breaks these rules")  # made for another graph: its model is named
            host = beacon.removeprefix("http://")  # the page has an invisible word joiner before http
            expect(page.get_by_text(f"{host}/beacon-model.png)").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
            dag = page.locator(".pe-stage svg").first
            expect(dag).to_contain_text('a"];evil[label="x', timeout=RENDER_TIMEOUT_MS)
            expect(dag).to_contain_text("<b>bold</b>{braces}|<port>")
            expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
            expect(page.get_by_test_id("stException")).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "browser_hostile_review.png"), full_page=True)
            paste(unknown, "do not exist in the model")
            expect(page.get_by_text(f"{host}/beacon-node.png)").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
            page.screenshot(path=str(ARTIFACTS / "browser_hostile_unknown_node.png"), full_page=True)
            # Shared links whose Hugging Face fields are hostile: a message, as text.
            rope = '{"rope_type":"![r](' + beacon + '/beacon-config.png)"}'
            for name, sets, said in (
                ("llama", f"num_hidden_layers=1 rope_parameters={rope}", "rope_type must be"),
                (f"![h]({beacon}/beacon-hf-name.png)", "n_layer=1", "is neither a preset"),
                ("gpt2", f"n_layer=1 n_head=0 n_inner=[{beacon}/beacon-x]", "must be"),
            ):
                page.goto(f"{url}/?model={quote(HF_MODEL)}&hf_name={quote(name)}&hf_set={quote(sets)}")
                expect(page.get_by_text(said).first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
                expect(page.get_by_text("This is a bug")).to_have_count(0)
                expect(page.get_by_test_id("stException")).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "browser_hostile_config.png"), full_page=True)
            assert page.locator(f"img[src^='{beacon}'], a[href^='{beacon}']").count() == 0
    finally:
        server.shutdown()
        server.server_close()
    assert not Beacon.hits and not requested, (Beacon.hits, requested)
