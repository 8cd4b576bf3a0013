"""How quickly the app answers: re-plan + DOT + figures + tables after a device edit.

    .venv/bin/python bench/bench_app.py             # pure builders: default model and gpt2_small
    .venv/bin/python bench/bench_app.py --apptest   # also full Streamlit reruns under AppTest

Prints figures, asserts nothing (the target for a device edit on the default model is < 1 s).
The builders are the ones the app calls (``explorer.builders.figures``, ``explorer.builders.tables``,
``partitioner.draw.dag``); the numbers leave out the browser's own drawing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from explorer.builders import figures, tables, timeline
from explorer.builders.config import DEFAULT_MODEL, PLAN_MODES
from partitioner.draw.dag import plan_to_dot, render_dot

TARGET_S = 1.0


def timed(fn: Callable[[], object], repeat: int = 1) -> tuple[float, object]:
    """Median seconds over ``repeat`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def draw(plan: partitioner.Plan) -> None:
    """Everything the Explore page builds from a plan."""
    plan_to_dot(plan)
    figures.memory_figure(plan)
    figures.device_memory_figure(plan)
    figures.latency_figure(plan)
    timeline.timeline_figure(plan)
    tables.partition_table(plan)
    tables.device_table(plan)
    tables.edge_table(plan)


def trace(name: str) -> tuple[float, partitioner.Graph]:
    def go() -> partitioner.Graph:
        module, example = sample_models.build(name)
        return partitioner.trace(module, example, name=name)

    return timed(go)  # type: ignore[return-value]


def device_edits(name: str) -> list[list[partitioner.Device]]:
    """The default devices, then edits a person makes: one more device, more memory, a
    mixed set, a transfer rate is separate (see below)."""
    count, memory = sample_models.default_devices(name)
    return [
        partitioner.parse_devices(f"{count}x{memory}B"),
        partitioner.parse_devices(f"{count + 1}x{memory}B"),
        partitioner.parse_devices(f"{count}x{memory * 5 // 4}B"),
        partitioner.parse_devices(f"{count - 1}x{memory * 5 // 4}B,1x{memory // 2}B"),
    ]


def bench_default(repeat: int) -> None:
    print(f"== default model: {DEFAULT_MODEL}, mode {partitioner.DEFAULT_MODE}")
    seconds, graph = trace(DEFAULT_MODEL)
    print(f"trace (once, cached by the app): {seconds:.3f} s  ({len(graph.nodes)} nodes)")
    worst = 0.0
    for devices in device_edits(DEFAULT_MODEL):
        sizes = [partitioner.format_bytes(d.memory_bytes) for d in devices]
        spec = ",".join(f"{sizes.count(s)}x{s}" for s in dict.fromkeys(sizes))
        plan_s, plan = timed(lambda: partitioner.partition(graph, devices, mode=partitioner.DEFAULT_MODE), repeat)
        draw_s, _ = timed(lambda: draw(plan), repeat)  # type: ignore[arg-type]
        worst = max(worst, plan_s + draw_s)
        print(
            f"device edit [{spec}]: plan {plan_s * 1e3:.1f} ms + "
            f"DOT/figures/tables {draw_s * 1e3:.1f} ms = {(plan_s + draw_s) * 1e3:.1f} ms "
            f"({len(plan.partitions)} partitions)"
        )  # type: ignore[union-attr]
    print(
        f"worst re-plan + rebuild after a device edit: {worst * 1e3:.1f} ms "
        f"(target < {TARGET_S * 1e3:.0f} ms: {'met' if worst < TARGET_S else 'MISSED'})"
    )
    devices = device_edits(DEFAULT_MODEL)[0]
    for mode in PLAN_MODES:
        _report_mode(graph, devices, mode, repeat)


def _report_mode(
    graph: partitioner.Graph, devices: list[partitioner.Device], mode: str, repeat: int, layout: bool = False
) -> None:
    try:
        plan_s, plan = timed(lambda: partitioner.partition(graph, devices, mode=mode), repeat)
    except partitioner.PartitionError as exc:
        print(f"  {mode:<11} no plan: {str(exc).splitlines()[0][:90]}")
        return
    draw_s, _ = timed(lambda: draw(plan), repeat)  # type: ignore[arg-type]
    line = (
        f"  {mode:<11} plan {plan_s * 1e3:8.1f} ms  DOT/figures/tables {draw_s * 1e3:7.1f} ms  "
        f"{len(plan.partitions):4d} partitions"
    )  # type: ignore[union-attr]
    if layout:
        layout_s, _ = timed(lambda: render_dot(plan_to_dot(plan), "svg"))  # type: ignore[arg-type]
        line += f"  (dot -Tsvg layout {layout_s * 1e3:.0f} ms)"
    print(line)


def bench_gpt2(repeat: int) -> None:
    print("== gpt2_small (124M parameters)")
    seconds, graph = trace("gpt2_small")
    print(f"trace: {seconds:.2f} s  ({len(graph.nodes)} nodes, {partitioner.format_bytes(graph.total_size_bytes)})")
    devices = device_edits("gpt2_small")[0]
    print(f"devices: {len(devices)} x {partitioner.format_bytes(devices[0].memory_bytes)}")
    for mode in PLAN_MODES:
        _report_mode(graph, devices, mode, repeat, layout=True)
    worst = 0.0
    for devices in device_edits("gpt2_small")[1:]:
        plan_s, plan = timed(lambda: partitioner.partition(graph, devices, mode=partitioner.DEFAULT_MODE), repeat)
        draw_s, _ = timed(lambda: draw(plan), repeat)  # type: ignore[arg-type]
        worst = max(worst, plan_s + draw_s)
    print(f"worst re-plan + rebuild after a device edit ({partitioner.DEFAULT_MODE}): {worst * 1e3:.1f} ms")


def bench_apptest() -> None:
    from streamlit.testing.v1 import AppTest

    print("== full Streamlit reruns (AppTest, no browser drawing)")
    start = time.perf_counter()
    at = AppTest.from_file(str(ROOT / "explorer" / "app.py"), default_timeout=300).run()
    print(f"first run (imports, trace, plan, draw): {time.perf_counter() - start:.2f} s")
    for count in (5, 6, 3):
        start = time.perf_counter()
        at.number_input(key="dev_count").set_value(count).run()
        print(
            f"rerun after setting {count} devices: {(time.perf_counter() - start) * 1e3:.0f} ms "
            f"({at.session_state['plan_summary']['partitions']} partitions)"
        )
    start = time.perf_counter()
    at.selectbox(key="model").set_value("gpt2_small").run()
    print(f"switch to gpt2_small (trace + plan + draw): {time.perf_counter() - start:.2f} s")
    for mode in PLAN_MODES:
        start = time.perf_counter()
        at.selectbox(key="mode").set_value(mode).run()
        summary = at.session_state["plan_summary"]
        what = f"{summary['partitions']} partitions" if summary else "no plan"
        print(f"  gpt2_small {mode:<11} rerun {time.perf_counter() - start:.2f} s ({what})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="median of this many runs per figure")
    parser.add_argument("--apptest", action="store_true", help="also time full reruns under AppTest")
    args = parser.parse_args()
    bench_default(args.repeat)
    bench_gpt2(args.repeat)
    if args.apptest:
        bench_apptest()


if __name__ == "__main__":
    main()
