"""Hugging Face config fields of the wrong type or range are the project's clear error
(ModelSpecError, a LoaderError) before any model is built: transformers' own type checks where it
has them, the project's range and rope checks where it does not."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sample_models
from partitioner import PartitionError
from sample_models._user import LoaderError, ModelSpecError

pytest.importorskip("transformers")

GPT2 = {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64, "n_positions": 32}
LLAMA = {
    "num_hidden_layers": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 64,
}
VIT = {
    "num_hidden_layers": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "image_size": 32,
    "patch_size": 8,
}
BASE = {"hf:gpt2": GPT2, "hf:llama": LLAMA, "hf:vit": VIT}

CASES = [
    ("hf:gpt2", "n_head", 0, r"n_head must be at least 1 \(got 0\)"),
    ("hf:gpt2", "n_embd", 0, r"n_embd must be at least 1 \(got 0\)"),
    ("hf:gpt2", "vocab_size", 0, r"vocab_size must be at least 1 \(got 0\)"),
    ("hf:gpt2", "num_attention_heads", 0, r"num_attention_heads \(n_head\) must be at least 1 \(got 0\)"),
    ("hf:llama", "num_attention_heads", 0, r"num_attention_heads must be at least 1 \(got 0\)"),
    ("hf:llama", "hidden_size", -4, r"hidden_size must be at least 1 \(got -4\)"),
    ("hf:vit", "patch_size", 0, r"patch_size must be at least 1 \(got 0\)"),
    ("hf:gpt2", "n_layer", "two", r"config refused a field .*'n_layer' expected int, got str \(value: 'two'\)"),
    ("hf:llama", "vocab_size", 1.5, r"config refused a field .*vocab_size"),
    ("hf:llama", "rope_parameters", '{"rope_type": "bogus"}', r"rope_type must be one of .*\(got 'bogus'\)"),
    ("hf:llama", "rope_parameters", 5, r"config refused a field .*rope_parameters"),
    (
        "hf:gpt2",
        "activation_function",
        "gelu_neww",
        r"must name an activation .*\(got 'gelu_neww'\); did you mean gelu_new",
    ),
    ("hf:gpt2", "n_layer", 10**6, r"n_layer must be at most 1024 \(got 1000000\)"),
    ("hf:llama", "quantization_config", '{"quant_method": "bitsandbytes"}', r"no config field 'quantization_config'"),
]


@pytest.mark.parametrize("spec, field, value, message", CASES, ids=[f"{c[0]} {c[1]}={c[2]}" for c in CASES])
def test_bad_fields_are_refused_before_the_model_is_built(spec, field, value, message):
    with pytest.raises(ModelSpecError if "config field" not in message else LoaderError, match=message) as info:
        sample_models.load(spec, {**BASE[spec], field: value})
    assert f"{spec}" in str(info.value)


def test_dict_fields_are_hashable_overrides_and_still_build():
    """A dict-valued field (the app keys its cache by the overrides) stays hashable as JSON text
    and reaches transformers as the dict."""
    overrides = sample_models.parse_overrides("hf:llama", ['rope_parameters={"rope_type": "linear", "factor": 2.0}'])
    hash(tuple(sorted(overrides.items())))
    assert (
        sample_models.label("hf:llama", overrides) == 'hf:llama(rope_parameters={"factor": 2.0, "rope_type": "linear"})'
    )
    model, _, _ = sample_models.load("hf:llama", {**LLAMA, **overrides})
    assert model.config.rope_parameters["factor"] == 2.0


FIELDS = {
    "hf:gpt2": [
        "n_layer",
        "n_embd",
        "n_head",
        "vocab_size",
        "n_positions",
        "n_inner",
        "attn_pdrop",
        "layer_norm_epsilon",
        "activation_function",
    ],
    "hf:llama": [
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "head_dim",
        "rms_norm_eps",
        "rope_parameters",
        "max_position_embeddings",
    ],
}
VALUES = st.sampled_from(
    [
        0,
        -1,
        1,
        3,
        2**40,
        1.5,
        -0.5,
        math.nan,
        math.inf,
        True,
        None,
        "",
        "x",
        "4",
        [],
        '{"rope_type": "yarn"}',
        '{"rope_type": "linear", "factor": "x"}',
        '{"a": 1}',
        "[1]",
    ]
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_mutated_config_fields_never_reach_the_bug_message(data):
    """Load and trace tiny models with one field set to a hostile value: either a graph or the
    project's error (LoaderError or PartitionError), never another exception."""
    spec = data.draw(st.sampled_from(sorted(FIELDS)))
    field = data.draw(st.sampled_from(FIELDS[spec]))
    value = data.draw(VALUES)
    overrides = {**BASE[spec], field: value}
    try:
        loaded = sample_models.load(spec, overrides)
        sample_models.trace_loaded(spec, overrides, loaded, spec)
    except (LoaderError, PartitionError):
        pass
