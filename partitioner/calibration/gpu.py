"""Measure a GPU's kernel curves into a device profile (``partition-explorer calibrate --gpu``).

The same measurements as the curves the GPU presets carry (:mod:`partitioner.profiles`): one
op's launch cost back to back and the host's wall time per op; ``F.linear`` by LLM shape
(tokens x k -> n) and dtype; elementwise and normalisation ops by bytes; causal and full
``scaled_dot_product_attention`` by sequence; an embedding lookup and the cross-entropy over a
128k vocabulary by tokens. Timed with CUDA events, the median after warm-up, in a fresh worker
process with a time limit (:func:`partitioner.processes.worker.run_in_worker`). The rows have the
format of the carried curves, so a profile measured here is priced exactly as the presets are.
On a machine without CUDA the same code runs on the CPU (``device="cpu"``, wall-clock timing),
which is how the tests check it; a CPU's own profile comes from ``partition-explorer calibrate``.
"""

from __future__ import annotations

import socket
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from partitioner.calibration.host import host_memory_bytes
from partitioner.calibration.naming import load_now, utc_now
from partitioner.device_profile import DeviceProfile
from partitioner.units import DTYPES

__all__ = ["measure_rows", "calibrate_gpu", "timer", "Shapes", "SHAPES", "QUICK_SHAPES"]


@dataclass(frozen=True)
class Shapes:
    """What is measured: Linear weights (k, n) by tokens, squares, elementwise sizes, attention
    sequences, the vocabulary and width of the embedding and the loss, and the dtypes."""

    tokens: tuple[int, ...]
    weights: tuple[tuple[int, int], ...]
    squares: tuple[int, ...]
    elements: tuple[int, ...]
    sequences: tuple[int, ...]
    vocab: int
    dim: int
    loss_tokens: tuple[int, ...]
    dtypes: tuple[str, ...]
    repeats: int


# (k, n) weights of Llama-3-8B / 70B, GPT-2 XL and BERT-large's layers; tokens from decode to 16k.
SHAPES = Shapes(
    tokens=(1, 8, 64, 256, 1024, 4096, 16384),
    weights=((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (8192, 28672), (1600, 6400), (1024, 4096)),
    squares=(128, 256, 512, 1024, 2048, 4096, 8192),
    elements=tuple(1 << e for e in (10, 14, 18, 20, 22, 24, 26, 28)),
    sequences=(128, 512, 1024, 2048, 4096, 8192, 16384),
    vocab=128256,
    dim=4096,
    loss_tokens=(128, 2048, 16384),
    dtypes=tuple(d.name for d in DTYPES if d.gpu_calibrated),
    repeats=10,
)
QUICK_SHAPES = Shapes(
    tokens=(1, 8, 32),
    weights=((64, 64), (64, 256)),
    squares=(32, 64),
    elements=(1 << 10, 1 << 14),
    sequences=(16, 32),
    vocab=512,
    dim=64,
    loss_tokens=(8, 32),
    dtypes=("float32",),
    repeats=3,
)


Timed = Callable[[Callable[[], Any], int], float]  # (fn, repeats) -> median seconds


def timer(torch: Any, device: str, warmup: int = 3) -> Timed:
    """``timed(fn, reps)``: the median seconds of ``fn`` over ``reps`` runs after ``warmup`` ones,
    by CUDA events on a GPU (what the curves were measured with), by the wall clock on a CPU."""

    def timed(fn: Callable[[], Any], reps: int) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            if device == "cuda":
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
            else:
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
        return statistics.median(times)

    return timed


def measure_rows(device: str = "cuda", quick: bool = False) -> list[dict[str, Any]]:
    """The curves of ``device`` as rows (the carried curves' format). Minutes on a GPU with the
    full shapes; ``quick`` measures a few small shapes (seconds), for checks."""
    import torch

    shapes = QUICK_SHAPES if quick else SHAPES
    timed = timer(torch, device)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    # The ops between the products run in bf16 on a GPU (fp32 in a quick check): (dtype, bytes).
    work = (torch.float32, 4) if quick else (torch.bfloat16, 2)
    return [
        {"kind": "info", "gpu": name, "torch": torch.__version__},
        *_launch_rows(torch, device, timed, 200 if quick else 2000),
        *_matmul_rows(torch, device, timed, shapes),
        *_elementwise_rows(torch, device, timed, shapes, work),
        *_attention_rows(torch, device, timed, shapes, work[0], (4, 16) if quick else (32, 128)),
        *_vocabulary_rows(torch, device, timed, shapes, work[0]),
    ]


def _launch_rows(torch: Any, device: str, timed: Timed, n: int) -> list[dict[str, Any]]:
    """One tiny op's cost ``n`` times over: back to back on the device, and the host's wall time."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    x = torch.ones(1, device=device)
    per = timed(lambda: [torch.add(x, x) for _ in range(n)], 3) / n
    rows = [{"kind": "overhead", "what": "add 1 element, back to back", "per_op_s": per}]
    sync()
    start = time.perf_counter()
    for _ in range(n):
        torch.add(x, x)
    sync()
    rows.append({"kind": "overhead", "what": "host wall per tiny op", "per_op_s": (time.perf_counter() - start) / n})
    return rows


def _matmul_rows(torch: Any, device: str, timed: Timed, shapes: Shapes) -> list[dict[str, Any]]:
    """``F.linear`` of each weight (k, n) at each token count, then the squares, per dtype."""
    import torch.nn.functional as F

    rows: list[dict[str, Any]] = []
    for dtype_name in shapes.dtypes:
        dtype = getattr(torch, str(dtype_name))
        for tokens in shapes.tokens:
            for k, m in shapes.weights:
                a = torch.randn(tokens, k, device=device, dtype=dtype)
                w = torch.randn(m, k, device=device, dtype=dtype)
                s = timed(lambda: F.linear(a, w), shapes.repeats)
                flops = 2 * tokens * k * m
                rows.append(
                    {"kind": "matmul", "dtype": dtype_name, "m": tokens, "k": k, "n": m, "flops": flops, "s": s}
                )
        for sq in shapes.squares:
            a = torch.randn(sq, sq, device=device, dtype=dtype)
            s = timed(lambda: a @ a, shapes.repeats)
            rows.append({"kind": "matmul", "dtype": dtype_name, "m": sq, "k": sq, "n": sq, "flops": 2 * sq**3, "s": s})
    return rows


def _elementwise_rows(
    torch: Any, device: str, timed: Timed, shapes: Shapes, work: tuple[Any, int]
) -> list[dict[str, Any]]:
    """Each elementwise and normalisation op by its elements, with the bytes it moves."""
    import torch.nn.functional as F

    dtype, size = work
    rows: list[dict[str, Any]] = []
    for numel in shapes.elements:
        width = min(int(numel), shapes.dim)
        t = torch.randn(max(int(numel) // width, 1), width, device=device, dtype=dtype)
        u = torch.randn_like(t)
        ones = torch.ones(width, device=device, dtype=dtype)
        for op, fn, moved in (
            ("add", lambda: t + u, 3),
            ("mul_scalar", lambda: t * 2.0, 2),
            ("gelu", lambda: F.gelu(t), 2),
            ("silu", lambda: F.silu(t), 2),
            ("softmax", lambda: torch.softmax(t, -1), 2),
            ("layer_norm", lambda: F.layer_norm(t, t.shape[-1:], ones, ones), 2),
            ("rms_norm", lambda: F.rms_norm(t, t.shape[-1:], ones), 2),
            ("copy", lambda: t.clone(), 2),
        ):
            s = timed(fn, shapes.repeats)
            rows.append(
                {"kind": "elementwise", "op": op, "numel": t.numel(), "bytes": moved * t.numel() * size, "s": s}
            )
    return rows


def _attention_rows(
    torch: Any, device: str, timed: Timed, shapes: Shapes, dtype: Any, heads_dim: tuple[int, int]
) -> list[dict[str, Any]]:
    """Causal and full SDPA at each sequence, scaled to the curves' 32 heads of 128."""
    import torch.nn.functional as F

    heads, head_dim = heads_dim
    rows: list[dict[str, Any]] = []
    for seq in shapes.sequences:
        q = torch.randn(1, heads, seq, head_dim, device=device, dtype=dtype)
        for causal in (True, False):
            s = timed(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=causal), shapes.repeats)
            scale = (32 * 128) / (heads * head_dim)  # the curves are per 32 heads of 128
            rows.append(
                {"kind": "attention", "seq": seq, "heads": 32, "head_dim": 128, "causal": causal, "s": s * scale}
            )
    return rows


