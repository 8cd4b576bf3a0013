"""Predictions held against the GPU benchmark's measurements (bench/results: bench_gpu.py on a
real H100 80GB HBM3 and H200, torch 2.11, CUDA events), and the rule for unaligned products that
those measurements showed (NOTE: [Unaligned matrix products] in partitioner.kernels)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from partitioner.kernels import UNALIGNED_MATMUL_SHARE, KernelOp, backward_times, fused_s
from partitioner.profiles import gpu_kernels

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
ROW = re.compile(r"^(\S+)\s+(forward|train|decode)\s+(\d+) x\s+(\d+)\s+predicted\s+\S+ ms\s+measured\s+(\S+) ms")


def _measured(file: str) -> dict[tuple[str, str, int, int], float]:
    out = {}
    for line in (RESULTS / file).read_text().splitlines():
        if m := ROW.match(line):
            out[(m[1], m[2], int(m[3]), int(m[4]))] = float(m[5]) * 1e-3
    return out


@pytest.mark.parametrize("card", ["h100-80gb", "h200-141gb"])
def test_a_product_off_the_16_byte_multiple_runs_at_the_measured_fallback_rate(card):
    k = gpu_kernels(card)
    head = KernelOp("matmul", "bfloat16", m=16384, k=1600, n=50257)  # GPT-2's vocabulary head
    padded = KernelOp("matmul", "bfloat16", m=16384, k=1600, n=50304)  # nanoGPT's padded vocabulary
    fallback = 2 * 16384 * 1600 * 50257 / (UNALIGNED_MATMUL_SHARE * k.best_flops("bfloat16"))
    assert k.kernel_s(head) >= fallback > 5 * k.kernel_s(padded)
    # measured on the H100: 26.9 ms for this product (cutlass's sm75 kernel), 3.8 ms by the aligned curves
    assert 20e-3 < k.kernel_s(head) < 34e-3
    # fp32 runs no tensor-core kernel either way; an aligned bf16 product pays nothing
    assert k.unaligned_floor_s(KernelOp("matmul", "float32", m=16384, k=1600, n=50257)) == 0.0
    assert k.unaligned_floor_s(padded) == 0.0
    # the "graphs" engine pads (vLLM, Inductor): the head costs what the padded one does
    assert fused_s(k, head, k.kernel_s(head)) == pytest.approx(k.kernel_s(padded), rel=0.01)
    (_, eager_back), (_, graphs_back) = backward_times([head], k)[0], backward_times([head], k, padded=True)[0]
    assert eager_back > 3 * graphs_back


CASES = [  # forwards with thousands of tokens: GPU-bound, where the kernels decide
    ("bench_gpu_h100.txt", "h100-80gb", "gpt2-xl", dict(n_layer=8), 16, 1024),
    ("bench_gpu_h100.txt", "h100-80gb", "gpt2-xl", dict(n_layer=8), 2, 1024),
    ("bench_gpu_h100.txt", "h100-80gb", "llama-3-8b", dict(num_hidden_layers=4), 2, 4096),
    ("bench_gpu_h200.txt", "h200-141gb", "gpt2-xl", dict(n_layer=8), 16, 1024),
    ("bench_gpu_h200.txt", "h200-141gb", "llama-3-8b", dict(num_hidden_layers=4), 1, 2048),
]


@pytest.mark.slow
@pytest.mark.parametrize(("file", "card", "model", "layers", "batch", "seq"), CASES)
def test_a_real_size_forward_is_predicted_within_15_percent_of_the_gpu(file, card, model, layers, batch, seq):
    pytest.importorskip("transformers")
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_gpu
    finally:
        sys.path.remove(str(ROOT / "bench"))
    measured = _measured(file)[(model, "forward", batch, seq)]
    predicted, assumes = bench_gpu._predict(model, layers, "forward", batch, seq, card, "eager", None, 16)
    assert abs(predicted / measured - 1) < 0.15, (predicted, measured)
    assert "eager PyTorch" in assumes
