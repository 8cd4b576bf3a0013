"""What checking a plan file against its schema costs, against reading its JSON (the reference,
measured in the same run), on a sample model and on Llama-3-70B at real size (bf16, meta weights);
and how soon a Hugging Face config field out of range is refused on the 70B preset.

    .venv/bin/python bench/bench_plan_schema.py          # transformer and hf:llama-3-70b
    .venv/bin/python bench/bench_plan_schema.py --quick  # transformer only

Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from partitioner.plan.schema import check  # noqa: E402


def timed(fn: Callable[[], object], repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def plan_text(spec: str, overrides: dict, devices: str) -> tuple[str, int]:
    loaded = sample_models.load(spec, overrides)
    graph = sample_models.trace_loaded(spec, overrides, loaded, sample_models.label(spec, overrides))
    plan = partitioner.partition(graph, partitioner.parse_devices(devices))
    return plan.to_json(), sum(len(p.node_names) for p in plan.partitions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the sample model only")
    args = parser.parse_args()
    cases = [("transformer", {}, "4x4MiB")]
    if not args.quick:
        cases.append(("hf:llama-3-70b", {"dtype": "bf16"}, "4xh100-80gb"))
    print(
        f"{'model':<16} {'nodes':>6} {'JSON KiB':>9} {'json.loads':>11} {'check':>9} {'from_json':>10} "
        f"{'check / loads':>14}"
    )
    for spec, overrides, devices in cases:
        text, nodes = plan_text(spec, overrides, devices)
        loads = timed(lambda: json.loads(text))
        data = json.loads(text)
        checking = timed(lambda: check(data))
        whole = timed(lambda: partitioner.Plan.from_json(text))
        print(
            f"{spec:<16} {nodes:>6} {len(text) / 1024:>9.0f} {loads * 1e3:>9.2f}ms {checking * 1e3:>7.2f}ms "
            f"{whole * 1e3:>8.2f}ms {checking / loads:>13.2f}x"
        )
    if not args.quick:
        start = time.perf_counter()
        try:
            sample_models.load("hf:llama-3-70b", {"dtype": "bf16", "num_attention_heads": 0})
        except sample_models.ModelSpecError as exc:
            print(f"hf:llama-3-70b num_attention_heads=0 refused in {time.perf_counter() - start:.2f} s: {exc}")


if __name__ == "__main__":
    main()
