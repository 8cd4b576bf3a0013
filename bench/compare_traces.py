"""Compare what the tracer, the repeated-block expansion, the runtime walk and the pipeline's stage
modules give against a previous implementation: each must give, case for case, the same graphs
(fingerprint, and every node's name, op, target, edges, module path, shape, dtype, bytes,
parameters and FLOPs), the same errors and the same outputs.

The previous implementation is a commit of this repository (``--before``), unpacked with
``git archive`` into a temporary folder (:func:`bench_search.unpack_commit`). Each tree runs every
case in a fresh process of its own, seeded alike; a case's result is a digest: a graph's
``fingerprint()`` and a hash of all its node fields, an error's type and message, a run's outputs
hashed with its deterministic figures (received bytes, ranks, equality checks; never times).

Cases: every sample model traced (``sample_models``), hf: presets at real size on meta weights
(traced by repeating a block, as the CLI does, and GPT-2 traced whole), small stacks of blocks that
repeat or fall back (with the reason), the tracer's refusals, a pipeline plan's stage modules
chained, and with ``--runs`` real runs on processes: a fork/join plan on three ranks (the walk), a
replicated plan on four, and a 1F1B training pipeline on two.

    .venv/bin/python bench/compare_traces.py --before 2a8376e
    .venv/bin/python bench/compare_traces.py --before 2a8376e --runs
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

BEFORE = "2a8376e4cd4aebd23c75e20b5298e43ef9ab52cd"  # the tracer and the runtime walk before their long functions were split into steps
HF_REPEATED = ("hf:gpt2", "hf:llama-3-8b", "hf:mixtral-8x7b")
HF_WHOLE = ("hf:gpt2",)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _graph_digest(graph: Any) -> str:
    """The fingerprint, the node count, the FLOPs and bytes, and a hash of every node field and the
    graph's records (tied and repeated weights, unpriced ops, parameters, model info)."""
    fields = [
        (n.name, n.op, n.target, n.inputs, n.module_path, n.shape, str(n.dtype))
        + (n.output_bytes, n.param_bytes, n.flops, n.is_embedding)
        for n in graph.nodes
    ]
    records = (
        graph.tied_parameters,
        sorted(graph.repeated_weights.items()),
        graph.unpriced_ops,
        graph.named_parameters,
        repr(graph.model_info),
    )
    flops = sum(n.flops for n in graph.nodes)
    size = sum(n.output_bytes + n.param_bytes for n in graph.nodes)
    return (
        f"fp {graph.fingerprint()} nodes {len(graph.nodes)} flops {flops:.4g} bytes {size:.4g} "
        f"fields {_sha(repr(fields))} records {_sha(repr(records))}"
    )


def _tensors_digest(value: Any) -> str:
    import torch
    from torch.utils._pytree import tree_flatten

    leaves = tree_flatten(value)[0]
    h = hashlib.sha256()
    for t in leaves:
        if isinstance(t, torch.Tensor):
            h.update(f"{tuple(t.shape)}{t.dtype}".encode())
            h.update(t.detach().float().contiguous().numpy().tobytes())
        else:
            h.update(repr(t).encode())
    return h.hexdigest()[:16]


def _seeded(build: Callable[[], Any]) -> Any:
    import torch

    torch.manual_seed(0)
    return build()


