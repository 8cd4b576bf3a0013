"""Benchmark the Plan a cluster page's whole path for Llama-3-70B against a previous release, in
one run: the page opened by a link (the model from the trace cache, its profile, the search, the
answers, the tables and every chart), as a person opening it on a running server sees it.

Each implementation runs in a fresh process of its own tree (the previous one is a commit of this
repository, unpacked with ``git archive``) under Streamlit's ``AppTest``:

1. a warm-up opening of the page (it traces the model into the trace cache if missing, imports
   torch, transformers and Streamlit);
2. Streamlit's caches cleared (the app holds its traced model there), the page opened again, timed (wall
   and the process's CPU): the server is up and the trace is on disk, nothing else is known;
3. the page run again with the same inputs, timed: every answer from Streamlit's cache.

The load average is printed: on a shared machine compare the ratio measured in the same run.

    .venv/bin/python bench/bench_cluster_page.py                   # 70B, seq 8192, against the 11-24 release
    .venv/bin/python bench/bench_cluster_page.py --seq 4096 --before HEAD~5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_search import unpack_commit  # bench/ is the script's folder, first on sys.path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "1a4e1db"  # the release before issue 57 (its page opened the 70B question in 9.0 s at load 12.7)
LINK = {"model": "Hugging Face architecture...", "hf_name": "llama-3-70b", "hf_set": "dtype=bf16"}


def _child(root: str, seq: int, out: str) -> None:
    """Open the page three times in this process (see the module's docstring); write the times."""
    os.chdir(root)
    sys.path.insert(0, root)
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    def opened() -> AppTest:
        at = AppTest.from_file(str(Path(root) / "explorer" / "app.py"), default_timeout=1800)
        at.query_params.update(LINK)
        at.session_state["cl_seq"] = seq
        at.switch_page("views/cluster.py")
        return at

    def timed(at: AppTest) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        at.run()
        if at.exception:
            raise SystemExit(f"the page failed: {at.exception}")
        return time.perf_counter() - wall, time.process_time() - cpu

    opened().run()  # warm-up: trace cache, imports
    st.cache_data.clear()
    st.cache_resource.clear()  # the app's traced model: read again from the trace cache on disk
    at = opened()
    first = timed(at)
    again = timed(at)
    labels = [m.label for m in at.metric]
    Path(out).write_text(json.dumps({"open": first, "again": again, "answers": labels}))


def _run(root: Path, seq: int, folder: Path) -> dict:
    out = folder / f"{root.name}.json"
    subprocess.run([sys.executable, __file__, "--child", str(root), str(seq), str(out)], check=True)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq", type=int, default=8192, help="the page's sequence length (default 8192)")
    parser.add_argument("--before", default=BEFORE, help=f"the commit to compare with (default {BEFORE})")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], int(args.child[1]), args.child[2])
        return
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; before = {args.before}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        old = _run(unpack_commit(args.before, folder), args.seq, folder)
        new = _run(ROOT, args.seq, folder)
    header = ("Llama-3-70B, seq " + str(args.seq), "before wall", "before cpu", "now wall", "now cpu", "cpu ratio")
    rows = [
        (what, f"{old[key][0]:.2f} s", f"{old[key][1]:.2f} s", f"{new[key][0]:.2f} s", f"{new[key][1]:.2f} s",
         f"{old[key][1] / max(new[key][1], 1e-9):.1f}x")
        for what, key in (("open the page (trace on disk)", "open"), ("run it again (cached)", "again"))
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)))
    print(f"answers shown: before {old['answers']}, now {new['answers']}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
