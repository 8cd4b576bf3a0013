"""What one calibration process measures alone (:mod:`partitioner.calibration.host` assembles the
profile): an op's and a module call's dispatch, square matrix products per dtype, copies and the
elementwise ops with curves of their own by bytes, an op inside a traced module, and the training
step over the forward. Torch loads inside the functions (they run on a launched rank)."""

from __future__ import annotations

import statistics
from typing import Any

from partitioner import units
from partitioner.calibration.loops import budget_median_s
from partitioner.device_profile import ELEMENTWISE_KINDS

__all__ = ["measure_ops"]

MATMUL_SIZES = (8, 16, 32, 64, 96, 128, 192, 256, 384, 512)  # square n x n @ n x n
COPY_BYTES = (256, 4096, 65536, 1 << 20, 1 << 23, 1 << 25)  # bytes moved: read + written
DTYPES = tuple(d.name for d in units.DTYPES if d.calibrated)  # float32 and bfloat16
ELEMENT_BYTES = (4096, 65536, 1 << 20, 1 << 22)  # an elementwise op's input


def measure_ops() -> dict[str, Any]:
    """Rank 0 alone: overheads, matmul and copy curves."""
    import torch

    a, b = torch.ones(1), torch.ones(1)
    op = statistics.median(budget_median_s(lambda: torch.add(a, b), 0.02) for _ in range(3))
    linear = torch.nn.Linear(1, 1)
    func = torch.nn.functional.linear
    with torch.no_grad():  # interleaved pairs: the machine's load shifts between measurements
        module = statistics.median(
            budget_median_s(lambda: linear(a), 0.02)
            - budget_median_s(lambda: func(a, linear.weight, linear.bias), 0.02)
            for _ in range(5)
        )
        matmul: dict[str, list[tuple[float, float]]] = {}
        for name in DTYPES:  # a Linear's op (addmm with its bias), as models call it
            dtype = getattr(torch, name)
            points = []
            for n in MATMUL_SIZES:
                x, w, bias = (torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype), torch.randn(n).to(dtype))
                points.append((2.0 * n**3, budget_median_s(lambda: func(x, w, bias), 0.08 if n >= 256 else 0.03)))
            matmul[name] = points
    copy = []
    for nbytes in COPY_BYTES:
        x = torch.ones(max(1, nbytes // 8))  # float32: half the bytes read, half written
        copy.append(
            (float(2 * x.nbytes), budget_median_s(lambda: torch.mul(x, 2.0), 0.05 if nbytes < 1 << 24 else 0.15))
        )
    return {
        "launch": op,
        "module": max(0.0, module),
        "matmul": matmul,
        "copy": copy,
        "backward": _backward_factor(),
        "elementwise": _elementwise(),
        "host_per_op": _host_per_op(),
    }


class _SmallOps:
    """A forward of small ops as models write them between their layers (views, transposes,
    arithmetic, an activation), on a tensor small enough that only the dispatch counts."""

    def forward(self, x: Any) -> Any:
        import torch

        for _ in range(8):
            x = x.transpose(0, 1).unflatten(-1, (2, -1)).flatten(-2)
            x = torch.relu(x * 0.5 + 1.0)
        return x


def _host_per_op() -> float:
    """Seconds one op of :class:`_SmallOps` takes inside its traced (``torch.fx``) forward, as a
    partition's submodule runs it: the forward's median over its op count."""
    import torch
    import torch.fx as fx

    module = type("SmallOps", (torch.nn.Module,), {"forward": _SmallOps.forward})()
    gm = fx.symbolic_trace(module)
    count = sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
    x = torch.ones(8, 8)
    with torch.no_grad():
        return statistics.median(budget_median_s(lambda: gm(x), 0.03) for _ in range(3)) / max(1, count)


def _elementwise() -> dict[str, list[tuple[float, float]]]:
    """(bytes moved, seconds) of each op in ELEMENTWISE_KINDS on rows of 256 floats, read and
    written (the copy curve's axis), its dispatch included."""
    import torch

    F = torch.nn.functional
    w, b = torch.ones(256), torch.zeros(256)
    ops = {
        "gelu": F.gelu,
        "layer_norm": lambda x: F.layer_norm(x, (256,), w, b),
        "softmax": lambda x: torch.softmax(x, -1),
        "silu": F.silu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
    }
    curves: dict[str, list[tuple[float, float]]] = {}
    with torch.no_grad():
        for kind in ELEMENTWISE_KINDS:
            fn = ops[kind]
            points = []
            for nbytes in ELEMENT_BYTES:
                x = torch.randn(max(1, nbytes // 1024), 256)
                points.append((float(2 * x.nbytes), budget_median_s(lambda: fn(x), 0.03 if nbytes < 1 << 22 else 0.08)))
            curves[kind] = points
    return curves


def _backward_factor() -> float:
    """A training step's time over the forward's: a chain of Linear + ReLU layers (64 rows, 256
    wide, as the sample MLP) run forward, then forward and backward of the sum of its output,
    interleaved, median of the ratios. Autograd's per-node overhead is in it, as in a run."""
    import torch

    nn = torch.nn
    chain = nn.Sequential(*(m for _ in range(4) for m in (nn.Linear(256, 256), nn.ReLU())))
    x = torch.randn(64, 256)

    def forward() -> None:
        with torch.no_grad():
            chain(x)

    def step() -> None:
        chain.zero_grad(set_to_none=True)
        chain(x).sum().backward()

    return statistics.median(budget_median_s(step, 0.03) / budget_median_s(forward, 0.03) for _ in range(3))
