"""Graph views at real size: trace (cold, then from the disk cache) and each view the Explore page
draws, on the sample transformers and the hf: presets at bf16 on meta weights.

    .venv/bin/python bench/bench_graphs.py                         # all five models
    .venv/bin/python bench/bench_graphs.py --models gpt2_small hf:llama-3-70b

Each view is what the page builds and hands the viewer: the DOT from the library's builders and
the SVG laid out by Graphviz's ``dot``. Views: the model graph by module (repeated blocks folded),
a search (the same view with the hits outlined), expanding the folded blocks (their first block
opened) and the drill-down of the largest partition of a size_based plan on 4 devices. Target:
under 1 s each after the trace. The reference, measured in the same run, is the same model graph
without folding (a box per block, as before), laid out by ``dot`` and stopped after
``--reference-limit`` seconds; the ratio says how much faster the folded view is. The cold trace
runs in a fresh cache folder, so the cached figure is a real read of what it wrote.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from partitioner.cost.model import node_seconds  # noqa: E402
from partitioner.draw.collapse import collapse, collapsed_to_dot, expand_key, search  # noqa: E402
from partitioner.draw.dag import render_dot  # noqa: E402
from partitioner.draw.nodeview import partition_to_dot  # noqa: E402
from partitioner.tracing import cache  # noqa: E402

TARGET_S = 1.0
MODELS = ("transformer", "gpt2_small", "hf:llama-3-8b", "hf:llama-3-70b", "hf:mixtral-8x7b")
FOLD_ABOVE = 150  # as explorer.graph_panels: a larger partition is drawn by module


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def reference_s(dot: str, limit: float) -> float | None:
    start = time.perf_counter()
    try:
        subprocess.run(
            ["dot", "-Tsvg", "-o", "/dev/null"], input=dot.encode(), check=True, timeout=limit, capture_output=True
        )
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


def bench(spec: str, limit: float) -> list[str]:
    overrides = {"dtype": "bf16"} if sample_models.is_hf(spec) else {}
    label = sample_models.label(spec, overrides)
    key = cache.model_key(spec, overrides)

    def build() -> partitioner.Graph:
        return sample_models.trace_loaded(spec, overrides, sample_models.load(spec, overrides), label)

    cold, graph = timed(lambda: cache.cached_trace(key, build))
    warm, again = timed(lambda: cache.cached_trace(key, build))
    assert isinstance(again, cache.CachedGraph) and again.fingerprint() == graph.fingerprint()  # type: ignore[union-attr]
    graph = again  # the views run on what a reopened model gets
    n = len(graph.op_indices)  # type: ignore[union-attr]
    devices = partitioner.parse_devices(f"4x{int(graph.total_size_bytes / 3.5)}")  # type: ignore[union-attr]
    plan = partitioner.partition(graph, devices, "size_based")
    node_s = node_seconds(graph, list(plan.devices))
    rows = [f"{spec} ({n} ops): trace cold {cold:.2f} s, from the cache {warm:.3f} s ({cold / warm:.0f}x)"]

    def view(expanded: set[str] = frozenset(), hits: str = "") -> str:  # type: ignore[assignment]
        cg = collapse(graph, plan, node_s, expanded=expanded)
        boxes = []
        if hits:
            found = search(graph, hits, plan)
            boxes = sorted({cg.box_of[v] for v in found.nodes if cg.box_of[v] >= 0})
        render_dot(collapsed_to_dot(cg, plan, highlight=boxes, title=label))
        return next((g.key for g in cg.groups if g.blocks), "")

    t_model, fold = timed(view)
    query = (
        ".".join(next(g for g in collapse(graph).groups if g.blocks).blocks[0].split(".")[:-1] + ["3"])
        if fold
        else graph.nodes[graph.op_indices[n // 2]].name
    )  # type: ignore[union-attr]
    t_search, _ = timed(lambda: view(hits=query))
    t_expand, _ = timed(lambda: view(expanded={expand_key(fold)} if fold else set()))
    largest = max(plan.partitions, key=lambda p: len(p.node_names))

    def drill() -> None:
        if len(largest.node_names) > FOLD_ABOVE:
            only = [graph.index[name] for name in largest.node_names]  # type: ignore[union-attr]
            render_dot(collapsed_to_dot(collapse(graph, plan, node_s, only=only), plan))
        else:
            render_dot(partition_to_dot(plan, graph, largest.id, node_s=node_s))

    t_drill, _ = timed(drill)
    flat = collapsed_to_dot(collapse(graph, plan, node_s, fold=False), plan)
    ref = reference_s(flat, limit)
    ref_text = f"> {limit:.0f} s (stopped)" if ref is None else f"{ref:.2f} s"
    for name, seconds in (
        ("model graph by module", t_model),
        (f"search {query!r}", t_search),
        (f"expand {fold or '(nothing folded)'}", t_expand),
        (f"drill-down of P{largest.id} ({len(largest.node_names)} nodes)", t_drill),
    ):
        rows.append(f"  {name:<58} {seconds:8.3f} s  {'ok' if seconds < TARGET_S else 'OVER'}")
    rows.append(
        f"  reference: unfolded model graph {ref_text}; folded is "
        f"{'>' if ref is None else ''}{(limit if ref is None else ref) / t_model:.0f}x faster"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--reference-limit", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        os.environ[cache.ENV] = folder
        print(f"target: every view under {TARGET_S:.0f} s after the trace; load {os.getloadavg()[0]:.1f}")
        for spec in args.models:
            for row in bench(spec, args.reference_limit):
                print(row, flush=True)


if __name__ == "__main__":
    main()