def _vocabulary_rows(torch: Any, device: str, timed: Timed, shapes: Shapes, dtype: Any) -> list[dict[str, Any]]:
    """The embedding lookup and the cross-entropy over the vocabulary at each token count."""
    import torch.nn.functional as F

    vocab, dim = shapes.vocab, shapes.dim
    emb = torch.randn(vocab, dim, device=device, dtype=dtype)
    rows: list[dict[str, Any]] = []
    for tokens in shapes.loss_tokens:
        ids = torch.randint(0, vocab, (tokens,), device=device)
        s = timed(lambda: F.embedding(ids, emb), shapes.repeats)
        rows.append({"kind": "embedding", "tokens": tokens, "dim": dim, "s": s})
        logits = torch.randn(tokens, vocab, device=device, dtype=dtype)
        s = timed(lambda: F.cross_entropy(logits.float(), ids), max(3, shapes.repeats // 2))
        rows.append({"kind": "cross_entropy", "tokens": tokens, "vocab": vocab, "s": s})
    return rows


def _memory_bytes(device: str) -> int:
    import torch

    if device == "cuda":
        return int(torch.cuda.get_device_properties(0).total_memory)
    return host_memory_bytes()


def _measure(device: str, quick: bool) -> tuple[list[dict[str, Any]], int]:
    return measure_rows(device, quick), _memory_bytes(device)


def calibrate_gpu(
    name: str,
    timeout_s: float = 900.0,
    device: str = "cuda",
    quick: bool = False,
    link_bandwidth_bytes_per_s: float = 450e9,
    link_latency_s: float = 2e-6,
) -> DeviceProfile:
    """Measure ``device`` in a fresh worker (at most ``timeout_s``) into a profile called ``name``:
    its kernel curves, priced as the GPU presets are. The link between GPUs is the node's
    datasheet figure (NVLink 4 by default) until NCCL collectives are measured."""
    from partitioner.processes.worker import run_in_worker
    from partitioner.profiles import profile_from_kernels
    from partitioner.profiles.build import from_rows

    load = load_now()  # before the measurement's own load
    rows, memory = run_in_worker(_measure, (device, quick), timeout_s, f"the {device} kernel measurement")
    kernels = from_rows(rows, source=f"measured by partition-explorer calibrate --gpu on {rows[0].get('gpu', device)}")
    profile = profile_from_kernels(name, memory, kernels, link_bandwidth_bytes_per_s, link_latency_s)
    import dataclasses

    return dataclasses.replace(
        profile,
        measured_at=utc_now(),
        load_average=load,
        host=socket.gethostname(),
        backend="nccl" if device == "cuda" else "gloo",
    )
