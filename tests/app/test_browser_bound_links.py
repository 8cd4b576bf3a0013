"""In headless Chromium, the Plan a cluster page's fields held in the URL by Streamlit's binding: a
link with a changed sequence length, price and link inside a node reopens with them, a field
changed writes the link, a visit to another page and back keeps them, a value no widget can hold
is a note, a sidebar link without a model applies to the default one, and the server logs no
"created with a default value but also had its value set via the Session State API" warning."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from browser_helpers import ARTIFACTS, TIMEOUT_MS, app_server, chromium, enter, fresh_page, run_over, settled


@pytest.mark.slow
@pytest.mark.browser
def test_cluster_fields_bound_to_the_url_reopen_keep_across_pages_and_warn_nothing(tmp_path):
    from playwright.sync_api import expect

    log = tmp_path / "server.log"
    with app_server(log) as (_, url), chromium() as browser:
        page = fresh_page(browser)
        page.goto(f"{url}/cluster?model=mlp&cl_seq=2048&cl_price_h100-80gb=3.5&cl_intra_h100-80gb=pcie5")
        seq = page.get_by_label("Sequence length (tokens)", exact=True)
        expect(seq).to_have_value("2048", timeout=TIMEOUT_MS)
        expect(page.get_by_label("$ per device-hour", exact=True)).to_have_value("3.50")
        settled(page)
        enter(page, page.get_by_label("Devices per node", exact=True), "4", "cl_per_node=4")
        run_over(page)
        shared = page.url
        query = parse_qs(urlparse(shared).query)
        assert query["cl_seq"] == ["2048"] and query["cl_price_h100-80gb"] == ["3.5"], shared
        assert query["cl_intra_h100-80gb"] == ["pcie5"], shared
        page.get_by_role("link", name="Training memory").first.click()
        expect(page.get_by_label("Loss", exact=True)).to_be_visible(timeout=TIMEOUT_MS)
        settled(page)
        page.get_by_role("link", name="Plan a cluster").first.click()
        expect(page.get_by_label("Devices per node", exact=True)).to_have_value("4", timeout=TIMEOUT_MS)
        expect(page.get_by_label("Sequence length (tokens)", exact=True)).to_have_value("2048")
        settled(page)
        other = fresh_page(browser)  # a colleague's browser
        other.goto(shared)
        expect(other.get_by_label("Devices per node", exact=True)).to_have_value("4", timeout=TIMEOUT_MS)
        expect(other.get_by_label("Sequence length (tokens)", exact=True)).to_have_value("2048")
        settled(other)
        other.screenshot(path=str(ARTIFACTS / "browser_cluster_bound_link.png"))
        other.goto(f"{url}/cluster?model=mlp&cl_per_node=999&cl_min_cut_run=1")
        expect(other.get_by_text("cl_per_node=999 in the link was ignored")).to_be_visible(timeout=TIMEOUT_MS)
        expect(other.get_by_text("cl_min_cut_run in the link was ignored").first).to_be_visible()
        settled(other)
        assert "cl_min_cut_run" not in other.url and "cl_per_node" not in other.url, other.url
        other.goto(f"{url}/?mode=kl_based")
        heading = other.get_by_role("heading", name=re.compile(r"^transformer on 4 devices, mode kl_based"))
        expect(heading).to_be_visible(timeout=TIMEOUT_MS)
        settled(other)
        assert parse_qs(urlparse(other.url).query) == {"mode": ["kl_based"]}, (
            other.url
        )  # the default model: not written
        expect(other.get_by_test_id("stException")).to_have_count(0)
    assert "created with a default value" not in log.read_text(), log.read_text()[-4000:]
