"""A soak of the app as several people use it at once: a fresh server (and an empty trace cache)
meets 8 sessions on heavy views at the same moment, then a second wave of 8, then one session
repeats a heavy action (a switch between a large Hugging Face model and a sample model), then
the server is killed with SIGKILL during a min-cut sweep.

    .venv/bin/python bench/bench_soak.py                      # hf:llama-3-70b, 50 actions
    .venv/bin/python bench/bench_soak.py --model hf:llama-3-8b --actions 20
    .venv/bin/python bench/bench_soak.py --kill-only --kill-after-s 20   # the SIGKILL alone, mid-sweep
    .venv/bin/python bench/bench_soak.py --term-only          # SIGTERM while a session is inside torch
    .venv/bin/python bench/bench_soak.py --cluster-only 5     # 5 sessions open Plan a cluster at once
    .venv/bin/python bench/bench_soak.py --markup-only        # hostile markup in every surface (soak_markup.py)
    .venv/bin/python bench/bench_soak.py --markup-only review,job   # only the surfaces so named

Loopback only: the server listens on 127.0.0.1 and headless Chromium visits nothing else.
Bounded: every wait has a time limit (--wait-s), the whole run a deadline (--deadline-s), and
the server is killed on the way out. Prints, and asserts nothing: every session answered (of 8,
per wave), the time each took, the waves' medians and their ratio, the server's peak memory
(its own RSS and with its child processes), memory growth per repeated action, and the
processes left 5 s after the SIGKILL (they should be 0; by default the kill comes as the sweep's
worker starts, the harshest moment), with the machine's load. --term-only: a SIGTERM while a
session traces and searches the large model on Plan a cluster: the server's exit code, whether its
log has an abort ("terminate called", NOTE: [Stopping while a script runs] in explorer/shutdown.py)
and the processes left 5 s later.

Sessions of a wave (as the attack that found issue 47 opened them): 3 x Explore with the model
graph by module, 2 x Plan a cluster, on the large model; 2 x Compare modes and 1 x Training
memory's min-cut sweep on the transformer sample.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable
from urllib.parse import urlencode

import soak_markup  # bench/ is the script's folder, so on sys.path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HF_MODEL = "Hugging Face architecture..."  # explorer.state.HF_MODEL: the sidebar's choice for hf: models
SAMPLE = "transformer"
WAVE = 8


# -- the server and its processes --------------------------------------------------------------


LOGS: dict[int, list[str]] = {}  # server pid -> its last lines of output


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(cache: str, wait_s: float) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    command = [
        str(Path(sys.executable).with_name("streamlit")),
        "run",
        "explorer/app.py",
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PARTITION_EXPLORER_CACHE": cache}
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started = threading.Event()
    LOGS[proc.pid] = []

    def pump() -> None:  # read the output all along, so the server never blocks on a full pipe
        assert proc.stdout is not None
        for line in proc.stdout:
            LOGS[proc.pid].append(line[:500])
            del LOGS[proc.pid][:-200]  # the last 200 lines
            if "URL:" in line:
                started.set()

    threading.Thread(target=pump, daemon=True).start()
    if not started.wait(wait_s):
        proc.kill()
        raise SystemExit(f"the server did not start within {wait_s:g} s")
    return proc, f"http://127.0.0.1:{port}"


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


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent's wait() is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Sampler:
    """The server's RSS, alone and with its child processes, every 0.25 s; the peaks."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_server, self.peak_total = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            own = rss_bytes(self.pid)
            self.peak_server = max(self.peak_server, own)
            self.peak_total = max(self.peak_total, own + sum(rss_bytes(c) for c in descendants(self.pid)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# -- sessions ---------------------------------------------------------------------------------


@dataclass
class Answer:
    name: str
    seconds: float
    ok: bool
    why: str = ""


def views(hf_spec: str, wait_ms: float) -> list[tuple[str, str, Callable[..., Awaitable[None]]]]:
    """(name, path and query, what shows that it answered) for the 8 sessions of a wave."""
    from playwright.async_api import expect

    hf = urlencode(
        {
            "model": HF_MODEL,
            "hf_name": hf_spec.removeprefix("hf:"),
            "hf_set": "dtype=bf16",
            "dev_count": 8,
            "dev_memory": "80GiB",
        }
    )

    async def by_module(page) -> None:
        await expect(page.locator(".pe-stage svg").first).to_contain_text("(x", timeout=wait_ms)

    async def cluster(page) -> None:
        await expect(page.get_by_text("Fewest devices").first).to_be_visible(timeout=wait_ms)

    async def compare(page) -> None:
        await expect(page.get_by_text("Side by side").first).to_be_visible(timeout=wait_ms)

    async def min_cut(page) -> None:
        button = page.get_by_role("button", name="Trace the joint graph and run min-cut")
        await button.click(timeout=wait_ms)
        await expect(page.get_by_text("Activation memory against recomputation").first).to_be_visible(timeout=wait_ms)

    explore = f"/?{hf}&{urlencode({'explore_view': 'Model graph by module'})}"
    return (
        [(f"explore by module {hf_spec}", explore, by_module)] * 3
        + [(f"plan a cluster {hf_spec}", f"/cluster?{hf}", cluster)] * 2
        + [(f"compare {SAMPLE}", f"/compare?model={SAMPLE}", compare)] * 2
        + [(f"min-cut sweep {SAMPLE}", f"/training?model={SAMPLE}", min_cut)]
    )


async def session(browser, base: str, name: str, path: str, answered: Callable[..., Awaitable[None]]) -> Answer:
    from playwright.async_api import expect

    context = await browser.new_context(viewport={"width": 1600, "height": 1400})
    page = await context.new_page()
    start = time.perf_counter()
    try:
        await page.goto(base + path, wait_until="commit")
        await answered(page)
        await expect(page.get_by_test_id("stException")).to_have_count(0)
        bug = await page.get_by_text("a bug in Partition Explorer").count()
        return Answer(name, time.perf_counter() - start, bug == 0, "the page says it met a bug" if bug else "")
    except Exception as exc:  # noqa: BLE001 - a session that did not answer is a figure, not a crash
        shown = await page.get_by_test_id("stException").all_inner_texts() if not page.is_closed() else []
        return Answer(
            name,
            time.perf_counter() - start,
            False,
            (shown[0] if shown else f"{type(exc).__name__}: {str(exc).splitlines()[0]}")[:200],
        )
    finally:
        await context.close()


async def wave(browser, base: str, hf_spec: str, wait_ms: float, cluster_only: int = 0) -> list[Answer]:
    """A wave's sessions at once: :func:`views`, or ``cluster_only`` sessions of its Plan a cluster
    view at seq 8192 (issue 57's 70B question: identical work shared, not repeated a session)."""
    shown = views(hf_spec, wait_ms)
    if cluster_only:
        name, path, answered = next(v for v in shown if v[0].startswith("plan a cluster"))
        shown = [(name, f"{path}&cl_seq=8192", answered)] * cluster_only
    return list(await asyncio.gather(*(session(browser, base, n, p, a) for n, p, a in shown)))


async def repeated(
    browser, base: str, server: int, hf_spec: str, actions: int, wait_ms: float, deadline: float
) -> tuple[int, int, list[float], int, int]:
    """One session switches between the large model's view by module and the sample's, ``actions``
    times: (done, answered, seconds each, server RSS after the first two, RSS at the end)."""
    from playwright.async_api import expect

    hf = urlencode(
        {
            "model": HF_MODEL,
            "hf_name": hf_spec.removeprefix("hf:"),
            "hf_set": "dtype=bf16",
            "dev_count": 8,
            "dev_memory": "80GiB",
            "explore_view": "Model graph by module",
        }
    )
    sample = urlencode({"model": SAMPLE, "explore_view": "Model graph by module"})
    context = await browser.new_context(viewport={"width": 1600, "height": 1400})
    page = await context.new_page()
    seconds: list[float] = []
    answered, before = 0, 0
    try:
        for i in range(actions):
            if time.monotonic() > deadline:
                break
            start = time.perf_counter()
            try:
                await page.goto(f"{base}/?{hf if i % 2 == 0 else sample}", wait_until="commit")
                marker = "model.layers" if i % 2 == 0 else "blocks."  # each model's own module names
                await expect(page.locator(".pe-stage svg").first).to_contain_text(marker, timeout=wait_ms)
                answered += 1
            except Exception:  # noqa: BLE001 - counted as not answered
                pass
            seconds.append(time.perf_counter() - start)
            if i == 1:
                before = rss_bytes(server)
    finally:
        await context.close()
    return len(seconds), answered, seconds, before, rss_bytes(server)


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "(gone)"


async def kill_during_min_cut(
    browser, base: str, proc: subprocess.Popen[str], wait_s: float, after_s: float = 0.0
) -> tuple[int, int]:
    """Start a min-cut sweep, SIGKILL the server once it has a child process, wait 5 s: (child
    processes it had, those still running). Those still running are named, and looked at again
    30 s later (then killed, so the bench leaves nothing behind)."""
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(f"{base}/training?model={SAMPLE}&knob_{SAMPLE}_seed=1", wait_until="commit")
    await page.get_by_role("button", name="Trace the joint graph and run min-cut").click(timeout=wait_s * 1000)
    end = time.monotonic() + wait_s
    children: list[int] = []
    while time.monotonic() < end and not children:
        await asyncio.sleep(0.2)
        children = descendants(proc.pid)
    await asyncio.sleep(after_s)  # 0: while the worker starts (imports torch); later: in the sweep itself
    children = descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    await asyncio.sleep(5)
    await context.close()
    left = [c for c in children if alive(c)]
    for c in left:
        print(f"  still running 5 s after the SIGKILL: pid {c}: {command_line(c)}")
    if left:
        await asyncio.sleep(30)
        later = [c for c in left if alive(c)]
        print(f"  35 s after the SIGKILL: {len(later)} still running")
        for c in later:
            with contextlib.suppress(OSError):
                os.kill(c, signal.SIGKILL)
    return len(children), len(left)


async def term_while_busy(
    browser, base: str, proc: subprocess.Popen[str], model: str, wait_s: float, after_s: float
) -> tuple[object, bool, int]:
    """Open Plan a cluster on ``model`` (a trace, then a search), SIGTERM the server ``after_s``
    later, wait for it to exit (at most 30 s, then SIGKILL): (its exit code, whether its log has an
    abort, its child processes still running 5 s after the exit)."""
    context = await browser.new_context()
    page = await context.new_page()
    query = {"model": HF_MODEL, "hf_name": model} if model.startswith("hf:") else {"model": model}
    await page.goto(f"{base}/cluster?{urlencode(query)}", wait_until="commit")
    await asyncio.sleep(after_s)
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    try:
        code: object = await asyncio.wait_for(asyncio.to_thread(proc.wait), min(wait_s, 30))
    except asyncio.TimeoutError:
        proc.kill()
        proc.wait()
        code = "did not exit in 30 s (SIGKILL)"
    await asyncio.sleep(5)
    await context.close()
    left = [c for c in children if alive(c)]
    for c in left:
        print(f"  still running 5 s after the SIGTERM: pid {c}: {command_line(c)}")
        with contextlib.suppress(OSError):
            os.kill(c, signal.SIGKILL)
    aborted = any("terminate called" in line for line in LOGS.get(proc.pid, []))
    return code, aborted, len(left)


# -- the run ----------------------------------------------------------------------------------


def report(title: str, answers: list[Answer]) -> float:
    ok = sum(a.ok for a in answers)
    median = statistics.median(a.seconds for a in answers)
    print(
        f"{title}: {ok} of {len(answers)} sessions answered; median {median:.1f} s, slowest {max(a.seconds for a in answers):.1f} s"
    )
    for a in answers:
        print(f"  {a.name:<40} {a.seconds:7.1f} s  {'answered' if a.ok else 'FAILED: ' + a.why}")
    return median


async def main_async(args: argparse.Namespace) -> None:
    from playwright.async_api import async_playwright

    deadline = time.monotonic() + args.deadline_s
    wait_ms = args.wait_s * 1000
    with tempfile.TemporaryDirectory(prefix="pe-soak-") as cache:
        proc, base = start_server(cache, 90)
        sampler = Sampler(proc.pid)
        print(f"server pid {proc.pid} at {base}; an empty trace cache; load {os.getloadavg()[0]:.1f}")
        try:
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    if args.markup_only is not None:
                        sweep = soak_markup.sweep(
                            browser, base, min(args.wait_s, 60), args.deadline_s, args.markup_only
                        )
                        soak_markup.report(*await sweep)
                        return
                    if args.term_only:
                        code, aborted, left = await term_while_busy(
                            browser, base, proc, args.model, args.wait_s, args.term_after_s
                        )
                        print(
                            f"SIGTERM of the server {args.term_after_s:g} s into Plan a cluster on {args.model}: exit "
                            f"{code}; {'an abort in its log' if aborted else 'no abort in its log'}; {left} child "
                            "process(es) still running 5 s later"
                        )
                        return
                    if args.kill_only:
                        had, left = await kill_during_min_cut(
                            browser, base, proc, min(args.wait_s, 60), args.kill_after_s
                        )
                        print(
                            f"SIGKILL of the server during a min-cut sweep ({args.kill_after_s:g} s after its worker started): it had {had} child process(es); "
                            f"{left} still running 5 s later"
                        )
                        return
                    if args.cluster_only:
                        answers = await wave(browser, base, args.model, wait_ms, args.cluster_only)
                        report(f"{args.cluster_only} sessions opening Plan a cluster at once (fresh server)", answers)
                        return
                    first = await wave(browser, base, args.model, wait_ms)
                    m1 = report("first wave (fresh server, nothing traced)", first)
                    second = await wave(browser, base, args.model, wait_ms)
                    m2 = report("second wave", second)
                    print(f"second wave / first wave (medians): {m2 / m1:.2f}")
                    done, answered, seconds, before, after = await repeated(
                        browser, base, proc.pid, args.model, args.actions, wait_ms, deadline
                    )
                    growth = (after - before) / max(1, done - 2)
                    print(
                        f"repeated action ({args.model} by module <-> {SAMPLE}): {answered} of {done} answered "
                        f"(of {args.actions} asked); median {statistics.median(seconds):.1f} s; server RSS "
                        f"{before / 2**20:.0f} MiB after 2, {after / 2**20:.0f} MiB after {done}: "
                        f"{growth / 2**20:+.2f} MiB per action"
                    )
                    sampler.stop()
                    print(
                        f"peak memory: server {sampler.peak_server / 2**20:.0f} MiB, with its child processes "
                        f"{sampler.peak_total / 2**20:.0f} MiB"
                    )
                    had, left = await kill_during_min_cut(browser, base, proc, min(args.wait_s, 60), args.kill_after_s)
                    print(
                        f"SIGKILL of the server during a min-cut sweep ({args.kill_after_s:g} s after its worker started): it had {had} child process(es); "
                        f"{left} still running 5 s later"
                    )
                finally:
                    await browser.close()
        finally:
            sampler.stop()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="hf:llama-3-70b", help="the large model (default hf:llama-3-70b)")
    parser.add_argument("--actions", type=int, default=50, help="repeated heavy actions (default 50)")
    parser.add_argument("--wait-s", type=float, default=300.0, help="longest wait for one answer (default 300)")
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=900.0,
        help="the repeated actions stop past this many seconds from the start (default 900)",
    )
    parser.add_argument("--kill-only", action="store_true", help="only the SIGKILL during a min-cut sweep")
    parser.add_argument(
        "--kill-after-s",
        type=float,
        default=0.0,
        help="SIGKILL this long after the sweep's worker appears (default 0: while it starts)",
    )
    parser.add_argument(
        "--cluster-only", type=int, default=0, help="only N sessions opening Plan a cluster at seq 8192 together"
    )
    parser.add_argument(
        "--markup-only",
        nargs="?",
        const="",
        metavar="WORDS",
        help="only the markup sweep: every surface x 6 payloads by --deadline-s (or the surfaces whose names "
        "hold one of WORDS, comma-separated)",
    )
    parser.add_argument("--term-only", action="store_true", help="only the SIGTERM while a session is inside torch")
    parser.add_argument(
        "--term-after-s",
        type=float,
        default=8.0,
        help="SIGTERM this long after the session opens Plan a cluster (default 8: in its trace or search)",
    )
    args = parser.parse_args()
    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"{CHROMIUM} is missing: install Chromium (bash scripts/setup.sh --test)")
    if not 1 <= args.actions <= 1000:
        raise SystemExit(f"--actions must be from 1 to 1000 (got {args.actions})")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
