"""FP8 for real: weights and KV cache at 1 byte, FP8 matrix products at the card's FP8 rate
(derived from the bf16 curves by the datasheet's ratio: NOTE: [FP8 from the bf16 curves] in
partitioner.kernels), and FP8 training holding bf16 weights and fp32 master and state (torchtitan's
float8, Transformer Engine)."""

from __future__ import annotations

import pytest

from partitioner import cluster
from partitioner.cluster.hardware import ACCELERATORS
from partitioner.cost.training import StateBytes, state_bytes
from partitioner.gpu_kernels_json import gpu_kernels_from_json, gpu_kernels_to_json
from partitioner.hardware import HARDWARE
from partitioner.kernels import KernelOp


@pytest.fixture
def llama(llama_4_layers):
    """Llama-3-8B's block at Meta's widths, 4 layers (conftest.py: traced once a session)."""
    return llama_4_layers


@pytest.mark.parametrize("card", ["h100-80gb", "h200-141gb", "b200-192gb", "mi300x-192gb"])
def test_fp8_products_run_at_the_datasheets_ratio_of_the_bf16_curves(card):
    kernels = ACCELERATORS[card].kernels
    ratio = HARDWARE[card].peak_for("float8") / HARDWARE[card].peak_for("bfloat16")
    assert ratio == pytest.approx(2.0, rel=0.01)
    for m, k, n in ((1, 4096, 6144), (64, 8192, 8192), (8192, 4096, 14336)):
        bf16 = kernels.kernel_s(KernelOp("matmul", "bfloat16", m, k, n))
        fp8 = kernels.kernel_s(KernelOp("matmul", "float8_e4m3fn", m, k, n))
        assert fp8 == pytest.approx(bf16 / ratio, rel=1e-6)
    assert kernels.best_flops("fp8") == pytest.approx(ratio * kernels.best_flops("bfloat16"))
    assert gpu_kernels_from_json(gpu_kernels_to_json(kernels)).derived_dtypes == kernels.derived_dtypes


def test_a_card_without_fp8_keeps_bf16_speed():
    kernels = ACCELERATORS["a100-80gb"].kernels
    assert not kernels.derived_dtypes
    op = dict(m=512, k=4096, n=4096)
    assert kernels.kernel_s(KernelOp("matmul", "float8_e4m3fn", **op)) == kernels.kernel_s(
        KernelOp("matmul", "bfloat16", **op)
    )
    assert ACCELERATORS["a100-80gb"].peak_for("fp8") == ACCELERATORS["a100-80gb"].peak_flops
    assert ACCELERATORS["h100-80gb"].peak_for("fp8") == 1979e12
    assert ACCELERATORS["h100-80gb"].peak_for("fp32") == ACCELERATORS["h100-80gb"].peak_for(None) == 989e12


def test_a_card_rated_anew_prices_fp8_at_its_own_peak():
    """The datasheet's FP8 figure belongs to the card it rates: a peak overridden (the sidebar's
    custom device on the cluster planner) floors FP8 at that peak, and a card of one's own too."""
    rated = cluster.cluster("h100-80gb", overrides={"name": "custom", "peak_flops": 5e14}).accelerator
    assert rated.peak_for("fp8") == 5e14 and rated.kernels is None
    priced = cluster.cluster("h100-80gb", overrides={"memory_bytes": 70 * 2**30, "price_per_hour": 1.0}).accelerator
    assert priced.peak_for("fp8") == 1979e12 and priced.card.link == "nvlink4" and priced.price_per_hour == 1.0
    assert cluster.Accelerator.custom("toy", 2**30, 1e12, 1e11).peak_for("fp8") == 1e12


def test_fp8_serving_reads_one_byte_a_weight_and_a_cached_value(llama):
    c = cluster.cluster("h100-80gb")
    runs = {
        b: cluster.evaluate(llama, cluster.Workload("inference", 1, 1024, element_bytes=b), c, cluster.Layout(), None)
        for b in (2, 1)
    }
    bf16, fp8 = runs[2], runs[1]
    assert fp8.memory["weights"] == pytest.approx(llama.param_count)  # every parameter, one byte each
    assert bf16.memory["weights"] == pytest.approx(2 * llama.param_count)
    assert fp8.memory["kv_cache"] == pytest.approx(bf16.memory["kv_cache"] / 2)
    assert fp8.extra["weights_read_s_per_token"] == pytest.approx(bf16.extra["weights_read_s_per_token"] / 2)
    assert fp8.extra["seconds_per_token"] < 0.6 * bf16.extra["seconds_per_token"]  # was equal: issue 52
    assert fp8.memory["activations"] == bf16.memory["activations"]  # between the products: bf16
    assert any(a.startswith("FP8: weights and KV cache at 1 byte; FP8 products") for a in fp8.assumes)


def test_fp8_prefill_runs_at_the_fp8_rate(llama):
    c = cluster.cluster("h100-80gb")
    w = {b: cluster.Workload("inference", 16, 8192, element_bytes=b, generate_tokens=1) for b in (2, 1)}
    bf16, fp8 = (cluster.evaluate(llama, w[b], c, cluster.Layout(), None) for b in (2, 1))
    assert fp8.extra["prefill_compute_floor_s"] == pytest.approx(bf16.extra["prefill_compute_floor_s"] / 2, rel=0.01)
    assert fp8.parts_s["prefill compute"] < 0.75 * bf16.parts_s["prefill compute"]


def test_fp8_training_keeps_bf16_weights_and_fp32_master_and_state():
    """torchtitan's float8 and Transformer Engine cast to FP8 inside the products only."""
    assert state_bytes("adam", 1) == StateBytes(2, 2, 4, 8) == state_bytes("adam", 2)
    assert state_bytes("sgd", 1) == state_bytes("sgd", 2)
    assert state_bytes(None, 1) == StateBytes(1)  # FP8 inference: the weights at one byte


def test_fp8_training_counts_every_parameter(llama):
    w8, w16 = (cluster.Workload("training", 8, 1024, element_bytes=b, optimizer="adam") for b in (1, 2))
    c, lay = cluster.cluster("h100-80gb"), cluster.Layout(dp=8)
    from partitioner.pipeline.steps import step_simulator

    r8, r16 = (cluster.evaluate(llama, w, c, lay, step_simulator()) for w in (w8, w16))
    for part in ("weights", "gradients", "optimizer"):
        assert r8.memory[part] == pytest.approx(r16.memory[part])
    assert r8.step_s < r16.step_s  # the products at the FP8 rate
