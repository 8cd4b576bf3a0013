"""The soak's markup sweep (``bench_soak.py --markup-only``): every place a string a person or a
model supplies reaches a page, given each of six hostile payloads, in headless Chromium.

A surface is a link's value or key (the sidebar's text values, a model's size knobs, every page's
keys, keys no widget takes), a field filled on a page (a job's text on Plan a cluster) or a plan
loaded on Review & edit or Compare modes (pasted or uploaded, its model, device, node and solver
names hostile, and the uploaded file's name). A payload is a Markdown image or link, raw HTML, a
script, a DOT attribute injection (each pointing at a beacon server on 127.0.0.1, its path naming
the surface), and a 5,000-character value. For each pair: the page opened (or the field filled),
its script run waited for (Streamlit's script state and running indicator, each wait bounded),
then the beacon's hits, any ``<a href>`` or ``src`` on the page pointing at the beacon, an
exception box, and the longest part of the payload the page's text echoes.

Prints a table, asserts nothing. The pure parts (the surfaces, the payloads, the links, the
longest echo) are tested in tests/test_soak_markup.py without a browser.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from urllib.parse import urlencode

HF_MODEL = "Hugging Face architecture..."  # explorer.state.HF_MODEL
MODEL = "mlp"  # the smallest sample: a page on it answers in a second or two
HOLE = "{P}"  # where a surface puts the payload (in a link's key or value)
LONG_CHARS = 5000
PAYLOADS = ("md-image", "md-link", "html-img", "script", "dot", "long")
CONCURRENT = 2  # pages checked at once (one browser)


def payload(kind: str, beacon: str, tag: str) -> str:
    """The ``kind`` payload, pointing at ``beacon`` (``http://127.0.0.1:PORT``) under ``/tag/``."""
    url = f"{beacon}/{tag}"
    texts = {
        "md-image": f"![x]({url}/img)",
        "md-link": f"[x]({url}/link)",
        "html-img": f"<img src={url}/html onerror=\"fetch('{url}/onerror')\">",
        "script": f"<script>fetch('{url}/js')</script>",
        "dot": f'"];a[URL="{url}/dot" image="{url}/dot-img"];b["',
        "long": "W" * LONG_CHARS,
    }
    if kind not in texts:
        raise ValueError(f"payload kind must be one of {', '.join(PAYLOADS)} (got {kind!r})")
    return texts[kind]


@dataclass(frozen=True)
class Surface:
    """Where a payload goes: ``how`` is ``link`` (``params`` with :data:`HOLE` in a key or a
    value), ``paste`` / ``upload`` / ``compare`` (a hostile plan on Review & edit or Compare modes;
    ``params`` then names the plan's field) or ``job`` (the job text on Plan a cluster)."""

    name: str
    path: str
    params: tuple[tuple[str, str], ...]
    how: str = "link"


def _link_surfaces() -> Iterator[Surface]:
    sample = (("model", MODEL),)
    hf = (("model", HF_MODEL),)
    sidebar = {
        "model name": (("model", HOLE),),
        "hf_name": (*hf, ("hf_name", HOLE)),
        "hf_set whole": (*hf, ("hf_name", "gpt2"), ("hf_set", HOLE)),
        "hf_set value": (*hf, ("hf_name", "gpt2"), ("hf_set", f"n_layer=1 n_embd={HOLE}")),
        "hf_set field name": (*hf, ("hf_name", "gpt2"), ("hf_set", f"n_layer=1 {HOLE}=2")),
        "hf_set json value": (*hf, ("hf_name", "llama"), ("hf_set", f'rope_parameters={{"rope_type":"{HOLE}"}}')),
        "dev_memory": (*sample, ("dev_memory", HOLE)),
        "dev_preset": (*sample, ("dev_preset", HOLE)),
        "dev_engine": (*sample, ("dev_engine", HOLE)),
        "dev_count": (*sample, ("dev_count", HOLE)),
        "transfer_gbps": (*sample, ("transfer_gbps", HOLE)),
        "mode": (*sample, ("mode", HOLE)),
        "saturate_host": (*sample, ("saturate_host", HOLE)),
        f"knob_{MODEL}_hidden": (*sample, (f"knob_{MODEL}_hidden", HOLE)),
        f"knob_{MODEL}_bias": (*sample, (f"knob_{MODEL}_bias", HOLE)),
        "knob field name": (*sample, (f"knob_{MODEL}_{HOLE}", "2")),
        "unknown key": (*sample, (HOLE, "1")),
        "unknown key's value": (*sample, ("zz_unknown", HOLE)),
    }
    for name, params in sidebar.items():  # on the lightest page: the sidebar and its notes are on every page
        yield Surface(name, "/learn", params)
    pages = {
        "/": ("explore_view", "explore_overlay", "explore_search", f"explore_{HOLE}"),
        "/pipeline": ("pp_schedule", "pp_ranks", "pp_training"),
        "/sharding": ("sh_training", "sh_spec_from"),
        "/learn": ("learn_algorithm", "learn_step"),
        "/training": ("tm_loss", "tm_optimizer", "tm_budget"),
        "/cluster": (
            "cl_write",
            "cl_kind",
            "cl_engine",
            "cl_precision",
            "cl_optimizer",
            "cl_accelerator",
            "cl_intra_h100-80gb",
            "cl_inter",
            f"cl_{HOLE}",
        ),
    }
    for path, keys in pages.items():
        for key in keys:
            params = (*sample, (key, "1")) if HOLE in key else (*sample, (key, HOLE))
            yield Surface(f"{path.strip('/') or 'explore'} {key.replace(HOLE, '<P>')}", path, params)


def surfaces() -> tuple[Surface, ...]:
    """Every surface the sweep checks (links first, then the fields and files)."""
    plans = (
        Surface("review paste: model/device/solver names", "/review", (("names", HOLE),), "paste"),
        Surface("review paste: a node name", "/review", (("node", HOLE),), "paste"),
        Surface("review upload: file name and names", "/review", (("file", HOLE),), "upload"),
        Surface("compare upload: file name and names", "/compare", (("file", HOLE),), "compare"),
        Surface("cluster job text", "/cluster", (("text", HOLE),), "job"),
        Surface(
            "cluster job: vLLM model name",
            "/cluster",
            (("text", f"vllm serve {HOLE} --tensor-parallel-size 2"),),
            "job",
        ),
    )
    return (*_link_surfaces(), *plans)


def chosen(only: str = "") -> tuple[Surface, ...]:
    """The surfaces whose names hold one of ``only``'s comma-separated words (all when empty)."""
    words = [w.strip() for w in only.split(",") if w.strip()]
    return tuple(s for s in surfaces() if not words or any(w in s.name for w in words))


def fill(params: tuple[tuple[str, str], ...], text: str) -> tuple[tuple[str, str], ...]:
    return tuple((k.replace(HOLE, text), v.replace(HOLE, text)) for k, v in params)


def link(surface: Surface, text: str) -> str:
    """The path and query that put ``text`` in ``surface`` (a link surface)."""
    return f"{surface.path}?{urlencode(fill(surface.params, text))}"


def longest_echo(text: str, shown: str) -> int:
    """The length of the longest part of ``text`` that ``shown`` holds (0: none). O(n log n)
    substring searches of ``shown``, n = len(text); a repeated character costs one a length."""

    low, high = 0, len(text)
    while low < high:  # the largest length held: a part held means its shorter parts are too
        mid = (low + high + 1) // 2
        parts = {text[i : i + mid] for i in range(len(text) - mid + 1)}
        if any(p in shown for p in parts):
            low = mid
        else:
            high = mid - 1
    return low


def hostile_plan(how: str, text: str) -> str:
    """The sample model's plan JSON with ``text`` as its model, device and solver names (``node``:
    as a node name the model lacks, in place of a real one). Imports torch."""
    import partitioner
    import sample_models

    module, example = sample_models.build(MODEL)
    graph = partitioner.trace(module, example, name=MODEL)
    count, memory = sample_models.default_devices(MODEL)
    data: dict[str, Any] = json.loads(
        partitioner.partition(graph, partitioner.parse_devices(f"{count}x{memory}B")).to_json()
    )
    if how == "node":
        data["partitions"][0]["node_names"][0] = text
    else:
        data["model"] = text
        data["provenance"]["solver"] = text
        for device in data["devices"]:
            device["name"] = text
    return json.dumps(data)


# -- the beacon and the browser ------------------------------------------------------------------


class Beacon(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        Beacon.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Check:
    surface: str
    payload: str
    hits: int
    live: int  # <a href> / src attributes pointing at the beacon
    exception: bool
    echo: int  # the longest part of the payload in the page's text
    seconds: float
    why: str = ""  # a wait that ran out, or the page's own error


async def settled(page, wait_ms: float, after_input: bool = False) -> None:
    """Wait until the script run is over: the app's script state ``notRunning`` twice, 0.3 s apart,
    and no running indicator. After an input, first (at most 3 s) for the run it starts."""
    from playwright.async_api import expect

    app = page.get_by_test_id("stApp")
    if after_input:
        try:
            await expect(app).to_have_attribute("data-test-script-state", "running", timeout=3000)
        except AssertionError:
            pass  # the run was over before we looked
    end = time.monotonic() + wait_ms / 1000
    while True:
        left = max(1.0, (end - time.monotonic()) * 1000)
        await expect(app).to_have_attribute("data-test-script-state", "notRunning", timeout=left)
        await expect(page.get_by_test_id("stStatusWidget")).to_have_count(0, timeout=left)
        await asyncio.sleep(0.3)
        if await app.get_attribute("data-test-script-state") == "notRunning" or time.monotonic() > end:
            return


async def _put(page, base: str, surface: Surface, text: str, wait_ms: float, plans: dict[tuple[str, str], str]) -> None:
    """Open the page and put ``text`` in the surface; waits for the run it starts."""
    if surface.how == "link":
        await page.goto(base + link(surface, text), wait_until="commit")
        await settled(page, wait_ms)
        return
    key, value = surface.params[0]
    await page.goto(f"{base}{surface.path}?model={MODEL}", wait_until="commit")
    await settled(page, wait_ms)
    if surface.how == "job":
        await page.get_by_text("Review a job:").first.click(timeout=wait_ms)
        area = page.get_by_label("or paste it (a file's text, or the launch command line)")
        await area.fill(value.replace(HOLE, text), timeout=wait_ms)
        await area.press("Control+Enter")
        await settled(page, wait_ms, after_input=True)
        return
    plan = plans.setdefault(("node" if key == "node" else "names", text), hostile_plan(key, text))
    if surface.how == "paste":
        area = page.get_by_label("...or paste plan JSON")
        await area.fill(plan, timeout=wait_ms)
        await area.press("Control+Enter")
        await settled(page, wait_ms, after_input=True)
        await page.get_by_role("button", name="Load pasted plan").click(timeout=wait_ms)
    else:
        if surface.how == "compare":
            await page.get_by_text("Add plan files to compare").first.click(timeout=wait_ms)
        upload = page.locator("input[type=file]").first
        await upload.set_input_files(
            files=[{"name": f"{text}.json", "mimeType": "application/json", "buffer": plan.encode()}], timeout=wait_ms
        )
    await settled(page, wait_ms, after_input=True)


async def _look(page, beacon: str, text: str) -> tuple[int, bool, int, str]:
    """(live links and sources to the beacon, an exception box, the longest echo, the box's text)."""
    live = 0
    for frame in page.frames:
        live += await frame.locator(f"[href*='{beacon}'], [src*='{beacon}'], [data*='{beacon}']").count()
    boxes = await page.get_by_test_id("stException").all_inner_texts()
    body = await page.locator("body").inner_text()
    exception = bool(boxes) or "Traceback (most recent call last)" in body
    return live, exception, longest_echo(text, body), (boxes[0] if boxes else "")[:200]


async def check(page, base: str, beacon: str, surface: Surface, kind: str, tag: str, wait_ms: float, plans) -> Check:
    text = payload(kind, beacon, tag)
    start = time.perf_counter()
    why = ""
    try:
        await _put(page, base, surface, text, wait_ms, plans)
    except Exception as exc:  # noqa: BLE001 - a surface that did not settle is a figure, not a crash
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
    try:
        live, exception, echo, box = await _look(page, beacon.removeprefix("http://"), text)
    except Exception as exc:  # noqa: BLE001
        live, exception, echo, box = 0, False, -1, f"{why} (not looked at: {type(exc).__name__})".strip()
    await asyncio.sleep(0.5)  # a fetch the page started reaches the beacon
    hits = sum(1 for h in Beacon.hits if h.startswith(f"/{tag}/"))
    return Check(surface.name, kind, hits, live, exception, echo, time.perf_counter() - start, box or why)


async def sweep(browser, base: str, wait_s: float, deadline_s: float, only: str = "") -> tuple[list[Check], int]:
    """Every surface x payload (until ``deadline_s``; the surfaces :func:`chosen` by ``only``),
    :data:`CONCURRENT` pages at once: (the checks, the pairs left out at the deadline)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Beacon)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    beacon = f"http://127.0.0.1:{server.server_address[1]}"
    Beacon.hits.clear()
    pairs = [(i, s, k) for i, s in enumerate(surfaces()) if s in chosen(only) for k in PAYLOADS]
    queue: asyncio.Queue[tuple[int, Surface, str]] = asyncio.Queue()
    for pair in pairs:
        queue.put_nowait(pair)
    deadline = time.monotonic() + deadline_s
    checks: list[Check] = []
    plans: dict[tuple[str, str], str] = {}
    requested: list[str] = []

    async def worker() -> None:
        context = await browser.new_context(viewport={"width": 1600, "height": 1400})
        context.on("request", lambda r: requested.append(r.url) if r.url.startswith(beacon) else None)
        page = await context.new_page()
        try:
            while not queue.empty() and time.monotonic() < deadline:
                i, surface, kind = queue.get_nowait()
                left_ms = min(wait_s, max(1.0, deadline - time.monotonic())) * 1000
                checks.append(await check(page, base, beacon, surface, kind, f"s{i}{kind}", left_ms, plans))
                if len(checks) % 10 == 0:
                    print(f"  {len(checks)} of {len(pairs)} checked; load {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            await context.close()

    try:
        await asyncio.gather(*(worker() for _ in range(CONCURRENT)))
    finally:
        server.shutdown()
        server.server_close()
    print(f"requests the browser made to the beacon: {len(requested)}; hits the beacon got: {len(Beacon.hits)}")
    for url in sorted(set(requested))[:20]:
        print(f"  requested: {url}")
    return checks, queue.qsize()


def report(checks: list[Check], left: int) -> None:
    order = {(s.name, k): n for n, (s, k) in enumerate((s, k) for s in surfaces() for k in PAYLOADS)}
    checks = sorted(checks, key=lambda c: order[(c.surface, c.payload)])
    print(f"{'surface':<44} {'payload':<9} {'hits':>4} {'live':>4} {'exc':>3} {'echo':>5} {'s':>5}  note")
    for c in checks:
        print(
            f"{c.surface[:44]:<44} {c.payload:<9} {c.hits:>4} {c.live:>4} {'yes' if c.exception else 'no':>3} "
            f"{c.echo:>5} {c.seconds:5.1f}  {c.why}"
        )
    names = {c.surface for c in checks}
    longest = max((c.echo for c in checks if c.payload == "long"), default=0)
    print(
        f"markup sweep: {len(checks)} checks of {len(checks) + left} surface x payload pairs ({len(names)} surfaces "
        f"reached, {len(PAYLOADS)} payloads; {left} pairs left out at the deadline); beacon hits {sum(c.hits for c in checks)}; live links/sources "
        f"{sum(c.live for c in checks)}; exceptions {sum(c.exception for c in checks)}; did not settle "
        f"{sum(bool(c.why) and not c.exception for c in checks)}; longest echo of the {LONG_CHARS}-character "
        f"value {longest}"
    )
