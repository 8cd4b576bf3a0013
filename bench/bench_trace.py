"""Time tracing GPT-2 small (124M parameters) into an annotated graph.

Prints the build time, the node count and the time of ``partitioner.trace`` (symbolic trace,
fake-tensor shapes, sizes and FLOPs), best of ``--repeat`` runs and the first (cold) one. The
target is under 10 s on a 2-core machine. ``--n-layer 48`` gives the GPT-2-XL depth.

    python bench/bench_trace.py [--seq-len 128] [--n-layer 12] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import partitioner
import sample_models


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

    times = []
    nodes = 0
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        nodes = len(partitioner.trace(model, inputs))
        times.append(time.perf_counter() - t0)

    print(f"model      gpt2_small n_layer={args.n_layer} seq_len={args.seq_len} "
          f"({n_params / 1e6:.1f}M parameters)")
    print(f"build      {build_s:.2f} s")
    print(f"nodes      {nodes}")
    print(f"trace      {min(times):.3f} s (best of {len(times)}; first {times[0]:.3f} s)")
    print(f"target     under 10 s: {'met' if max(times) < 10 else 'NOT MET'}")


if __name__ == "__main__":
    main()
