"""A graph's size is known from its config and refused above the cap before anything is built
(NOTE: [Graph size caps]): the sample models' operation counts equal their traces; hf: configs
are refused by their layer count."""

from __future__ import annotations

import random

import pytest

import sample_models
from sample_models import _hf, _registry
from sample_models._common import HF_OPS_PER_LAYER, MAX_GRAPH_OPS
from sample_models._loading import GRAPH_OPS, graph_ops

SMALL = {  # ranges of each repeating field small enough to trace in well under a second
    "mlp": {"n_layer": (1, 12)},
    "cnn": {"n_stage": (1, 3), "blocks_per_stage": (1, 3)},
    "transformer": {"n_layer": (1, 4)},
    "dlrm": {"n_tables": (1, 6), "n_mlp_layer": (1, 4)},
    "unet": {"depth": (1, 3)},
    "moe": {"n_layer": (1, 3), "n_experts": (1, 6)},
    "gpt2_small": {"n_layer": (1, 2)},
}
OTHER = {"transformer": {"tie_weights": False, "bias": False}, "mlp": {"bias": False}, "moe": {"top_k": 1}}


def test_every_sample_model_has_a_count():
    assert sorted(GRAPH_OPS) == sorted(sample_models.names()) == sorted(SMALL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_count_from_the_config_equals_the_trace(name):
    rng = random.Random(name)
    for trial in range(2):
        overrides = {f: rng.randint(lo, hi) for f, (lo, hi) in SMALL[name].items()}
        if name == "gpt2_small":
            overrides.update(n_embd=48, n_head=2, vocab_size=100, block_size=16, seq_len=8)
        if trial:
            overrides.update(OTHER.get(name, {}))
        if name == "moe":
            overrides["top_k"] = min(overrides.get("top_k", 2), overrides["n_experts"])
        loaded = sample_models.load(name, overrides)
        graph = sample_models.trace_loaded(name, overrides, loaded, name)
        assert graph_ops(name, overrides) == len(graph.nodes), overrides


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("mlp", {"n_layer": 100_000_000, "hidden": 1}),
        ("mlp", {"n_layer": 20_000, "hidden": 1, "in_features": 1, "out_features": 1}),
        ("moe", {"n_layer": 100, "n_experts": 100}),
        ("cnn", {"n_stage": 2, "blocks_per_stage": 10_000_000}),
    ],
)
def test_a_sample_model_over_the_cap_is_refused_before_it_is_built(name, overrides, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("built")

    monkeypatch.setattr(_registry, "build", never)
    with pytest.raises(
        sample_models.ModelSpecError,
        match=rf"would trace [\d,]+ operations; .* up to "
        rf"{MAX_GRAPH_OPS:,} operations.*lower ",
    ):
        sample_models.load(name, overrides)
    assert graph_ops(name, overrides) > MAX_GRAPH_OPS


def test_a_sample_model_at_the_cap_is_built():
    n = (MAX_GRAPH_OPS - 1) // 2
    assert graph_ops("mlp", {"n_layer": n}) <= MAX_GRAPH_OPS < graph_ops("mlp", {"n_layer": n + 1})


@pytest.mark.parametrize(
    "spec, overrides, layers",
    [
        ("hf:gpt2", {"n_layer": 2000}, 2000),
        ("hf:llama", {"num_hidden_layers": 100_000_000}, 100_000_000),
        ("hf:t5", {"num_layers": 100}, 200),  # encoder and decoder
        ("hf:llama-3-70b", {"num_hidden_layers": 161}, 161),
    ],
)
def test_an_hf_config_over_the_cap_is_refused_before_it_is_built(spec, overrides, layers, monkeypatch):
    transformers = pytest.importorskip("transformers")

    def never(*args, **kwargs):
        raise AssertionError("built")

    for auto in ("AutoModelForCausalLM", "AutoModelForSeq2SeqLM", "AutoModel"):
        monkeypatch.setattr(getattr(transformers, auto), "from_config", never)
    # Above 1024 a single field is refused first (no real model has more), else the total of layers.
    rule = (
        rf"must be at most 1024 \(got {layers}\)"
        if layers > 1024
        else rf"with {layers:,} layers in all .* at most {MAX_GRAPH_OPS // HF_OPS_PER_LAYER} layers"
    )
    with pytest.raises(sample_models.ModelSpecError, match=rule):
        sample_models.load(spec, overrides)


def test_the_largest_presets_are_within_the_cap():
    transformers = pytest.importorskip("transformers")
    for preset in ("llama-3-70b", "gpt2-xl", "t5-base"):
        model_type, fields = _hf.PRESETS[preset]
        config = transformers.AutoConfig.for_model(model_type, **fields)
        assert 0 < _hf.layer_count(config) * HF_OPS_PER_LAYER <= MAX_GRAPH_OPS


@pytest.mark.slow
@pytest.mark.parametrize(
    "model_type, field",
    [
        ("llama", "num_hidden_layers"),
        ("gpt2", "n_layer"),
        ("mixtral", "num_hidden_layers"),
        ("qwen2_moe", "num_hidden_layers"),
        ("bert", "num_hidden_layers"),
    ],
)
def test_an_hf_layer_traces_to_at_most_the_stated_operations(model_type, field):
    pytest.importorskip("transformers")
    counts = []
    for n in (1, 3):
        overrides = {field: n}
        graph = sample_models.trace_loaded(
            f"hf:{model_type}", overrides, sample_models.load(f"hf:{model_type}", overrides), "m"
        )
        counts.append(len(graph.nodes))
    assert 0 < (counts[1] - counts[0]) / 2 <= HF_OPS_PER_LAYER
