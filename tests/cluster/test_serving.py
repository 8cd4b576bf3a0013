"""Serving priced as the serving engines serve (partitioner.cluster.serving): the engine they run
unless one is named, chunked prefill, a paged KV cache in the engine's share of memory, the
bottleneck label against the parts it shows, FP8 at 1 byte and at the FP8 rate."""

from __future__ import annotations

import math

import pytest

import sample_models
from partitioner import cluster
from partitioner.cluster.hardware import GPU_MEMORY_UTILIZATION, KV_BLOCK_TOKENS, serving_chunk_tokens
from partitioner.cluster.serving import TOKEN_PARTS, prefill_chunks, serving_accelerator
from partitioner.pipeline.steps import step_simulator


@pytest.fixture
def llama(llama_4_layers):
    """Llama-3-8B's block at Meta's widths, 4 layers (conftest.py: traced once a session)."""
    return llama_4_layers


def _serve(p, acc="h100-80gb", batch=1, seq=1024, generate=16, tp=1, pp=1, element_bytes=2):
    w = cluster.Workload("inference", batch, seq, element_bytes=element_bytes, generate_tokens=generate)
    return cluster.evaluate(p, w, cluster.cluster(acc), cluster.Layout(tp=tp, pp=pp), None)


def test_serving_runs_the_serving_engines_engine_unless_one_is_named(llama):
    plain, eager, graphs = (_serve(llama, a) for a in ("h100-80gb", "h100-80gb@eager", "h100-80gb@graphs"))
    assert plain.extra["seconds_per_token"] == pytest.approx(graphs.extra["seconds_per_token"])
    assert eager.extra["seconds_per_token"] > 2 * plain.extra["seconds_per_token"]  # the host's launches
    assert plain.assumes[0].startswith("engine: CUDA graphs") and "@eager" in plain.assumes[0]
    assert eager.assumes[0] == "engine: eager (as named)"
    assert not cluster.cluster("h100-80gb").accelerator.engine_chosen
    assert serving_accelerator(cluster.cluster("h100-80gb@eager").accelerator).engine == "eager"


def test_training_keeps_the_engine_it_is_given(llama):
    w = cluster.Workload("training", 8, 1024, optimizer="adam")
    step = {
        a: cluster.evaluate(llama, w, cluster.cluster(a), cluster.Layout(dp=8), step_simulator()).step_s
        for a in ("h100-80gb", "h100-80gb@eager", "h100-80gb@graphs")
    }
    assert step["h100-80gb"] == step["h100-80gb@eager"] and step["h100-80gb@graphs"] < step["h100-80gb"]


@pytest.mark.parametrize(
    "acc, batch, seq, tp, element_bytes, label",
    [
        ("h100-80gb@eager", 1, 1024, 1, 2, "launch"),  # about 2,000 launches a token from Python
        ("h100-80gb", 1, 1024, 1, 2, "weights"),  # one sequence: the weights' read
        ("h200-141gb", 64, 32768, 1, 2, "KV cache"),  # long contexts: the cache's read
        ("h100-80gb", 4, 128, 8, 1, None),
        ("h200-141gb", 256, 512, 2, 1, None),
    ],
)
def test_the_label_names_the_largest_of_the_parts_it_shows(llama, acc, batch, seq, tp, element_bytes, label):
    r = _serve(llama, acc, batch, seq, tp=tp, element_bytes=element_bytes)
    token = {k: r.parts_s[f"{k} per token"] for k in TOKEN_PARTS}
    assert sum(token.values()) == pytest.approx(r.extra["seconds_per_token"])
    assert r.fits and r.limit in TOKEN_PARTS and token[r.limit] == max(token.values())
    if label:
        assert r.limit == label
    if "@eager" not in acc:
        assert token["launch"] == 0.0


