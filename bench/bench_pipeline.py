"""Pipeline split and simulation speed, and the optimal split against the ones people use.

Prints the DP split time for chains of 100, 1,000 and 5,000 layers (k = 8 stages), the simulation time of 1F1B at p = 8, m = 64,
and on gpt2_small and a 48-layer transformer the simulated step time of the optimal split
against equal-layer and by-parameter splits.

    .venv/bin/python bench/bench_pipeline.py
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from partitioner import Device, pipeline
from partitioner.testing.synthetic import synthetic_graph


def main() -> None:
    rng = random.Random(0)
    for n in (100, 1000, 5000):
        graph = synthetic_graph([(i, i + 1) for i in range(n - 1)], [rng.randint(1, 100) for _ in range(n)])
        latency = {f"op{i}": (0.0, rng.random()) for i in range(n)}
        devices = [Device(f"d{i}", 10**9, i) for i in range(8)]
        start = time.perf_counter()
        pipeline.plan(graph, devices, stages=8, microbatches=16, node_latency=latency, training="adam")
        print(f"split of {n} layers into 8 stages: {time.perf_counter() - start:.3f} s")
    start = time.perf_counter()
    sim = pipeline.simulate([0.01] * 8, 64, "1f1b")
    print(
        f"simulating 1F1B at p=8, m=64: {1000 * (time.perf_counter() - start):.1f} ms (bubble {sim.bubble_fraction:.3f})\n"
    )
    print(f"{'model':<16} {'schedule':<12} {'optimal':>10} {'equal layers':>13} {'by params':>10}")
    for name, overrides, devices in (("gpt2_small", {}, "4x1GiB"), ("transformer", {"n_layer": 48}, "4x256MiB")):
        module, inputs, _ = sample_models.load(name, overrides)
        graph = partitioner.trace(module, inputs)
        for schedule in ("gpipe", "1f1b"):
            pp = pipeline.plan(
                graph, partitioner.parse_devices(devices), stages=4, microbatches=16, schedule=schedule, training="adam"
            )
            base = {n: s for n, s, _ in pp.baselines}
            print(
                f"{name:<16} {schedule:<12} {pp.step_time_s * 1e3:>8.2f}ms {base['equal layers'] * 1e3:>11.2f}ms "
                f"{base['by parameters'] * 1e3:>8.2f}ms"
            )


if __name__ == "__main__":
    main()
