"""Time tracing: a model of repeated blocks traced once a block against its whole trace, and the
whole trace's time against graph size.

First table (issue 57's target: every hf: preset, Llama 3 405B included, in under 10 s): each of
``--repeated`` (Llama 3 8B, 70B and 3.1 405B, bf16 on meta weights, 1 x 32 tokens) built, then
traced from a few layers and repeated to its depth (``partitioner.tracing.repeated``, what the app
and the command line do for hf: models). The reference, measured in the same run on the same
built model: the whole trace (``partitioner.trace``), for the models in ``--whole`` (8B by default:
the 70B and 405B take half a minute each here), with the ratio and whether the two graphs are node
for node the same. CPU time beside wall time: on a shared machine the wall time also counts the
waits for a core.

Second table: two models grown to about 1,000, 5,000, 10,000 and 50,000 nodes: the ``mlp`` sample
(a chain of Linear + ReLU, width 16), traced by ``torch.fx.symbolic_trace``, and ``hf:llama``
(Llama-3-8B's layer, bf16 on meta weights, 1 x 32 tokens) with ``num_hidden_layers`` raised,
traced whole by ``torch.export``. Each row prints the trace's wall and CPU time, the CPU time per
node and that figure against the model's smallest row (1.0 = linear). The reference, measured in
the same run on the same traced graph: annotating it the plain way (every node dispatched on fake
tensors, as tracing did before repeated ops were priced once), up to ``--reference-max`` nodes.
The target: 50,000 nodes in under 30 s. A 50,000-node hf:llama (about 720 layers) takes minutes:
``--hf-sizes`` picks its rows (``--sizes '' --hf-sizes ''`` skips the table).

    python bench/bench_trace.py [--repeated hf:llama-3-8b,hf:llama-3-70b,hf:llama-3.1-405b]
                                [--whole hf:llama-3-8b] [--sizes 1000,5000,10000,50000]
                                [--hf-sizes 1000,5000,10000] [--reference-max 5000]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from typing import Any, Callable

import torch

import partitioner
import sample_models
from partitioner.tracing.annotate import annotate
from partitioner.tracing.expand import first_difference
from partitioner.tracing.repeated import trace_repeated
from sample_models import _loading

HF_SPEC = "hf:llama-3-8b"
HF_NODES_PER_LAYER = 69  # nodes of one Llama decoder layer as exported at 1 x 32 tokens


def _mlp(nodes: int) -> tuple[str, Callable[[], Any]]:
    layers = max(1, (nodes - 1) // 2)  # n Linear + (n - 1) ReLU + input + output
    model, inputs = sample_models.build("mlp", n_layer=layers, in_features=16, hidden=16, out_features=16, batch_size=4)
    return f"mlp n_layer={layers}", lambda: partitioner.trace(model, inputs)


def _hf(nodes: int) -> tuple[str, Callable[[], Any]]:
    layers = max(1, round(nodes / HF_NODES_PER_LAYER))
    overrides = {"num_hidden_layers": layers, "dtype": "bf16"}
    module, inputs, _ = _loading.load(HF_SPEC, overrides)
    return (f"{HF_SPEC} layers={layers}", lambda: partitioner.trace(module, inputs, name=HF_SPEC))  # whole


def _row(
    kind: str,
    nodes_wanted: int,
    build: Callable[[int], tuple[str, Callable[[], Any]]],
    reference_max: int,
    first_per_node: dict[str, float],
) -> None:
    label, run = build(nodes_wanted)
    t0, c0 = time.perf_counter(), time.process_time()
    graph = run()
    trace_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    n = len(graph)
    per_node = cpu_s / n  # CPU: on a shared machine the wall time also counts waits for a core
    base = first_per_node.setdefault(kind, per_node)
    reference = ""
    if n <= reference_max:
        gm, inputs = graph.graph_module, graph.example_inputs
        c0 = time.process_time()
        memo = annotate(gm, inputs)
        memo_s = time.process_time() - c0
        c0 = time.process_time()
        plain = annotate(gm, inputs, memo=False)
        plain_s = time.process_time() - c0
        same = "same" if plain == memo else "DIFFERENT"
        reference = f"{plain_s:8.2f} s {memo_s:8.2f} s {plain_s / memo_s:6.1f}x  {same}"
    print(
        f"{label:32} {n:>7,} {trace_s:9.2f} s {cpu_s:9.2f} s {per_node * 1e6:8.0f} us {per_node / base:7.2f}  "
        f"{reference}",
        flush=True,
    )


def _timed(run: Callable[[], Any]) -> tuple[Any, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    value = run()
    return value, time.perf_counter() - t0, time.process_time() - c0


def _repeated_rows(specs: list[str], whole: set[str]) -> None:
    """The first table: build, trace repeated, and (for ``whole``) the whole trace of each spec."""
    print(
        f"{'model':20} {'layers':>6} {'nodes':>6} {'build wall/CPU':>15} {'repeated wall/CPU':>18} "
        f"{'whole wall/CPU':>16} {'whole/repeated CPU':>18}  graphs"
    )
    for spec in specs:
        (module, inputs, kwargs), build_s, build_cpu = _timed(lambda: _loading.load(spec, {"dtype": "bf16"}))
        (graph, outcome), rep_s, rep_cpu = _timed(
            lambda: trace_repeated(module, inputs, name=spec, example_kwargs=kwargs or None)
        )
        how = f"{outcome.traced_layers} of {outcome.layers} layers traced" if outcome.repeated else outcome.reason
        whole_cols, ratio, same = f"{'-':>16}", f"{'-':>18}", how
        if spec in whole:
            full, full_s, full_cpu = _timed(
                lambda: partitioner.trace(module, inputs, name=spec, example_kwargs=kwargs or None)
            )
            whole_cols = f"{full_s:6.1f}/{full_cpu:5.1f} s"
            ratio = f"{full_cpu / rep_cpu:17.1f}x"
            same = f"{'same' if not first_difference(graph, full) else 'DIFFERENT'} ({how})"
        print(
            f"{spec:20} {outcome.layers:6} {len(graph):6,} {build_s:6.1f}/{build_cpu:5.1f} s "
            f"{rep_s:8.1f}/{rep_cpu:5.1f} s {whole_cols} {ratio}  {same}",
            flush=True,
        )
        print(
            f"{'':20} build + repeated trace: {build_s + rep_s:.1f} s wall, {build_cpu + rep_cpu:.1f} s CPU", flush=True
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeated",
        default="hf:llama-3-8b,hf:llama-3-70b,hf:llama-3.1-405b",
        help="hf: presets traced repeated ('' for none)",
    )
    parser.add_argument("--whole", default="hf:llama-3-8b", help="of those, the ones also traced whole (the reference)")
    parser.add_argument("--sizes", default="1000,5000,10000,50000", help="mlp node counts")
    parser.add_argument("--hf-sizes", default="1000,5000,10000", help="hf:llama node counts ('' for none)")
    parser.add_argument(
        "--reference-max", type=int, default=5000, help="time the plain annotation on graphs up to this many nodes"
    )
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    hf_sizes = [int(s) for s in args.hf_sizes.split(",") if s]

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (at the start)")
    repeated = [s for s in args.repeated.split(",") if s]
    if repeated:
        tiny = {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
        module, inputs, _ = _loading.load("hf:llama", tiny)
        trace_repeated(module, inputs)  # transformers' imports and export's first call, outside the table
        _repeated_rows(repeated, {s for s in args.whole.split(",") if s})
        print(f"load average {os.getloadavg()[0]:.1f}; target: every hf: preset, 405B included, in under 10 s")
        print()
    if not sizes and not hf_sizes:
        return
    print(
        f"{'model':32} {'nodes':>7} {'trace':>11} {'its CPU':>11} {'CPU/node':>11} {'vs first':>7}  "
        f"{'plain annotation CPU':>10} {'memo CPU':>10} {'speedup':>7}  annotations"
    )
    _mlp(10)[1]()  # imports and torch's first-call costs, outside the table
    first: dict[str, float] = {}
    for nodes in sizes:
        _row("mlp", nodes, _mlp, args.reference_max, first)
    if hf_sizes:
        _hf(HF_NODES_PER_LAYER)[1]()  # transformers' imports and export's first call, likewise
    for nodes in hf_sizes:
        _row("hf", nodes, _hf, args.reference_max, first)
    print(f"load average {os.getloadavg()[0]:.1f} (at the end)")
    print("target     50,000 nodes in under 30 s; the per-node time constant (vs first near 1)")


if __name__ == "__main__":
    main()
