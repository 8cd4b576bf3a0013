"""Starting the app under AppTest, and reading what it shows."""

from __future__ import annotations

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

import sample_models

APP = str(Path(__file__).resolve().parents[2] / "explorer" / "app.py")
TIMEOUT = 120
MODELS = [m for m in sample_models.names() if m != "gpt2_small"]  # gpt2_small: bench/bench_app.py


def start() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    return at


def summary(at: AppTest) -> dict | None:
    """Facts of the plan the pages draw: the sidebar's config (``at.session_state["config"]``) and
    its plan from the app's own cached ``explorer.compute.plan`` (None: no config or no plan)."""
    from explorer import compute

    config = at.session_state["config"] if "config" in at.session_state else None
    plan = None if config is None else compute.plan(config).plan
    if plan is None:
        return None
    return {
        "model": config.model.label,
        "mode": plan.mode,
        "partitions": len(plan.partitions),
        "latency_s": plan.latency_s,
        "devices": len(plan.devices),
        "memory_utilisation": plan.memory_utilisation(),
    }


def shown(markdown: str) -> str:
    """What a Markdown source reads as on the page (escaped characters unescaped, the invisible
    word joiners that stop autolinks dropped)."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")


def errors(at: AppTest) -> list[str]:
    return [shown(e.value) for e in at.error]


def charts(at: AppTest) -> tuple[int, int]:
    return len(at.get("bidi_component")), len(at.get("plotly_chart"))  # graph viewers, charts


def review(at: AppTest) -> AppTest:
    at.switch_page("views/review.py").run()
    assert not at.exception
    return at


def shared_link(at: AppTest, *bound: str) -> dict[str, str]:
    """The link a browser shows for ``at``: the URL's parameters, with the bound widgets ``bound``
    written as Streamlit's browser side writes a value a person picked (NOTE: [Bound keys] in
    explorer.builders.links). AppTest has no browser side; test_browser_links.py shares a link in
    Chromium."""
    params = {k: v[0] if isinstance(v, list) else v for k, v in dict(at.query_params).items()}
    for key in bound:
        value = at.session_state[key]
        params[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return params
