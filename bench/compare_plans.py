"""Compare the plans of two versions of the partitioner, in one run: every mode over the sample
models and synthetic graphs, on several device sets and both cost models, each plan reduced to a
hash of its JSON (``plan.to_json()``), or the error's type and message when a mode refuses.

The previous version is a commit of this repository (``--before``), unpacked with ``git archive``
into a temporary folder (``bench_search.unpack_commit``); each version runs in its own process,
with ``PYTHONHASHSEED=0``. Besides the plan, each case records the ``progress=`` reports and, for
the ``optimal`` mode, the inputs of every solver call and the CP-SAT models they build (hashes of
the pickled inputs and of the model protos, each model built again in the process without
solving). Seconds measured while solving (``for 1.2 s``, ``in 0.3 s``) are masked in the solver's
note and the progress reports: they differ from run to run.

An ``optimal`` plan depends on CP-SAT's parallel search when it stops at its time limit; such
cases (not proven optimal in either version) are listed apart, compared by their solver inputs
and models only. NOTE: [Equally fast optimal plans] Where both versions prove optimality, CP-SAT's
workers may still return a different one of several equally fast plans from run to run (seen with
one version alone: the torch cost model, 10 ops on three devices, two plans of the same latency
and bound); those cases are compared by latency, bound, proof and solver note, with the solver
inputs and models, and the count of identical plans among them is printed. The branch and
bound's own relaxation has a time limit too (a tenth of its share): on a loaded machine it may stop
before its bound and the search then proves optimality by visiting every plan, with another note
and bound, in either version; run again when the load is lower.

    .venv/bin/python bench/compare_plans.py --before 2a8376e
    .venv/bin/python bench/compare_plans.py --before HEAD~1 --skip-optimal
    COMPARE_ONLY_OPTIMAL=1 .venv/bin/python bench/compare_plans.py --before HEAD~1  # optimal alone
    .venv/bin/python bench/compare_plans.py --before 2a8376e --after /tmp/copy  # a copy of the tree
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_search import unpack_commit  # noqa: E402

MODES = ("size_based", "largest_first", "sparse_nn", "cost_aware", "kl_based", "aot_based")
SAMPLES = {  # sample model -> overrides that keep it small
    "mlp": {"n_layer": 4},
    "cnn": {},
    "transformer": {"n_layer": 2},
    "dlrm": {},
    "unet": {},
    "moe": {},
}
SHARES = ((0.6, 0.6), (0.4, 0.4, 0.4), (0.3, 0.5, 0.7), (0.25, 0.25, 0.3, 0.3), (0.1, 0.1), (1.5,), (1.2, 1.2))
OPTIMAL_SHARES = ((0.9, 0.9), (0.7, 0.7, 0.7))
_SECONDS = re.compile(r"\b(for|in) \d+(\.\d+)? s\b")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _graphs() -> dict[str, Any]:
    """name -> Graph: the sample models traced, then seeded random DAGs and block graphs."""
    import random

    import partitioner
    import sample_models
    from partitioner.testing.synthetic import blocks_graph, random_fx_module, synthetic_graph

    graphs: dict[str, Any] = {}
    for name, overrides in SAMPLES.items():
        model, inputs = sample_models.build(name, **overrides)
        graphs[name] = partitioner.trace(model, inputs)
    for seed in range(2):
        module, inputs = random_fx_module(seed, 30 + 10 * seed)
        graphs[f"random_fx{seed}"] = partitioner.trace(module, inputs)
    for seed in range(4):
        rng = random.Random(seed)
        n = 20 + 15 * seed
        edges = sorted({(rng.randrange(b), b) for b in range(1, n) for _ in range(rng.randint(1, 3))})
        graphs[f"dag{seed}"] = synthetic_graph(edges, [rng.randint(1, 64) * 1024 for _ in range(n)], f"dag{seed}")
    graphs["blocks4"] = blocks_graph(4, 12)
    return graphs


def _small_graphs() -> dict[str, Any]:
    """Graphs small enough for the exact solver to prove optimality: branch and bound (at most
    14 ops, the physical cost model), CP-SAT's plan model (the torch cost model, or 16 ops)."""
    import random

    from partitioner.testing.synthetic import synthetic_graph

    graphs = {}
    for seed, n in enumerate((6, 8, 10, 12, 16)):
        rng = random.Random(100 + seed)
        edges = sorted({(rng.randrange(b), b) for b in range(1, n) for _ in range(rng.randint(1, 2))})
        sizes = [rng.randint(1, 32) * 1024 for _ in range(n)]
        graphs[f"small{n}"] = synthetic_graph(edges, sizes, f"small{n}")
    return graphs