def test_prefill_goes_in_chunks_of_the_engines_default(llama):
    acc = cluster.cluster("h200-141gb").accelerator
    assert serving_chunk_tokens(acc) == 8192 and serving_chunk_tokens(cluster.cluster("a100-80gb").accelerator) == 2048
    assert prefill_chunks(20000, 8192) == [(8192.0, 2), (3616.0, 1)] and prefill_chunks(100, 8192) == [(100.0, 1)]
    one, many = _serve(llama, "h200-141gb", 1, 8192), _serve(llama, "h200-141gb", 32, 8192)
    # A pass's activations are a chunk's whatever the batch; the first token of one prompt is its
    # one pass, of many the mean over them (the last comes after the whole prefill).
    assert many.memory["activations"] == one.memory["activations"]
    assert many.extra["prefill_passes"] == 32 and one.extra["prefill_passes"] == 1
    assert one.step_s == pytest.approx(one.extra["prefill_s"])
    assert many.step_s == pytest.approx(many.extra["prefill_s"] * 16.5 / 32)
    small = _serve(llama, "h200-141gb", 1, 512)
    assert small.memory["activations"] == pytest.approx(one.memory["activations"] * 512 / 8192)


def test_pipeline_stages_overlap_the_chunks(llama):
    flat, piped = _serve(llama, batch=8, seq=8192, pp=1), _serve(llama, batch=8, seq=8192, pp=2)
    passes = piped.extra["prefill_passes"]
    stage = piped.parts_s["prefill compute"] / passes / 2
    assert piped.extra["prefill_s"] == pytest.approx((passes + 1) * stage)
    assert piped.extra["prefill_s"] < flat.extra["prefill_s"]


def test_the_kv_cache_is_paged_in_the_engines_share_of_memory(llama):
    r = _serve(llama, "h100-80gb", batch=4, seq=1000, generate=10)
    blocks = math.ceil(1010 / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    assert r.memory["kv_cache"] == pytest.approx(4 * blocks * llama.kv_bytes_per_token)
    acc = cluster.cluster("h100-80gb").accelerator
    assert r.memory["headroom"] == pytest.approx((1 - GPU_MEMORY_UTILIZATION) * acc.memory_bytes)
    room = GPU_MEMORY_UTILIZATION * acc.memory_bytes - r.memory["weights"] - r.memory["activations"]
    assert r.extra["kv_cache_sequences"] == pytest.approx(room / (blocks * llama.kv_bytes_per_token))


def test_llama_70b_with_32_users_of_8k_fits_two_h200s():
    """Llama-3-70B (80 layers, traced once a block), 32 prompts of 8,192 tokens: chunked prefill
    keeps one pass's activations, so it fits tensor-parallel over 2 H200s in bf16 (where a prefill
    of the whole batch kept 95 GiB of activations a GPU), and one H200 in FP8."""
    spec, overrides = "hf:llama-3-70b", {"dtype": "bf16"}
    p = cluster.profile(sample_models.trace_loaded(spec, overrides, sample_models.load(spec, overrides), spec))
    assert _serve(p, "h200-141gb", 32, 8192, 256, tp=2).fits
    assert not _serve(p, "h200-141gb", 32, 8192, 256, tp=1).fits
    fp8 = _serve(p, "h200-141gb", 32, 8192, 256, tp=1, element_bytes=1)
    assert fp8.fits and fp8.memory["weights"] == pytest.approx(p.param_count)


def test_the_collectives_table_follows_the_chunks(llama):
    w = cluster.Workload("inference", 4, 4096, generate_tokens=8)
    c, lay = cluster.cluster("h100-80gb"), cluster.Layout(tp=4, pp=2)
    rows = cluster.collectives(llama, w, c, lay)
    prefill = [r for r in rows if r.phase == "prefill"]
    assert sum(r.count for r in prefill if r.group == "tp") == 2 * llama.layers * 2  # two passes of 8192
    assert sum(r.count for r in prefill if r.group == "pp") == 2
    r = cluster.evaluate(llama, w, c, lay, None)
    each = sum(row.seconds for row in rows if row.phase == "each token")
    assert each == pytest.approx(r.parts_s["communication per token"])
