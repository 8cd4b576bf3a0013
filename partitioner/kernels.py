"""GPU kernel times from measured curves, op by op, for an engine that says what it assumes.

A :class:`GpuKernels` holds what ``measure_curves`` measures on one GPU (CUDA events, median
after warm-up): Linear time by shape (m tokens x k -> n) and dtype, elementwise and normalisation
time by bytes, causal and full attention by sequence (past the longest measured, at its last
FLOP rate: a sequence's attention grows as its square), embedding lookups, the loss over a
vocabulary, and the launch cost of one kernel. :mod:`partitioner.cost.ops` turns a traced graph's
ops into :class:`KernelOp` records; :func:`eager_increments` runs their kernels through the launch
queue of eager PyTorch. Torch-free.

# NOTE: [What a lone timed kernel includes]
A kernel timed alone between two CUDA events includes the wait for its own launch: a 1-element
add "takes" 27 us on the H100 host measured and 15 us on the H200's, where back to back the
same adds run one every 11 and 7.4 us (``launch_s``). So the curves reproduce what was timed
(:meth:`GpuKernels.timed_s`, the recorded points exactly), and the GPU's own time of a kernel
is the timed one less ``launch_s`` (held at ``MIN_KERNEL_S``): the launch is paid once, by the
queue below, not twice.

# NOTE: [Eager launch queue]
Eager PyTorch runs a model's ops in program order: the host spends ``host_op_s`` on each
(Python, the dispatcher, the launch; views and no-op casts included), and the GPU runs each
kernel when it has been launched and the one before it has finished. Over ops ``i``:
``host += host_op_s; gpu = max(gpu, host) + kernel_i``. Small shapes are launch-bound (the host
is the bottleneck: about 2,000 ops a Llama-3-8B token at 10-14 us each), large ones GPU-bound
(the host runs ahead). Each op's latency is its increment of ``gpu``, so the increments add up
to the queue's finish time and the cost model's sums stay exact on one device.
The host cost per op is the bare op's measured host time (16.5 us on the H100 host measured,
7.4 on the H200's) plus ``PYTHON_GLUE_S``, what a Hugging Face model's forward adds per traced op beyond a bare op
(measured on CPU where every op is dispatch-bound: Llama 2.9, GPT-2 4.7, BERT 5.6 us an op).

# NOTE: [Unaligned matrix products]
Hopper's fast matrix-product kernels read and write through 16-byte aligned rows, so a 16-bit
product whose inner or output width (k or n) is not a multiple of 8 elements cannot use them;
cuBLAS falls back to an older tensor-core kernel. Measured on an H100 (torch 2.11): GPT-2's
vocabulary head, 16,384 x 1,600 -> 50,257 in bf16, ran cutlass's ``sm75`` kernel for 26.9 ms
(98 TFLOP/s) where the aligned curves give 3.8 ms; the head was 52 % of the forward. So a product
of a tensor-core dtype with k or n off the multiple runs at ``UNALIGNED_MATMUL_SHARE`` of the
card's best measured rate at best (98 of 768 TFLOP/s), each of its backward's two products
``UNALIGNED_BACKWARD_SHARE`` (2.4 ms each for the 2,048-token head's, 137 TFLOP/s). It is why
nanoGPT pads GPT-2's vocabulary to 50,304 and Megatron-LM to a multiple of 128
(``--make-vocab-size-divisible-by``), and NVIDIA's matrix-multiplication guide asks for multiples of
8 in fp16 (16 bytes in any dtype). The "graphs" engine pays nothing for it: the engines it stands
for pad (vLLM's vocabulary head to a multiple of 64, torch.compile's Inductor the strides).

# NOTE: [Engines]
"eager" (the default) is what a plain ``model(x)`` runs: one kernel per op, unfused, each
launched from Python (above). "graphs" is an engine with CUDA graphs and fused kernels (vLLM- or
TensorRT-LLM-like serving, ``torch.compile(mode="max-autotune")`` training): no host cost per op,
matrix products and attention as measured, and the elementwise and normalisation ops between
them fused into their neighbours: they move their bytes once at the card's best measured
bandwidth (``FUSED_TRAFFIC`` of the unfused traffic) with no launch of their own.

# NOTE: [FP8 from the bf16 curves]
No FP8 matrix products were measured here (``torch._scaled_mm`` on the H100 and H200 is the
measurement to make). The datasheets give FP8 dense tensor-core rates of exactly twice bf16 on
H100 and H200 (1,979 against 989 TFLOP/s), B200 (4.5 against 2.25 PFLOP/s), MI300X (2,615 against
1,307) and L4: so an FP8 product is priced as the bf16 curve's GPU time divided by that ratio
(:meth:`GpuKernels.with_derived_dtype`). The same factor holds where a product is memory-bound:
its weight read is 1 byte an element instead of 2. The launch stays what was measured. Said so in
a serving answer's ``assumes``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from partitioner.curves import MAX_CURVE_POINTS, MAX_PROFILE_POINTS, Curve, check_curve, check_length, interp
from partitioner.errors import DeviceSpecError
from partitioner.units import find_dtype

__all__ = [
    "GpuKernels",
    "KernelOp",
    "ENGINES",
    "MIN_KERNEL_S",
    "PYTHON_GLUE_S",
    "FUSED_TRAFFIC",
    "UNALIGNED_MATMUL_SHARE",
    "UNALIGNED_BACKWARD_SHARE",
    "FOREACH_BANDWIDTH_SHARE",
    "eager_increments",
    "fused_s",
    "backward_times",
    "dtype_name",
    "gpu_curve",
    "GPU_LIMITS",
    "CALIBRATE_GPU",
]

ENGINES = {
    "eager": "eager PyTorch: one unfused kernel per op, each launched from Python (about 7-17 us an op "
    "on the measured hosts), the host and the GPU overlapping as the launch queue allows",
    "graphs": "CUDA graphs and fused kernels (vLLM / TensorRT-LLM serving, torch.compile training): no "
    "launch cost per op; elementwise and normalisation ops fused into the matrix products",
}
MIN_KERNEL_S = 2e-6  # the GPU time of the smallest kernel
PYTHON_GLUE_S = 3e-6  # a Hugging Face forward's Python per traced op beyond a bare op (NOTE: [Eager launch queue])
FUSED_TRAFFIC = 0.5  # fused elementwise chains move about half the bytes their unfused ops do
_REF_HEADS, _REF_HEAD_DIM = 32, 128  # the attention curves' shape (batch 1)
# torch.optim's foreach kernels (multi_tensor_apply) moved 2.80 TB/s where a large copy moves 2.98
# (H100, torch 2.11: AdamW over 1.92 billion fp32 parameters; NOTE: [Optimizer step] in cost.training)
FOREACH_BANDWIDTH_SHARE = 0.94
UNALIGNED_MATMUL_SHARE = 0.128  # of the best measured rate (NOTE: [Unaligned matrix products])
UNALIGNED_BACKWARD_SHARE = 0.178  # each of its backward's two products, likewise
_ALIGN_BYTES = 16
CALIBRATE_GPU = "partition-explorer calibrate --gpu"
# How long each part of a GPU profile may be (NOTE: [Bounded profiles] in partitioner.curves).
GPU_LIMITS = {"matmul": 16, "elementwise": 64, "attention": 2, "derived_dtypes": 16}  # dtypes, kinds, causal/full
MAX_WEIGHT_SHAPES = 256  # distinct (k, n) a dtype: every product's price scans them (12 measured)


def gpu_curve(name: str, what: str, points: Iterable[Any]) -> Curve:
    """``points`` as a curve of the GPU profile ``name`` (:func:`partitioner.curves.check_curve`)."""
    return check_curve(f"GPU profile {name!r}", what, points, "partition-explorer calibrate --gpu")


@dataclass(frozen=True)
class KernelOp:
    """What the kernel model needs of one op. ``kind``: "view" (no kernel), "matmul", "attention",
    "embedding", "loss", or an elementwise curve's name ("add", "copy", "gelu", "softmax"...).
    matmul: ``m`` rows x ``k`` -> ``n`` (batch dimensions folded into ``m``); attention: ``m``
    batch x heads, ``k`` head dim, ``n`` sequence; embedding and elementwise ops: ``nbytes``
    read and written; loss: ``nbytes`` logit elements."""

    kind: str
    dtype: str = "float32"
    m: float = 0.0
    k: float = 0.0
    n: float = 0.0
    nbytes: float = 0.0
    causal: bool = True
    fixed_bytes: float = 0.0  # of nbytes, what does not grow with the tokens (weights read)
    seq_axis: str = ""  # a product of two activations: "k" or "n" grows with the sequence
    seq_squared: bool = False  # an elementwise op on (sequence x sequence) scores or masks
    experts: float = 0.0  # a grouped product over this many experts' weights (a mixture of experts)

    @property
    def launches(self) -> float:
        """Ops the host issues for it: one, or for a grouped product the per-expert loop eager
        PyTorch runs (a slice, a product and a copy for each expert its rows reach)."""
        return 1.0 + 3.0 * min(self.experts, max(self.m, 1.0)) if self.kind == "matmul" and self.experts > 1 else 1.0

    def scaled(self, tokens_ratio: float, seq_ratio: float = 1.0, tp: int = 1) -> "KernelOp":
        """This op at ``tokens_ratio`` times the tokens in sequences ``seq_ratio`` times as long,
        its work split ``tp`` ways (NOTE: [Scaling the traced graph] in the planner's profile)."""
        if self.kind == "view":
            return self
        r, q = tokens_ratio, seq_ratio
        if self.kind == "matmul":
            k = self.k * (q if self.seq_axis == "k" else 1.0)
            n = self.n * (q if self.seq_axis == "n" else 1.0) / tp
            return dataclasses.replace(self, m=max(self.m * r, 1.0), k=k, n=max(n, 1.0))
        if self.kind == "attention":
            return dataclasses.replace(self, m=max(self.m * r / q / tp, 1.0), n=max(self.n * q, 1.0))
        grow = r * (q if self.seq_squared else 1.0)
        moving = (self.nbytes - self.fixed_bytes) * grow
        return dataclasses.replace(self, nbytes=(self.fixed_bytes + moving) / tp, fixed_bytes=self.fixed_bytes / tp)


@dataclass(frozen=True)
class GpuKernels:
    """Measured kernel curves of one GPU (NOTE: [What a lone timed kernel includes])."""

    gpu: str  # the card as measured ("NVIDIA H100 80GB HBM3")
    launch_s: float  # kernels back to back: one every launch_s
    host_op_s: float  # the host's wall time per tiny op
    matmul: tuple[tuple[str, tuple[tuple[float, float, float, float], ...]], ...]  # dtype -> (m, k, n, s)
    elementwise: tuple[tuple[str, Curve], ...]  # op -> (bytes moved, s)
    attention: tuple[tuple[bool, Curve], ...]  # causal -> (sequence, s), batch 1 x 32 heads of 128
    embedding: Curve  # (bytes moved, s)
    loss: Curve  # cross-entropy: (logit elements, s)
    derived_from: str = ""  # "" when measured; else how it was scaled from a measured card
    source: str = ""
    # dtypes without curves priced from bf16's: (dtype, speed-up) (NOTE: [FP8 from the bf16 curves])
    derived_dtypes: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for field_name in ("launch_s", "host_op_s"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 0.01:
                raise DeviceSpecError(
                    f"GPU profile {self.gpu!r}: {field_name} must be seconds in (0, 0.01) "
                    f"(got {value!r}); measure it with `partition-explorer calibrate --gpu`"
                )
        if not self.matmul or not self.elementwise or not self.attention:
            raise DeviceSpecError(f"GPU profile {self.gpu!r}: needs matmul, elementwise and attention curves")
        owner = f"GPU profile {self.gpu!r}"
        for field, limit in GPU_LIMITS.items():
            check_length(owner, field, getattr(self, field), limit, "entries", CALIBRATE_GPU)
        points = sum(len(rows) for _, rows in self.matmul) + len(self.embedding) + len(self.loss)
        points += sum(len(c) for _, c in self.elementwise) + sum(len(c) for _, c in self.attention)
        if points > MAX_PROFILE_POINTS:
            raise DeviceSpecError(
                f"{owner}: its curves hold {points:,} points together (at most {MAX_PROFILE_POINTS:,}; a "
                f"measurement makes a few hundred); measure it again with `{CALIBRATE_GPU}`"
            )
        groups: dict[str, dict[tuple[float, float], list[tuple[float, float]]]] = {}
        for dtype, rows in self.matmul:
            check_length(owner, f"matmul[{dtype}]", rows, MAX_CURVE_POINTS, "rows", CALIBRATE_GPU)
            for m, k, n, s in rows:
                if not all(math.isfinite(v) and v > 0 for v in (m, k, n, s)) or s >= 3600:
                    raise DeviceSpecError(
                        f"GPU profile {self.gpu!r}: matmul[{dtype}] needs positive, finite "
                        f"m, k, n and seconds (got {(m, k, n, s)})"
                    )
                groups.setdefault(dtype, {}).setdefault((k, n), []).append((m, s))
            if len(groups.get(dtype, ())) > MAX_WEIGHT_SHAPES:
                raise DeviceSpecError(
                    f"{owner}: matmul[{dtype}] has {len(groups[dtype]):,} weight shapes (k, n) (at most "
                    f"{MAX_WEIGHT_SHAPES}; a measurement times about a dozen); measure it again with `{CALIBRATE_GPU}`"
                )
        # Lookup tables, built once (the record stays frozen and comparable).
        object.__setattr__(
            self, "_mm", {d: [((k, n), _merged(pts)) for (k, n), pts in g.items()] for d, g in groups.items()}
        )
        object.__setattr__(self, "_ew", dict(self.elementwise))
        object.__setattr__(self, "_att", dict(self.attention))
        best = {d: max((2 * m * k * n / s for m, k, n, s in rows), default=0.0) for d, rows in self.matmul}
        for dtype, speedup in self.derived_dtypes:
            if not (math.isfinite(speedup) and 0 < speedup <= 16):
                raise DeviceSpecError(
                    f"GPU profile {self.gpu!r}: {dtype}'s speed-up must be in (0, 16] (got {speedup})"
                )
            if dtype not in best:
                best[dtype] = best.get("bfloat16", 0.0) * speedup
        object.__setattr__(self, "_best", best)
        object.__setattr__(self, "_derived", {d: r for d, r in self.derived_dtypes if d not in groups})

    def with_derived_dtype(self, dtype: str, speedup: float) -> "GpuKernels":
        """These curves with ``dtype``'s products priced as bf16's GPU time / ``speedup`` (NOTE:
        [FP8 from the bf16 curves]); a dtype with measured curves keeps them."""
        name = dtype_name(dtype)
        kept = tuple((d, r) for d, r in self.derived_dtypes if d != name)
        return dataclasses.replace(self, derived_dtypes=(*kept, (name, float(speedup))))

    # --- the curves as timed (the recorded points exactly)
    def timed_matmul_s(self, m: float, k: float, n: float, dtype: str = "bfloat16") -> float:
        """A lone ``F.linear`` of (m, k) by (n, k) as timed: the nearest measured weight shape's
        curve at ``m`` tokens, scaled by the weight's size k x n (a matrix product's time grows
        with k x n at any m: its weight read when memory-bound, its FLOPs when compute-bound). A
        dtype derived from bf16 (NOTE: [FP8 from the bf16 curves]): bf16's GPU time / its speed-up."""
        speedup = self._derived.get(dtype_name(dtype))  # type: ignore[attr-defined]
        if speedup:
            t = self.timed_matmul_s(m, k, n, "bfloat16")
            return self.launch_s + max(t - self.launch_s, MIN_KERNEL_S) / speedup
        groups = self._mm.get(dtype_name(dtype)) or self._mm.get("bfloat16") or next(iter(self._mm.values()))  # type: ignore[attr-defined]
        for (gk, gn), curve in groups:  # a shape measured at this very size (the squares)
            if (gk, gn) == (k, n) and len(curve) == 1 and curve[0][0] == m:
                return curve[0][1]
        curves = [g for g in groups if len(g[1]) > 1] or groups  # shapes measured over the tokens
        (gk, gn), curve = min(
            curves,
            key=lambda g: abs(math.log(k * n / (g[0][0] * g[0][1]))) + 0.25 * abs(math.log(k / n * g[0][1] / g[0][0])),
        )
        t = interp(curve, m) if len(curve) > 1 else curve[0][1] * max(m / curve[0][0], 1.0)
        scale = k * n / (gk * gn)
        return t if scale == 1.0 else self.launch_s + max(t - self.launch_s, MIN_KERNEL_S) * scale

    def timed_elementwise_s(self, kind: str, nbytes: float) -> float:
        curve = self._ew.get(kind) or self._ew.get("copy") or next(iter(self._ew.values()))  # type: ignore[attr-defined]
        return interp(curve, max(nbytes, 1.0))

    def timed_attention_s(self, heads: float, head_dim: float, seq: float, causal: bool = True) -> float:
        """SDPA over ``heads`` (batch x heads) of ``head_dim`` at ``seq``: the measured curve at
        ``seq``, its kernel scaled by heads x head dim against the measured 32 x 128."""
        curve = self._att.get(causal) or next(iter(self._att.values()))  # type: ignore[attr-defined]
        last_seq, last_s = curve[-1]
        # Beyond the longest sequence measured, the last point's FLOP rate: a sequence's attention
        # does seq^2 work (the last points already run at the card's attention rate; a rate
        # constant in seq, as interp's linear end would give, makes 131k tokens 8x too fast).
        t = last_s * (seq / last_seq) ** 2 if seq > last_seq else interp(curve, max(seq, 1.0))
        scale = heads * head_dim / (_REF_HEADS * _REF_HEAD_DIM)
        return t if scale == 1.0 else self.launch_s + max(t - self.launch_s, MIN_KERNEL_S) * scale

    # --- the GPU's own time of a kernel (NOTE: [What a lone timed kernel includes])
    def kernel_s(self, op: KernelOp) -> float:
        """Seconds the GPU spends on ``op``'s kernel (0 for a view)."""
        if op.kind == "view":
            return 0.0
        if op.kind == "matmul" and op.experts > 1:  # one product per expert its rows route to
            groups = min(op.experts, max(op.m, 1.0))
            t = self.timed_matmul_s(op.m / groups, op.k, op.n, op.dtype)
            return groups * max(t - self.launch_s, MIN_KERNEL_S)
        if op.kind == "matmul":
            t = max(self.timed_matmul_s(op.m, op.k, op.n, op.dtype), self.launch_s + self.unaligned_floor_s(op))
        elif op.kind == "attention":
            t = self.timed_attention_s(op.m, op.k, op.n, op.causal)
        elif op.kind == "embedding":
            t = interp(self.embedding, max(op.nbytes, 1.0))
        elif op.kind == "loss":
            t = interp(self.loss, max(op.nbytes, 1.0))
        else:
            t = self.timed_elementwise_s(op.kind, op.nbytes)
        return max(t - self.launch_s, MIN_KERNEL_S)

    @property
    def host_per_op_s(self) -> float:
        """What eager PyTorch's host spends on one op of a model (NOTE: [Eager launch queue]): the
        measured host cost of a bare op (its wall time in a loop, or the GPU's spacing of
        back-to-back ops where that is longer) and a model's Python around it."""
        return max(self.launch_s, self.host_op_s) + PYTHON_GLUE_S

    @property
    def best_bandwidth_bytes_per_s(self) -> float:
        """The best measured elementwise bandwidth (a copy of the largest size measured)."""
        return max(c[-1][0] / c[-1][1] for _, c in self.elementwise)

    def aligned_matmul_s(self, op: KernelOp) -> float:
        """The GPU's time of ``op``'s product by the measured curves, as if aligned."""
        return max(self.timed_matmul_s(op.m, op.k, op.n, op.dtype) - self.launch_s, MIN_KERNEL_S)

    def unaligned_floor_s(self, op: KernelOp, share: float = UNALIGNED_MATMUL_SHARE) -> float:
        """The least time of a tensor-core product whose k or n is off the 16-byte multiple (NOTE:
        [Unaligned matrix products]) at ``share`` of the best rate; 0 when aligned or not a
        tensor-core dtype."""
        found = find_dtype(op.dtype)
        if found is None or found.bits > 16 or found.bits < 8:
            return 0.0
        per_row = _ALIGN_BYTES * 8 // found.bits
        if int(op.k) % per_row == 0 and int(op.n) % per_row == 0:
            return 0.0
        return 2 * op.m * op.k * op.n / (share * self.best_flops(found.name) or math.inf)

    def best_flops(self, dtype: str = "bfloat16") -> float:
        """The best measured matmul throughput at ``dtype`` (0 when not measured)."""
        return self._best.get(dtype_name(dtype), 0.0)  # type: ignore[attr-defined]


def _merged(points: Sequence[tuple[float, float]]) -> Curve:
    """A curve from (x, seconds) points, repeated measurements of one x averaged. O(n log n): the
    points grouped by x once (a scan of every point per x was O(n^2): 10,000 rows of one weight
    shape took 1.5 s of CPU)."""
    by_x: dict[float, list[float]] = {}
    for x, y in points:
        by_x.setdefault(x, []).append(y)
    return tuple((x, statistics.fmean(by_x[x])) for x in sorted(by_x))


def dtype_name(dtype: str | None) -> str:
    """``torch.float32`` -> ``float32``; ``half`` -> ``float16``."""
    name = (dtype or "float32").removeprefix("torch.")
    found = find_dtype(name)
    return found.name if found is not None else name


def eager_increments(host_s: Sequence[float], gpu_s: Sequence[float]) -> list[float]:
    """Each op's increment of the eager launch queue's finish time (NOTE: [Eager launch queue]),
    in program order; they sum to the queue's finish. O(N)."""
    host = gpu = 0.0
    out = []
    for h, k in zip(host_s, gpu_s):
        host += h
        done = max(gpu, host) + k
        out.append(done - gpu)
        gpu = done
    return out


def fused_s(kernels: GpuKernels, op: KernelOp, kernel: float) -> float:
    """An op's time under the "graphs" engine (NOTE: [Engines])."""
    if op.kind in ("view",):
        return 0.0
    if op.kind == "matmul" and op.experts <= 1 and kernels.unaligned_floor_s(op):
        return kernels.aligned_matmul_s(op)  # padded (NOTE: [Unaligned matrix products])
    if op.kind in ("matmul", "attention", "embedding", "loss"):
        return kernel
    return FUSED_TRAFFIC * op.nbytes / kernels.best_bandwidth_bytes_per_s


def backward_times(
    ops: Sequence[KernelOp | None], kernels: GpuKernels, padded: bool = False
) -> list[tuple[float, float]]:
    """Per op: (host seconds, GPU seconds) of its backward. A matrix product's backward is two
    products of its size (the input's and the weight's gradients); flash attention's backward
    about 2.5 of its forward (FlashAttention-2, Dao 2023); an elementwise op's reads its saved
    inputs and the incoming gradient and writes one (twice its bytes); views nothing. The
    autograd engine launches from C++: the host pays the launch alone. ``padded``: unaligned
    products as if padded (the "graphs" engine, NOTE: [Unaligned matrix products])."""
    out = []
    for op in ops:
        if op is None or op.kind == "view":
            out.append((0.0, 0.0))
            continue
        k = kernels.kernel_s(op)
        if op.kind == "matmul" and op.experts <= 1 and kernels.unaligned_floor_s(op):
            slow = 0.0 if padded else kernels.unaligned_floor_s(op, UNALIGNED_BACKWARD_SHARE)
            out.append((2 * kernels.launch_s, 2 * max(kernels.aligned_matmul_s(op), slow)))
        elif op.kind == "matmul":
            out.append((2 * kernels.launch_s, 2 * k))
        elif op.kind == "attention":
            out.append((kernels.launch_s, 2.5 * k))
        else:
            out.append((kernels.launch_s, max(2 * k, MIN_KERNEL_S)))
    return out