def _devices(total: int, shares: tuple[float, ...], rate: float | None) -> list[Any]:
    from partitioner import Device

    return [
        Device(
            f"d{i}",
            max(1, int(total * share)),
            i,
            peak_flops=1e12 * (1 + i % 2),
            memory_bandwidth_bytes_per_s=1e11,
            link_bandwidth_bytes_per_s=rate,
        )
        for i, share in enumerate(shares)
    ]


def _cases(quick: bool, skip_optimal: bool) -> list[tuple[str, Any, list[Any], dict[str, Any]]]:
    """(label, graph, devices, keyword arguments of ``partition``) for every case, in order."""
    cases: list[tuple[str, Any, list[Any], dict[str, Any]]] = []
    for name, graph in _graphs().items() if os.environ.get("COMPARE_ONLY_OPTIMAL") != "1" else ():
        total = graph.total_size_bytes
        for s, shares in enumerate(SHARES[:3] if quick else SHARES):
            for cost_model in ("physical", "torch"):
                rate = None if s % 2 else 1e9
                devices = _devices(total, shares, rate)
                for mode in MODES:
                    kwargs: dict[str, Any] = {"mode": mode, "cost_model": cost_model, "search_budget": 60}
                    if mode == "aot_based":
                        kwargs["node_to_partition"] = None  # filled from the size_based plan
                    if s == 5:
                        kwargs["force_partition"] = True
                    if s == 2:
                        kwargs["saturate_host"] = True
                    cases.append((f"{name} {shares} {cost_model} {mode}", graph, devices, kwargs))
    if skip_optimal:
        return cases
    for name, graph in _small_graphs().items():
        total = graph.total_size_bytes
        for shares in OPTIMAL_SHARES[:1] if quick else OPTIMAL_SHARES:
            for cost_model in ("physical", "torch"):
                devices = _devices(total, shares, 2e9)
                kwargs = {"mode": "optimal", "cost_model": cost_model, "time_limit_s": 10.0}
                cases.append((f"{name} {shares} {cost_model} optimal", graph, devices, kwargs))
    return cases


