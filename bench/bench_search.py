"""Benchmark the cluster search against a previous implementation, in one run: each search in a
fresh process (torch already imported, as in the CLI and the app after the trace; the schedule
simulator's cache empty), its CPU and wall time, and whether both give the same answers: every
fitting layout's label, step and memory, the fastest, cheapest, fewest-devices answers and the
Pareto front.

The previous implementation is a commit of this repository (default: the one before the search's
memo, ``--before``), unpacked with ``git archive`` into a temporary folder. Each model's graph comes
from the trace cache the CLI and the app share (traced once if missing) and is profiled once; both
implementations search that same profile. The load average is printed: on a shared machine compare
the ratio, measured in the same run, not the seconds.

    .venv/bin/python bench/bench_search.py                        # the 70B page and the 405B question
    .venv/bin/python bench/bench_search.py --cases 70b-train 8b-train --before HEAD~3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BEFORE = "4e00ab16d0dc13fd3c44f4be4ca444266d8af3a6"  # the search before its memo and replayed orders (issue 57)

# name -> (model, workload fields, nodes of 8 H100s searched up to): the CLI's defaults otherwise
CASES: dict[str, tuple[str, dict, int]] = {
    "70b-train": ("hf:llama-3-70b", {"global_batch": 512, "seq_len": 8192}, 64),  # Plan a cluster's 70B question
    "405b-train": ("hf:llama-3.1-405b", {"global_batch": 512, "seq_len": 4096}, 2048),  # 16,384 GPUs
    "8b-train": ("hf:llama-3-8b", {"global_batch": 512, "seq_len": 4096}, 64),
    "mixtral-train": ("hf:mixtral-8x7b", {"global_batch": 512, "seq_len": 4096}, 16),
    "70b-serve": ("hf:llama-3-70b", {"kind": "inference", "global_batch": 64, "seq_len": 4096}, 16),
}
DEFAULT_CASES = ("70b-train", "405b-train")


def _profile(spec: str, folder: Path) -> Path:
    """The profile of ``spec`` in bf16 (graph from the trace cache), pickled under ``folder``."""
    import sample_models
    from partitioner import cluster
    from partitioner.tracing import cache as trace_cache

    overrides = sample_models.parse_overrides(spec, ["dtype=bf16"])
    label = sample_models.label(spec, overrides)
    graph = trace_cache.cached_trace(
        trace_cache.model_key(spec, overrides),
        lambda: sample_models.trace_loaded(spec, overrides, sample_models.load(spec, overrides), label),
    )
    path = folder / f"{spec.replace(':', '_')}.pkl"
    prof = dataclasses.replace(cluster.profile(graph, label), _cache={})
    path.write_bytes(pickle.dumps(prof))
    return path


def _child(root: str, case: str, profile: str, out: str) -> None:
    """In a fresh process: search ``case`` with the code under ``root``; write times and answers."""
    sys.path.insert(0, root)
    import torch.distributed.pipelining  # noqa: F401  (loaded in the CLI and the app before a search)

    from partitioner import cluster

    module = sys.modules.get("partitioner.cluster.layout_search") or sys.modules["partitioner.cluster.search"]  # before
    searched = module.__file__ or ""
    if not searched.startswith(root):
        raise SystemExit(f"the search came from {searched}, not from {root}")
    spec, fields, nodes = CASES[case]
    prof = pickle.loads(Path(profile).read_bytes())
    work = cluster.Workload(**fields)
    target = cluster.cluster("h100-80gb", 8)
    cpu, wall = time.process_time(), time.perf_counter()
    found = cluster.search(prof, work, target, cluster.device_counts(8, nodes))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall

    def name(r):
        return None if r is None else (r.layout.label(), r.step_s)

    answers = {
        "fitting": sorted((r.layout.label(), r.step_s, tuple(sorted(r.memory.items()))) for r in found.fitting),
        "answers": (name(found.fastest), name(found.cheapest), name(found.fewest_devices), name(found.knee)),
        "front": [name(r) for r in found.front],
        "evaluated": found.evaluated,
    }
    Path(out).write_bytes(pickle.dumps({"cpu": cpu, "wall": wall, "answers": answers}))


def _run(root: Path, case: str, profile: Path, folder: Path) -> dict:
    out = folder / f"{case}-{root.name}.pkl"
    subprocess.run(
        [sys.executable, __file__, "--child", str(root), case, str(profile), str(out)],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    return pickle.loads(out.read_bytes())


def unpack_commit(rev: str, folder: Path) -> Path:
    """The tree of commit ``rev`` of this repository under ``folder`` (bench_cluster_page.py too)."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    target = folder / "before"
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(target, filter="data")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(DEFAULT_CASES))
    parser.add_argument("--before", default=BEFORE, help=f"the commit to compare with (default {BEFORE[:10]})")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        before = unpack_commit(args.before, folder)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; before = {args.before[:10]}")
        header = ("case", "layouts", "before cpu", "before wall", "after cpu", "after wall", "cpu ratio", "answers")
        rows = []
        profiles: dict[str, Path] = {}
        for case in args.cases:
            spec = CASES[case][0]
            if spec not in profiles:
                profiles[spec] = _profile(spec, folder)
            old = _run(before, case, profiles[spec], folder)
            new = _run(ROOT, case, profiles[spec], folder)
            same = "identical" if old["answers"] == new["answers"] else "DIFFERENT"
            rows.append(
                (
                    case,
                    f"{new['answers']['evaluated']:,}",
                    f"{old['cpu']:.2f} s",
                    f"{old['wall']:.2f} s",
                    f"{new['cpu']:.2f} s",
                    f"{new['wall']:.2f} s",
                    f"{old['cpu'] / new['cpu']:.1f}x",
                    same,
                )
            )
            print(f"  {case}: {rows[-1][4]} cpu against {rows[-1][2]} ({rows[-1][6]}), {same}", flush=True)
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for r in [header, tuple("-" * w for w in widths), *rows]:
            print("  ".join(str(cell).ljust(w) for cell, w in zip(r, widths)))
        print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
