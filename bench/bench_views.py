"""How long the app's graph views take to lay out and show (issue: graphs people can read at any
size). Each view is what the page builds and hands the viewer: the DOT from the library's
builders and the SVG laid out by Graphviz's ``dot`` (the browser only pans it afterwards).

    .venv/bin/python bench/bench_views.py            # 1,000 and 5,000 nodes
    .venv/bin/python bench/bench_views.py --sizes 1000

Graphs: :func:`partitioner.testing.synthetic.blocks_graph` (repeated blocks of 25 nodes with
module paths, as a traced transformer), one partition per block on 8 devices. Target: every
view under 2 s. The reference, measured in the same run, is the one picture there was before:
every node of the model in one ``dot`` layout (stopped after 120 s); the ratio says how much
faster the collapsed view is.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
from explorer.builders import tables
from partitioner.cost.model import node_seconds
from partitioner.draw.collapse import collapse, collapsed_to_dot
from partitioner.draw.dag import plan_to_dot, render_dot
from partitioner.draw.nodeview import partition_to_dot
from partitioner.plan.diff import diff_plans
from partitioner.testing.synthetic import blocks_graph

TARGET_S = 2.0
REFERENCE_LIMIT_S = 120


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def full_node_dot(graph: partitioner.Graph) -> str:
    """Every op node in one DOT graph (the picture without collapsing)."""
    lines = ["digraph all {", "  node [shape=box, style=rounded];"]
    ops = set(graph.op_indices)
    for v in graph.op_indices:
        lines.append(f'  n{v} [label="{graph.nodes[v].name}"];')
        lines += [f"  n{u} -> n{v};" for u in graph.preds[v] if u in ops]
    return "\n".join(lines + ["}"])


def reference_s(dot: str) -> float | None:
    start = time.perf_counter()
    try:
        subprocess.run(
            ["dot", "-Tsvg", "-o", "/dev/null"],
            input=dot.encode(),
            check=True,
            timeout=REFERENCE_LIMIT_S,
            capture_output=True,
        )
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000])
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        graph = blocks_graph(max(1, size // 25))
        devices = partitioner.parse_devices(f"8x{graph.total_size_bytes}")
        where = {
            graph.nodes[v].name: (
                0
                if not graph.nodes[v].module_path.startswith("blocks.")
                else int(graph.nodes[v].module_path.split(".")[1]) + 1
            )
            for v in graph.op_indices
        }
        blocks = max(where.values()) + 1
        plan = partitioner.evaluate_plan(
            graph, devices, where, {p: [p % 8] for p in range(blocks)}, transfer_rate_bytes_per_s=25e9
        )
        other = partitioner.evaluate_plan(
            graph, devices, where, {p: [(p // 2) % 8] for p in range(blocks)}, transfer_rate_bytes_per_s=25e9
        )
        node_s = node_seconds(graph, list(plan.devices))
        n = len(graph.op_indices)
        rows.append(
            (
                f"{n} nodes: partition DAG ({len(plan.partitions)} partitions)",
                timed(lambda: render_dot(plan_to_dot(plan, graph, overlay="latency"))),
            )
        )
        collapsed = timed(lambda: render_dot(collapsed_to_dot(collapse(graph, plan, node_s), plan)))
        rows.append((f"{n} nodes: model graph collapsed by module", collapsed))
        rows.append(
            (
                f"{n} nodes: collapsed, one block expanded",
                timed(lambda: render_dot(collapsed_to_dot(collapse(graph, plan, node_s, expanded={"blocks.3"}), plan))),
            )
        )
        big = partitioner.evaluate_plan(
            graph, devices, {name: p // 12 for name, p in where.items()}, {p: [p % 8] for p in range(blocks // 12 + 1)}
        )
        largest = max(big.partitions, key=lambda p: len(p.node_names))
        rows.append(
            (
                f"{n} nodes: drill-down of a {len(largest.node_names)}-node partition",
                timed(lambda: render_dot(partition_to_dot(big, graph, largest.id, overlay="memory", node_s=node_s))),
            )
        )

        def side_by_side() -> None:
            render_dot(plan_to_dot(plan, graph))
            render_dot(plan_to_dot(other, graph))
            tables.moves_table(plan, other)
            tables.partition_delta_table(diff_plans(plan, other))

        rows.append((f"{n} nodes: side by side of two plans", timed(side_by_side)))
        ref = reference_s(full_node_dot(graph))
        ref_text = f"> {REFERENCE_LIMIT_S} s (stopped)" if ref is None else f"{ref:.2f} s"
        ratio = (REFERENCE_LIMIT_S if ref is None else ref) / collapsed
        rows.append(
            (
                f"{n} nodes: reference, every node in one layout: {ref_text}; collapsed is "
                f"{'>' if ref is None else ''}{ratio:.0f}x faster",
                None,
            )
        )
    print(f"{'view':<72} {'seconds':>8}  target {TARGET_S:.0f} s")
    for name, seconds in rows:
        if seconds is None:
            print(name)
        else:
            print(f"{name:<72} {seconds:8.3f}  {'ok' if seconds < TARGET_S else 'OVER'}")


if __name__ == "__main__":
    main()
