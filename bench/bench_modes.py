"""Benchmark every partition mode against torch's reference partitioner, measured in one run.

Three tables, one per speed target:

1. from 100 op nodes up (random torch.fx graphs and sample models): our time, the reference's
   (run in a child process with a time limit), the ratio (target: 100x), both plans' latencies
   scored by our cost model (plus the reference's own figure), and our plan's gap to its proven
   lower bound (``plan.gap_to_bound``);
2. below 100 op nodes: each search's time (target: under 50 ms);
3. large graphs: every mode at 10,000 op nodes (a random torch.fx graph; target: under 1 s) and
   at 50,000 (a torch-free graph of 400 repeated blocks, ``testing.synthetic.blocks_graph``;
   target: under 2 s).

Times are wall-clock medians (one run on large graphs); the machine's load average is printed
beside them. Usage:

    .venv/bin/python bench/bench_modes.py
    .venv/bin/python bench/bench_modes.py --sizes 100 --limit 30 --small 50 --large --blocks
    .venv/bin/python bench/bench_modes.py --sizes --models gpt2_small:n_layer=4 --modes kl_based
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any

import partitioner
from partitioner import Device
from partitioner.accelerator._base import node_alone_bytes
from partitioner.testing.reference import reference_partition
from partitioner.testing.synthetic import blocks_graph, random_fx_module

MODES = ["size_based", "cost_aware", "kl_based", "aot_based", "size_based+saturate_host"]
SEARCHES = ["largest_first", "cost_aware", "kl_based"]
LARGE_MODES = ["size_based", "largest_first", "cost_aware", "kl_based", "aot_based", "size_based+saturate_host"]


def reference_latencies(graph: partitioner.Graph) -> dict[str, tuple[float, float]]:
    """The latencies of torch's own partitioner tests: memory = total bytes, compute = output
    bytes for nodes with parameters, else 1."""
    return {nd.name: (float(nd.total_bytes), float(nd.output_bytes) if nd.param_bytes else 1.0)
            for nd in graph.nodes if nd.is_op}


def setup(case: int | str, seed: int = 0) -> tuple[partitioner.Graph, list[Device], dict[str, Any]]:
    """A random graph of ``case`` op nodes, the sample model ``name:field=value,...``, or
    ``blocks:B``: a torch-free graph of B blocks of 125 op nodes (no reference: no GraphModule)."""
    if isinstance(case, str) and case.startswith("blocks:"):
        graph = blocks_graph(int(case.split(":")[1]), per_block=125)
    elif isinstance(case, str):
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


def load() -> str:
    return "load average %.1f, %.1f, %.1f on %d cores" % (*os.getloadavg(), os.cpu_count() or 1)


def reference_table(cases: list[int | str], modes: list[str], limit: float) -> int:
    """Table 1: ours against the reference from 100 op nodes up; returns the failures."""
    header = (f"{'mode':<26}{'nodes':>6}{'ours s':>10}{'ref s':>10}{'speedup':>11}"
              f"{'our lat':>10}{'ref lat':>10}{'ref own':>10}{'our gap':>9}  note")
    print(f"\n1. Against torch's reference (target: 100x from 100 op nodes up; {load()})")
    print(header)
    print("-" * len(header))
    timed_out: set[str] = set()
    failures = 0
    for n_ops in cases:
        graph, devices, kw = setup(n_ops)
        if isinstance(n_ops, str):
            timed_out = set()  # a model is not a larger random graph
        for mode in modes:
            name, devs, mkw = mode_args(mode, graph, devices, kw)
            ours_s, plan = time_ours(graph, devs, name, mkw, repeat=3 if len(graph.op_indices) <= 500 else 1)
            assert not plan.violations(graph), plan.violations(graph)
            note = f"{n_ops} " if isinstance(n_ops, str) else ""
            if mode in timed_out:
                ref = None
                note += "reference skipped (timed out on a smaller graph)"
            else:
                ref = run_reference(n_ops, mode, limit)
                if ref is None:
                    timed_out.add(mode)
                    note += f"reference over the {limit:.0f} s limit"
            if ref is None:
                ref_s, speedup = f">{limit:.0f}", limit / ours_s
                ratio = f">{speedup:.0f}x"
                ref_lat = ref_own = "-"
            else:
                seconds, lat, own, valid, error = ref
                ref_s, speedup = f"{seconds:.3f}", seconds / ours_s
                ratio = f"{speedup:.0f}x"
                ref_lat = f"{lat:.0f}" if lat is not None else "-"
                ref_own = f"{own:.0f}" if own is not None else "-"
                if error:
                    note += f"reference failed: {error[:60]}"
                elif not valid:
                    note += "reference plan invalid in our memory model"
                elif lat is not None and plan.latency_s > lat + 1e-9 and mode not in ("size_based", "aot_based"):
                    note += "OUR LATENCY HIGHER"
                    failures += 1
            if speedup < 100 and len(graph.op_indices) >= 100 and mode in ("cost_aware", "kl_based"):
                note += " UNDER 100x"
                failures += ref is not None
            print(f"{mode:<26}{len(graph.op_indices):>6}{ours_s:>10.4f}{ref_s:>10}{ratio:>11}"
                  f"{plan.latency_s:>10.0f}{ref_lat:>10}{ref_own:>10}{plan.gap_to_bound:>9.1%}  {note}",
                  flush=True)
    return failures


def timed_table(title: str, cases: list[int | str], modes: list[str], target_s: float, repeat: int) -> int:
    """Tables 2 and 3: our time per mode against a target in seconds; returns the failures."""
    header = f"{'mode':<26}{'nodes':>7}{'ours s':>10}{'target s':>10}{'latency':>12}{'parts':>6}  note"
    print(f"\n{title} ({load()})")
    print(header)
    print("-" * len(header))
    failures = 0
    for case in cases:
        graph, devices, kw = setup(case)
        for mode in modes:
            name, devs, mkw = mode_args(mode, graph, devices, kw)
            ours_s, plan = time_ours(graph, devs, name, mkw, repeat=repeat)
            assert not plan.violations(graph), plan.violations(graph)
            note = f"{case} " if isinstance(case, str) else ""
            if ours_s >= target_s:
                note += "OVER TARGET"
                failures += 1
            print(f"{mode:<26}{len(graph.op_indices):>7}{ours_s:>10.4f}{target_s:>10.3f}{plan.latency_s:>12.4g}"
                  f"{len(plan.partitions):>6}  {note}", flush=True)
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 150, 500],
                        help="random graphs (op nodes) timed against the reference")
    parser.add_argument("--models", nargs="*", default=["gpt2_small:n_layer=2", "moe"],
                        help="sample models as name:field=value,... (the reference runs on them too)")
    parser.add_argument("--modes", nargs="+", default=MODES)
    parser.add_argument("--limit", type=float, default=60.0, help="seconds the reference may take")
    parser.add_argument("--small", type=int, nargs="*", default=[30, 50, 75, 99],
                        help="random graphs below 100 op nodes (each search under 50 ms)")
    parser.add_argument("--large", type=int, nargs="*", default=[10000],
                        help="random graphs timed against 1 s")
    parser.add_argument("--blocks", type=int, nargs="*", default=[400],
                        help="block graphs (125 op nodes a block) timed against 2 s")
    args = parser.parse_args(argv)
    failures = reference_table([*args.sizes, *args.models], args.modes, args.limit)
    failures += timed_table("2. Searches below 100 op nodes (target: under 50 ms)", list(args.small),
                            SEARCHES, 0.05, repeat=5)
    failures += timed_table("3. Every mode at 10,000 op nodes (target: under 1 s)", list(args.large),
                            LARGE_MODES, 1.0, repeat=1)
    failures += timed_table("   and at 50,000 op nodes (target: under 2 s)", [f"blocks:{b}" for b in args.blocks],
                            LARGE_MODES, 2.0, repeat=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
