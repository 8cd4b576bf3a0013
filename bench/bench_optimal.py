"""How far each mode's plan is from the best possible: every heuristic against the ``optimal``
mode (CP-SAT with a time limit) and the strongest lower bound proven in the same run.

For random graphs of several sizes (torch's test latencies, four devices that need three) and
for the sample models on their default devices, it prints each mode's latency, time, its gap to
the bound, and the optimal mode's status. Usage:

    .venv/bin/python bench/bench_optimal.py                    # sizes 20 50 150 500, limit 10 s
    .venv/bin/python bench/bench_optimal.py --sizes 50 --limit 5 --models moe
"""

from __future__ import annotations

import argparse
import time

import partitioner
import sample_models
from partitioner import Device
from partitioner.units import format_seconds

from bench_modes import setup

HEURISTICS = ["size_based", "largest_first", "cost_aware", "kl_based"]


def run_case(label: str, graph: partitioner.Graph, devices: list[Device], limit: float, **kw) -> None:
    rows = []
    for mode in HEURISTICS + ["optimal"]:
        began = time.perf_counter()
        try:
            plan = partitioner.partition(graph, devices, mode=mode, time_limit_s=limit, **kw)
        except partitioner.PartitionError as exc:
            rows.append((mode, None, time.perf_counter() - began, str(exc).splitlines()[0]))
            continue
        rows.append((mode, plan, time.perf_counter() - began, ""))
    bound = max((p.lower_bound_s for _, p, _, _ in rows if p is not None), default=0.0)
    best = next((p.latency_s for m, p, _, _ in rows if m == "optimal" and p is not None), None)
    print(f"\n{label}: {len(graph.op_indices)} ops, {len(devices)} devices; strongest bound {format_seconds(bound)}")
    print(f"  {'mode':14s} {'latency':>12s} {'parts':>5s} {'time':>8s} {'gap to bound':>12s} {'vs optimal':>10s}")
    for mode, plan, seconds, error in rows:
        if plan is None:
            print(f"  {mode:14s} failed: {error[:80]}")
            continue
        gap = plan.latency_s / bound - 1 if bound > 0 else 0.0
        vs = f"{plan.latency_s / best - 1:+.1%}" if best else "-"
        print(f"  {mode:14s} {format_seconds(plan.latency_s):>12s} {len(plan.partitions):5d} "
              f"{seconds:7.2f}s {gap:12.2%} {vs:>10s}")
        if mode == "optimal":
            print(f"  optimal: {plan.bound_summary()}\n           {plan.provenance.solver}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[20, 50, 150, 500])
    parser.add_argument("--models", nargs="*", default=["mlp", "transformer", "moe", "cnn"])
    parser.add_argument("--limit", type=float, default=10.0, help="the solver's time limit (s)")
    args = parser.parse_args()
    for n in args.sizes:
        graph, devices, kw = setup(n)
        run_case(f"random graph of {n} ops (torch's test latencies, rate 2 B/s)", graph, devices, args.limit, **kw)
    for name in args.models:
        module, inputs = sample_models.build(name)
        graph = partitioner.trace(module, inputs)
        count, memory = sample_models.default_devices(name)
        devices = [Device(f"dev{i}", memory, i) for i in range(count)]
        run_case(f"{name} (default devices, 25 GB/s)", graph, devices, args.limit, transfer_rate_bytes_per_s=25e9)


if __name__ == "__main__":
    main()
