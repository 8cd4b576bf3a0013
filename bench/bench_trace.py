"""Time tracing GPT-2 small (124M parameters) into an annotated graph.

Prints the build time, the node count and the trace time (best of ``--repeat`` runs). Uses
``partitioner.trace`` (symbolic trace + fake-tensor shapes, sizes and FLOPs); where the library
is not importable it times ``torch.fx.symbolic_trace`` plus ``ShapeProp`` on fake tensors.

    python bench/bench_trace.py [--seq-len 128] [--n-layer 12] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sample_models  # noqa: E402


def _library_trace() -> tuple[str, Callable[[torch.nn.Module, tuple[Any, ...]], int]] | None:
    try:
        import partitioner
    except ImportError:
        return None
    trace = getattr(partitioner, "trace", None)
    if trace is None:
        return None
    return "partitioner.trace", lambda model, inputs: len(trace(model, inputs))


def _fx_fake_trace(model: torch.nn.Module, inputs: tuple[Any, ...]) -> int:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.shape_prop import ShapeProp

    gm = torch.fx.symbolic_trace(model)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake_inputs = [mode.from_tensor(t) for t in inputs]
    with mode:
        ShapeProp(gm, fake_mode=mode).propagate(*fake_inputs)
    return len(gm.graph.nodes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=128, help="tokens in the example input")
    parser.add_argument("--n-layer", type=int, default=12, help="transformer blocks")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    model, inputs = sample_models.build("gpt2_small", seq_len=args.seq_len, n_layer=args.n_layer)
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())

    found = _library_trace()
    label, run = found if found else ("symbolic_trace + ShapeProp (fake)", _fx_fake_trace)
    times = []
    nodes = 0
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        nodes = run(model, inputs)
        times.append(time.perf_counter() - t0)

    print(f"model      gpt2_small n_layer={args.n_layer} seq_len={args.seq_len} "
          f"({n_params / 1e6:.1f}M parameters)")
    print(f"build      {build_s:.2f} s")
    print(f"tracer     {label}")
    print(f"nodes      {nodes}")
    print(f"trace      {min(times):.3f} s (best of {len(times)}; first {times[0]:.3f} s)")


if __name__ == "__main__":
    main()
