"""Training memory with torch's min-cut: joint-trace and solver times, and the budget sweep.

For each sample model and gpt2_small: the time to trace the joint forward-backward graph and to
run ``min_cut_rematerialization_partition`` (first budget apart: it pays the imports), then the
sweep's points (saved activation bytes against recomputed FLOPs and time), all in this process.

    .venv/bin/python bench/bench_remat.py
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from partitioner import remat
from partitioner.units import format_bytes, format_seconds

BUDGETS = (0.0, 0.25, 0.5, 0.75, 1.0)


def main() -> None:
    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    import torch._functorch.partitioners  # noqa: F401  (the imports the worker pays once)

    print(f"importing functorch's partitioners: {time.perf_counter() - start:.2f} s\n")
    for name in ("mlp", "cnn", "transformer", "moe", "unet", "gpt2_small"):
        module, inputs, _ = sample_models.load(name)
        graph = partitioner.trace(module, inputs)
        start = time.perf_counter()
        results = remat.sweep(graph, inputs, BUDGETS, timeout_s=None)
        total = time.perf_counter() - start
        trace_s = [r.joint_trace_s for r in results]
        solve_s = [r.solver_s for r in results]
        print(
            f"{name}: {len(graph.op_indices)} traced ops, {results[0].forward_ops} aten forward ops; "
            f"sweep of {len(BUDGETS)} budgets {total:.2f} s; joint trace {min(trace_s):.2f}-{max(trace_s):.2f} s, "
            f"min-cut {min(solve_s):.2f}-{max(solve_s):.2f} s; gradients equal eager: "
            f"{all(r.gradients_equal for r in results)}"
        )
        for r in results:
            print(
                f"  budget {r.budget:<4g} saved {format_bytes(r.saved_activation_bytes):>10}  "
                f"recomputed {r.recomputed_ops:>4} ops {r.recompute_flops:>14,} FLOPs "
                f"({format_seconds(r.recompute_time_s)} at 10 TFLOP/s)"
            )


if __name__ == "__main__":
    main()