@functools.cache
def _block_class() -> Any:
    """A residual block of two linears (a stack of these repeats under symbolic_trace)."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.fc, self.out = nn.Linear(width, width), nn.Linear(width, width)

        def forward(self, x: Any) -> Any:
            return x + self.out(self.fc(x).relu())

    return Block


def _chain(depth: int, reads_first: bool = False) -> Any:
    from torch import nn

    class Chain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(_block_class()(8) for _ in range(depth))

        def forward(self, x: Any) -> Any:
            first = None
            for block in self.blocks:
                x = block(x if first is None or not reads_first else x + first)
                first = x if first is None else first
            return x

    return Chain()


def _tracing_cases() -> dict[str, Callable[[], str]]:
    import torch

    import sample_models
    from partitioner import trace
    from partitioner.tracing.repeated import trace_repeated

    cases: dict[str, Callable[[], str]] = {}
    for name in sample_models.names():

        def sample(name: str = name) -> str:
            module, inputs, kwargs = _seeded(lambda: sample_models.load(name))
            return _graph_digest(trace(module, inputs, name=name, example_kwargs=kwargs or None))

        cases[f"trace {name}"] = sample
    for spec in HF_REPEATED:

        def repeated(spec: str = spec) -> str:
            overrides = sample_models.parse_overrides(spec, ["dtype=bf16"])
            loaded = sample_models.load(spec, overrides)
            graph, outcome = trace_repeated(loaded[0], loaded[1], name=spec, example_kwargs=loaded[2] or None)
            return f"{_graph_digest(graph)} {outcome}"

        cases[f"repeated {spec}"] = repeated
    for spec in HF_WHOLE:

        def whole(spec: str = spec) -> str:
            module, inputs, kwargs = sample_models.load(spec, sample_models.parse_overrides(spec, ["dtype=bf16"]))
            return _graph_digest(trace(module, inputs, name=spec, example_kwargs=kwargs or None))

        cases[f"whole {spec}"] = whole
    for depth, reads_first, shallow in ((9, False, False), (8, False, False), (6, True, True), (12, False, True)):

        def chain(depth: int = depth, reads_first: bool = reads_first, shallow: bool = shallow) -> str:
            model = _seeded(lambda: _chain(depth, reads_first))
            graph, outcome = trace_repeated(model, (torch.randn(2, 8),), even_if_shallow=shallow)
            return f"{_graph_digest(graph)} {outcome}"

        cases[f"chain {depth} reads_first={reads_first} even_if_shallow={shallow}"] = chain
    for spec, layers in (("hf:llama-3-8b", 6), ("hf:t5-base", 6), ("hf:mixtral-8x7b", 5)):

        def narrow(spec: str = spec, layers: int = layers) -> str:
            from sample_models import _hf

            small = {
                "llama": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2),
                "mixtral": dict(
                    hidden_size=64,
                    intermediate_size=128,
                    num_attention_heads=4,
                    num_key_value_heads=2,
                    num_local_experts=4,
                ),
                "t5": dict(d_model=64, d_ff=128, num_heads=4, d_kv=16),
            }[_hf.PRESETS[spec[3:]][0]]
            overrides = {**small, "vocab_size": 300, "dtype": "bf16", **{f: layers for f in _hf.layer_fields(spec[3:])}}
            loaded = sample_models.load(spec, overrides)
            graph, outcome = trace_repeated(
                loaded[0], loaded[1], name=spec, example_kwargs=loaded[2] or None, even_if_shallow=True
            )
            return f"{_graph_digest(graph)} {outcome}"

        cases[f"narrow {spec} {layers} layers"] = narrow
    return cases


def _error_cases() -> dict[str, Callable[[], str]]:
    import torch

    from partitioner import trace

    def refused(call: Callable[[], Any]) -> str:
        try:
            call()
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return "no error"

    linear = torch.nn.Linear(4, 4)
    return {
        "error dict inputs": lambda: refused(lambda: trace(linear, {"x": torch.randn(2, 4)})),  # type: ignore[arg-type]
        "error input count": lambda: refused(lambda: trace(linear, (torch.randn(2, 4), torch.randn(2, 4)))),
        "error shapes": lambda: refused(lambda: trace(linear, (torch.randn(2, 5),))),
        "error nothing to partition": lambda: refused(lambda: trace(torch.nn.Identity(), (torch.randn(2, 4),))),
    }


def _fork_join() -> tuple[Any, Any, Any]:
    import torch

    import partitioner

    class ForkJoin(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.c, self.d = (torch.nn.Linear(16, 16) for _ in range(4))

        def forward(self, x: Any) -> Any:
            h = torch.relu(self.a(x))
            left, right = self.b(h), torch.tanh(self.c(h))
            return self.d(left + right), right.sum()

    model, x = _seeded(lambda: (ForkJoin().eval(), torch.randn(4, 16)))
    return model, x, partitioner.trace(model, (x,))


def _run_digest(result: Any) -> str:
    parts = [(p.id, p.ranks, p.received_bytes, p.compute_s > 0, p.predicted_s) for p in result.partitions]
    return (
        f"outputs {_tensors_digest(result.outputs)} equal {result.outputs_equal} world {result.world_size} "
        f"partitions {_sha(repr(parts))} predicted {result.predicted_latency_s:.9g}"
    )


def _run_cases(runs: bool) -> dict[str, Callable[[], str]]:
    import torch

    import partitioner
    import sample_models
    from partitioner import Device, pipeline
    from partitioner.pipeline.stage_modules import build_stage_modules
    from partitioner.runtime.execute import prepare

    big = [Device(f"d{i}", 1 << 30, i) for i in range(4)]

    def fork_join_plan() -> tuple[Any, Any, Any]:
        _, x, graph = _fork_join()
        where = {"a": 0, "relu": 0, "b": 1, "c": 2, "tanh": 2}
        plan = partitioner.evaluate_plan(
            graph,
            [Device(f"d{i}", 10**6, i) for i in range(3)],
            {n: where.get(n, 3) for n in graph.op_names},
            {0: [0], 1: [1], 2: [2], 3: [0]},
        )
        return plan, graph, x

    def prepared() -> str:
        plan, graph, x = fork_join_plan()
        p = prepare(plan, graph, (x,))
        shapes = sorted((k, repr(v)) for k, v in p.shapes.items())
        return f"owners {_sha(repr(sorted(p.owners.items())))} shapes {_sha(repr(shapes))} ref {_tensors_digest(p.reference)}"

    def stages() -> str:
        module, inputs, _ = _seeded(lambda: sample_models.load("transformer", {"batch_size": 4}))
        graph = partitioner.trace(module, inputs)
        pp = pipeline.plan(graph, big, stages=4, microbatches=2, schedule="gpipe")
        modules = build_stage_modules(graph, pp.stages, graph.example_inputs)
        value, codes = graph.example_inputs, []
        with torch.no_grad():
            for stage in modules:
                codes.append(stage.code)
                out = stage(*value)
                value = out if isinstance(out, tuple) else (out,)
        names = [sorted(n for n, _ in m.named_parameters()) for m in modules]
        return f"code {_sha(repr(codes))} params {_sha(repr(names))} outputs {_tensors_digest(value)}"

    cases: dict[str, Callable[[], str]] = {"prepare fork/join": prepared, "stage modules transformer": stages}
    if not runs:
        return cases

    def fork_join_run() -> str:
        plan, graph, x = fork_join_plan()
        return _run_digest(partitioner.run(plan, graph, (x,), backend="gloo", timeout_s=300, repeats=1))

    def replicated_run() -> str:
        _, x, graph = _fork_join()
        from partitioner.accelerator._base import node_alone_bytes

        need = max(node_alone_bytes(graph, v) for v in graph.op_indices)
        devices = [Device(f"d{i}", max(need, graph.total_size_bytes * 3 // 4), i) for i in range(4)]
        plan = partitioner.partition(graph, devices, saturate_host=True, force_partition=True)
        return _run_digest(partitioner.run(plan, graph, (x,), backend="gloo", timeout_s=300, repeats=1))

    def pipeline_run() -> str:
        module, inputs, _ = _seeded(lambda: sample_models.load("transformer", {"batch_size": 4}))
        graph = partitioner.trace(module, inputs)
        pp = pipeline.plan(graph, big, stages=2, microbatches=4, schedule="1f1b", training="sgd")
        r = pipeline.run(pp, graph, graph.example_inputs, timeout_s=300, repeats=1)
        return (
            f"outputs_equal {r.outputs_equal} gradients_equal {r.gradients_equal} loss {r.loss!r} "
            f"world {r.world_size} stages {len(r.stage_forward_s)} simulated {r.simulated_step_s:.9g}"
        )

    cases.update({"run fork/join 3 ranks": fork_join_run, "run replicated": replicated_run})
    cases["pipeline 1f1b training 2 ranks"] = pipeline_run
    return cases


def _child(root: str, out: str, runs: bool) -> None:
    """In a fresh process: every case with the code under ``root``; write each digest."""
    sys.path.insert(0, root)
    import partitioner

    if not (partitioner.__file__ or "").startswith(root):
        raise SystemExit(f"partitioner came from {partitioner.__file__}, not from {root}")
    results: dict[str, str] = {}
    for name, case in {**_tracing_cases(), **_error_cases(), **_run_cases(runs)}.items():
        started = time.perf_counter()
        try:
            results[name] = case()
        except Exception as exc:
            results[name] = f"raised {type(exc).__name__}: {exc}"
        print(f"  {Path(root).name}: {name} ({time.perf_counter() - started:.1f} s)", flush=True)
    Path(out).write_text(json.dumps(results, indent=1))


def _run(root: Path, folder: Path, runs: bool) -> dict[str, str]:
    out = folder / f"{root.name}.json"
    env = {**os.environ, "PYTHONHASHSEED": "0", "PARTITION_EXPLORER_CACHE": str(folder / "cache")}
    command = [sys.executable, __file__, "--child", str(root), str(out)] + (["--runs"] if runs else [])
    subprocess.run(command, check=True, env=env, cwd=root)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=BEFORE, help=f"the commit to compare with (default {BEFORE[:10]})")
    parser.add_argument("--runs", action="store_true", help="also run plans on processes (a minute or more)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child, args.runs)
        return
    from bench_search import unpack_commit

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        before = unpack_commit(args.before, folder)
        print(f"load average {os.getloadavg()[0]:.1f}; before = {args.before[:10]}", flush=True)
        old = _run(before, folder, args.runs)
        new = _run(ROOT, folder, args.runs)
    same = 0
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name, "(missing)"), new.get(name, "(missing)")
        if a == b:
            same += 1
            print(f"same       {name}: {b}")
        else:
            print(f"DIFFERENT  {name}:\n   before {a}\n   after  {b}")
    total = len(set(old) | set(new))
    print(f"{same} of {total} cases identical")
    if same != total:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