def _model_hashes(calls: list[tuple[Any, tuple[Any, ...]]]) -> list[str]:
    """The CP-SAT models the recorded solver calls build, each built again here and not solved."""
    from ortools.sat.python import cp_model

    from partitioner.accelerator import _cpsat

    class Built(Exception):
        pass

    hashes: list[str] = []

    def capture(self: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
        hashes.append(_digest(str(model.Proto()).encode()))  # the text form: deterministic
        raise Built

    original = cp_model.CpSolver.solve
    cp_model.CpSolver.solve = capture  # type: ignore[method-assign]
    try:
        for fn, args in calls:
            for inp in args:
                if isinstance(inp, _cpsat.SlotInput):
                    build = _cpsat.solve_slots
                elif isinstance(inp, _cpsat.RelaxInput):
                    build = _cpsat.solve_relaxation
                else:
                    continue
                try:
                    build(inp)
                except Built:
                    pass
    finally:
        cp_model.CpSolver.solve = original  # type: ignore[method-assign]
    return hashes


def _masked(text: str) -> str:
    return _SECONDS.sub(r"\1 _ s", text)


def _child(root: str, out: str, quick: bool, skip_optimal: bool) -> None:
    """In a fresh process: every case with the code under ``root``; results pickled to ``out``."""
    sys.path.insert(0, root)
    import partitioner
    from partitioner.accelerator import optimal

    if not (partitioner.__file__ or "").startswith(root):
        raise SystemExit(f"partitioner came from {partitioner.__file__}, not from {root}")
    calls: list[tuple[Any, tuple[Any, ...]]] = []
    run_in_worker = optimal.run_in_worker

    def recording(fn: Any, args: tuple[Any, ...], timeout_s: float, what: str) -> Any:
        calls.append((fn, args))
        return run_in_worker(fn, args, timeout_s=timeout_s, what=what)

    optimal.run_in_worker = recording  # type: ignore[assignment]
    results: dict[str, dict[str, Any]] = {}
    aot: dict[str, dict[str, Any]] = {}
    for label, graph, devices, kwargs in _cases(quick, skip_optimal):
        calls.clear()
        reports: list[tuple[str, str, float | None]] = []
        kwargs = dict(kwargs)
        if "node_to_partition" in kwargs:
            base = aot.get(label.rsplit(" ", 1)[0])
            if base is None:
                continue
            kwargs.update(base)
        record: dict[str, Any] = {}
        try:
            plan = partitioner.partition(
                graph, devices, progress=lambda p: reports.append((p.phase, _masked(p.message), p.at_most_s)), **kwargs
            )
        except Exception as exc:  # the error is part of the behaviour compared
            record["outcome"] = f"{type(exc).__name__}: {exc}"
        else:
            data = json.loads(plan.to_json())
            data["provenance"]["solver"] = _masked(data["provenance"].get("solver") or "")
            record["outcome"] = _digest(json.dumps(data, sort_keys=True).encode())
            record["proven"] = bool(plan.proven_optimal)
            value = (
                data.get("latency_s"),
                data.get("lower_bound_s"),
                plan.proven_optimal,
                data["provenance"]["solver"],
            )
            record["value"] = _digest(repr(value).encode())
            if kwargs["mode"] == "size_based":
                aot[label.rsplit(" ", 1)[0] + " aot_based"] = {
                    "node_to_partition": plan.node_to_partition(),
                    "partition_to_devices": {p.id: list(p.device_ids) for p in plan.partitions},
                }
        record["progress"] = _digest(repr(reports).encode())
        record["inputs"] = [_digest(pickle.dumps(args)) for _, args in calls]
        record["models"] = _model_hashes(calls)
        results[label] = record
    Path(out).write_bytes(pickle.dumps(results))


def _start(root: Path, out: Path, quick: bool, skip_optimal: bool) -> subprocess.Popen:
    flags = [*(["--quick"] if quick else []), *(["--skip-optimal"] if skip_optimal else [])]
    return subprocess.Popen(
        [sys.executable, __file__, "--child", str(root), str(out), *flags],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        cwd=root,  # a worker (python -m) puts its folder first on its path: this tree's
    )


def _results(proc: subprocess.Popen, out: Path) -> dict[str, dict[str, Any]]:
    if proc.wait() != 0:
        raise SystemExit(f"a comparison process failed (exit code {proc.returncode})")
    return pickle.loads(out.read_bytes())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="the commit to compare with (required)")
    parser.add_argument("--after", type=Path, default=ROOT, help="the tree to compare (default: this one)")
    parser.add_argument("--quick", action="store_true", help="fewer device sets")
    parser.add_argument("--skip-optimal", action="store_true", help="leave the optimal mode out")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child, args.quick, args.skip_optimal)
        return
    if not args.before:
        parser.error("--before is required: the commit to compare with")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        before = unpack_commit(args.before, folder)
        outs = (folder / "before.pkl", folder / "after.pkl")
        roots = (before, args.after.resolve())
        runs = [(_start(root, out, args.quick, args.skip_optimal), out) for root, out in zip(roots, outs)]
        old, new = (_results(proc, out) for proc, out in runs)  # the two ran side by side
    same, same_plan, differ, unproven = 0, 0, [], []
    for label in sorted(set(old) | set(new)):
        a, b = old.get(label), new.get(label)
        if a is None or b is None:
            differ.append(f"{label}: only {'after' if a is None else 'before'}")
            continue
        if "optimal" in label and not (a.get("proven") and b.get("proven")):
            keys = ("inputs", "models")
            unproven.append(label)
        elif "optimal" in label:  # NOTE: [Equally fast optimal plans]
            keys = ("value", "progress", "inputs", "models")
            same_plan += a["outcome"] == b["outcome"]
        else:
            keys = ("outcome", "progress", "inputs", "models")
        if all(a[k] == b[k] for k in keys):
            same += 1
        else:
            differ.append(f"{label}: " + ", ".join(f"{k} {a[k]} -> {b[k]}" for k in keys if a[k] != b[k]))
    errors = sum(1 for r in new.values() if " " in r["outcome"])
    optimal = [label for label in new if "optimal" in label]
    print(
        f"{len(set(old) | set(new))} cases ({errors} refused with an error, {len(optimal)} optimal, "
        f"{len(optimal) - len(unproven)} of them proven optimal in both, {same_plan} of those the same plan): "
        f"{same} match, {len(differ)} differ"
    )
    for label in unproven:
        print(f"  not proven optimal, compared by solver inputs and models only: {label}")
    for line in differ:
        print(f"  DIFFERENT {line}")
    if differ:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
