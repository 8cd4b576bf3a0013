"""How far each mode's plan is from the best possible: every heuristic against the ``optimal``
mode (CP-SAT with a time limit) and the strongest lower bound proven in the same run.

For random graphs of several sizes (torch's test latencies, four devices that need three) and
for the sample models on their default devices, it prints each mode's latency, time, its gap to
the bound, and the optimal mode's status. Usage:

    .venv/bin/python bench/bench_optimal.py                    # sizes 20 50 150 500, limit 10 s
    .venv/bin/python bench/bench_optimal.py --sizes 50 --limit 5 --models moe
    .venv/bin/python bench/bench_optimal.py --sizes --models --proofs 20    # proofs on small graphs

``--proofs K`` prints the proof table: K random graphs for each size of 4 to 12 ops on 2 and 3
devices (memory 1.0 to 1.8 times an even share, rate 1, 16 B/s or free), how many the optimal
mode proves optimal within the default 10 s limit, how many have no plan (proven too), and the
median and slowest wall time of the mode (worker start included), with the machine's load.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time

from bench_modes import setup

import partitioner
import sample_models
from partitioner import Device
from partitioner.units import format_seconds

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
        print(
            f"  {mode:14s} {format_seconds(plan.latency_s):>12s} {len(plan.partitions):5d} "
            f"{seconds:7.2f}s {gap:12.2%} {vs:>10s}"
        )
        if mode == "optimal":
            print(f"  optimal: {plan.bound_summary()}\n           {plan.provenance.solver}")


def proof_case(seed: int, n: int, count: int) -> tuple[partitioner.Graph, list[Device], dict]:
    """A random graph of ``n`` ops (inputs among the six before), as the optimal mode's tests draw them."""
    from partitioner.accelerator._base import node_alone_bytes
    from partitioner.testing.synthetic import synthetic_graph

    rng = random.Random(seed)
    edges = sorted(
        {(a, b) for b in range(1, n) for a in [rng.randint(max(0, b - 6), b - 1) for _ in range(rng.randint(0, 3))]}
    )
    graph = synthetic_graph(edges, [rng.randint(1, 64) for _ in range(n)])
    latency = {name: (rng.uniform(0, 10), rng.uniform(0, 10)) for name in graph.op_names}
    need = max(node_alone_bytes(graph, v) for v in graph.op_indices)
    memory = max(need, math.ceil(graph.total_size_bytes * rng.uniform(1.0, 1.8) / count))
    kw = dict(node_latency=latency, transfer_rate_bytes_per_s=rng.choice([None, 1.0, 16.0]), force_partition=True)
    return graph, [Device(f"d{i}", memory, i) for i in range(count)], kw


def proof_table(per_cell: int) -> None:
    print(
        f"\nProofs on small random graphs, default limit 10 s (load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores)"
    )
    print(f"  {'ops':>3s} {'devices':>7s} {'cases':>5s} {'proven':>6s} {'no plan':>7s} {'median s':>8s} {'max s':>6s}")
    for count in (2, 3):
        for n in range(4, 13):
            times, proven, none = [], 0, 0
            for seed in range(per_cell):
                graph, devices, kw = proof_case(1000 * n + seed, n, count)
                began = time.perf_counter()
                try:
                    plan = partitioner.partition(graph, devices, mode="optimal", **kw)
                    proven += plan.proven_optimal
                except partitioner.InfeasibleError:
                    none += 1
                times.append(time.perf_counter() - began)
            print(
                f"  {n:3d} {count:7d} {per_cell:5d} {proven:6d} {none:7d} {statistics.median(times):8.2f} "
                f"{max(times):6.2f}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[20, 50, 150, 500])
    parser.add_argument("--models", nargs="*", default=["mlp", "transformer", "moe", "cnn"])
    parser.add_argument("--limit", type=float, default=10.0, help="the solver's time limit (s)")
    parser.add_argument("--proofs", type=int, default=0, help="random graphs per size in the proof table")
    args = parser.parse_args()
    if args.proofs:
        proof_table(args.proofs)
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
