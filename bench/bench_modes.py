"""Benchmark every partition mode against torch's reference partitioner, measured in one run.

For each graph size (random torch.fx graphs) and sample model it prints our time, the
reference's time (run in a child process with a time limit), the ratio, both plans' latencies
scored by our cost model (plus the reference's own figure), and our plan's gap to its proven
lower bound (``plan.gap_to_bound``). Usage:

    .venv/bin/python bench/bench_modes.py                 # sizes 50 150 500 2000 10000, gpt2_small:n_layer=2, moe
    .venv/bin/python bench/bench_modes.py --sizes 100 --limit 30
    .venv/bin/python bench/bench_modes.py --sizes --models gpt2_small:n_layer=4 --modes kl_based
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from typing import Any

import partitioner
from partitioner import Device
from partitioner.accelerator._base import node_alone_bytes
from partitioner.testing.reference import reference_partition
from partitioner.testing.synthetic import random_fx_module

MODES = ["size_based", "cost_aware", "kl_based", "aot_based", "size_based+saturate_host"]


def reference_latencies(graph: partitioner.Graph) -> dict[str, tuple[float, float]]:
    """The latencies of torch's own partitioner tests: memory = total bytes, compute = output
    bytes for nodes with parameters, else 1."""
    return {nd.name: (float(nd.total_bytes), float(nd.output_bytes) if nd.param_bytes else 1.0)
            for nd in graph.nodes if nd.is_op}


def setup(case: int | str, seed: int = 0) -> tuple[partitioner.Graph, list[Device], dict[str, Any]]:
    """A random graph of ``case`` op nodes, or the sample model ``name:field=value,...``."""
    if isinstance(case, str):
        import sample_models

        name, _, fields = case.partition(":")
        model, inputs = sample_models.build(name, **sample_models.parse_overrides(name, [f for f in fields.split(",") if f]))
        graph = partitioner.trace(model, inputs)
    else:
        gm, inputs = random_fx_module(seed, case, width=8)
        graph = partitioner.trace(gm, inputs)
    # The model needs three of the four devices (or, on a model with one huge layer, room for it).
    largest = max(node_alone_bytes(graph, v) for v in graph.op_indices)
    memory = max(int(graph.total_size_bytes * 0.35), largest)
    devices = [Device(f"dev_{i}", memory, i) for i in range(4)]
    kw = dict(transfer_rate_bytes_per_s=2.0, node_latency=reference_latencies(graph))
    return graph, devices, kw


def mode_args(mode: str, graph, devices, kw) -> tuple[str, list[Device], dict[str, Any]]:
    if mode == "size_based+saturate_host":
        # Twice the devices, so the plan has idle devices to be copied onto.
        extra = [Device(f"dev_{i}", devices[0].memory_bytes, i) for i in range(len(devices), 2 * len(devices))]
        return "size_based", devices + extra, {**kw, "saturate_host": True}
    if mode == "aot_based":
        base = partitioner.partition(graph, devices, mode="size_based", **kw)
        return "aot_based", devices, {**kw, "node_to_partition": base.node_to_partition(),
                                      "partition_to_devices": base.partition_to_devices()}
    return mode, devices, kw


def _reference_child(n_ops: int | str, mode: str, queue: mp.Queue) -> None:
    import logging

    logging.disable(logging.CRITICAL)
    import contextlib
    import io

    graph, devices, kw = setup(n_ops)
    name, devices, kw = mode_args(mode, graph, devices, kw)
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the reference's saturate_host prints
            result = reference_partition(graph, devices, name, **kw)
        seconds = time.perf_counter() - start
        valid = not result.plan.violations(graph)
        queue.put((seconds, result.plan.latency_s, result.reported_latency_s, valid, None))
    except Exception as exc:  # report, don't crash the benchmark
        queue.put((time.perf_counter() - start, None, None, False, f"{type(exc).__name__}: {exc}"))


def run_reference(n_ops: int | str, mode: str, limit: float) -> tuple[Any, ...] | None:
    ctx = mp.get_context("fork")
    queue: mp.Queue = ctx.Queue()
    child = ctx.Process(target=_reference_child, args=(n_ops, mode, queue))
    child.start()
    child.join(limit)
    if child.is_alive():
        child.kill()
        child.join()
        return None
    return queue.get() if not queue.empty() else None


def time_ours(graph, devices, mode, kw, repeat: int) -> tuple[float, partitioner.Plan]:
    times, plan = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        plan = partitioner.partition(graph, devices, mode=mode, **kw)
        times.append(time.perf_counter() - start)
    assert plan is not None
    return statistics.median(times), plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[50, 150, 500, 2000, 10000])
    parser.add_argument("--models", nargs="*", default=["gpt2_small:n_layer=2", "moe"],
                        help="sample models as name:field=value,... (the reference runs on them too)")
    parser.add_argument("--modes", nargs="+", default=MODES)
    parser.add_argument("--limit", type=float, default=60.0, help="seconds the reference may take")
    args = parser.parse_args(argv)
    header = (f"{'mode':<26}{'nodes':>6}{'ours s':>10}{'ref s':>10}{'speedup':>11}"
              f"{'our lat':>10}{'ref lat':>10}{'ref own':>10}{'our gap':>9}  note")
    print(header)
    print("-" * len(header))
    timed_out: set[str] = set()
    failures = 0
    cases: list[int | str] = [*args.sizes, *args.models]
    for n_ops in cases:
        graph, devices, kw = setup(n_ops)
        if isinstance(n_ops, str):
            timed_out = set()  # a model is not a larger random graph
        for mode in args.modes:
            name, devs, mkw = mode_args(mode, graph, devices, kw)
            ours_s, plan = time_ours(graph, devs, name, mkw, repeat=3 if len(graph.op_indices) <= 500 else 1)
            assert not plan.violations(graph), plan.violations(graph)
            note = f"{n_ops} " if isinstance(n_ops, str) else ""
            if mode in timed_out:
                ref = None
                note += "reference skipped (timed out on a smaller graph)"
            else:
                ref = run_reference(n_ops, mode, args.limit)
                if ref is None:
                    timed_out.add(mode)
                    note += f"reference over the {args.limit:.0f} s limit"
            if ref is None:
                ref_s = f">{args.limit:.0f}"
                ratio = f">{args.limit / ours_s:.0f}x"
                ref_lat = ref_own = "-"
            else:
                seconds, lat, own, valid, error = ref
                ref_s = f"{seconds:.3f}"
                ratio = f"{seconds / ours_s:.0f}x"
                ref_lat = f"{lat:.0f}" if lat is not None else "-"
                ref_own = f"{own:.0f}" if own is not None else "-"
                if error:
                    note += f"reference failed: {error[:60]}"
                elif not valid:
                    note += "reference plan invalid in our memory model"
                elif lat is not None and plan.latency_s > lat + 1e-9 and mode not in ("size_based", "aot_based"):
                    note += "OUR LATENCY HIGHER"
                    failures += 1
            target = ""
            if len(graph.op_indices) >= 2000 and ours_s >= 1.0:
                target = " OVER 1 s TARGET"
                failures += 1
            print(f"{mode:<26}{len(graph.op_indices):>6}{ours_s:>10.4f}{ref_s:>10}{ratio:>11}"
                  f"{plan.latency_s:>10.0f}{ref_lat:>10}{ref_own:>10}{plan.gap_to_bound:>9.1%}  {note}{target}",
                  flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
