"""``--set rope_theta=...`` and ``rope_scaling`` on models whose transformers 5 config keeps its rotary
settings in ``rope_parameters`` (NOTE: [Rope fields in transformers 5]): accepted, folded into the
built model's rotary frequencies, refused with the fix where they cannot apply."""

from __future__ import annotations

import copy

import pytest
import torch

import sample_models
from sample_models import ModelSpecError

pytest.importorskip("transformers")

# fp32: the frequencies are compared exactly (a preset is otherwise built in its published bf16)
SMALL = {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "dtype": "fp32"}


def _inv_freq(theta: float, dim: int = 16) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


@pytest.mark.parametrize("spec", ["hf:llama-3-8b", "hf:llama", "hf:llama-3.1-405b", "hf:mistral-7b"])
def test_rope_theta_set_on_the_command_line_reaches_the_rotary_frequencies(spec):
    overrides = {**sample_models.parse_overrides(spec, ["rope_theta=250000"]), **SMALL, "vocab_size": 300}
    model, _, _ = sample_models.load(spec, overrides)
    assert model.config.rope_parameters["rope_theta"] == 250000
    if spec != "hf:llama-3.1-405b":  # its llama3 scaling changes the low frequencies
        torch.testing.assert_close(model.model.rotary_emb.inv_freq, _inv_freq(250000.0))


def test_the_presets_own_rope_theta_is_the_default_and_a_set_one_wins():
    model, _, _ = sample_models.load("hf:llama-3-8b", {**SMALL, "vocab_size": 300})
    torch.testing.assert_close(model.model.rotary_emb.inv_freq, _inv_freq(500000.0))
    model, _, _ = sample_models.load("hf:llama-3-8b", {**SMALL, "vocab_size": 300, "rope_theta": 10000})
    torch.testing.assert_close(model.model.rotary_emb.inv_freq, _inv_freq(10000.0))


def test_rope_scaling_given_as_json_text_is_folded_in_beside_the_theta():
    overrides = sample_models.parse_overrides("hf:llama-3-8b", ['rope_scaling={"rope_type": "linear", "factor": 4.0}'])
    model, _, _ = sample_models.load("hf:llama-3-8b", {**overrides, **SMALL, "vocab_size": 300})
    assert model.config.rope_parameters == {"rope_type": "linear", "factor": 4.0, "rope_theta": 500000.0}
    torch.testing.assert_close(model.model.rotary_emb.inv_freq, _inv_freq(500000.0) / 4.0)


@pytest.mark.parametrize("value", ["-1", "0", "abc", "true"])
def test_a_rope_theta_that_is_no_positive_number_is_refused_with_an_example(value):
    overrides = sample_models.parse_overrides("hf:llama", [f"rope_theta={value}", "num_hidden_layers=1"])
    with pytest.raises(ModelSpecError, match=r"rope_theta must be a positive number .*e\.g\. rope_theta=500000"):
        sample_models.load("hf:llama", overrides)


def test_a_model_without_rotary_settings_still_refuses_rope_theta():
    with pytest.raises(ValueError, match="has no config field 'rope_theta'"):
        sample_models.load("hf:gpt2", {"rope_theta": 10000, "n_layer": 1})


def test_loading_a_preset_leaves_its_fields_as_written():
    from sample_models._hf import PRESETS

    written = copy.deepcopy(PRESETS["llama-3.1-405b"])
    for theta in (500000, 250000):  # transformers wrote the first theta into the preset's rope_scaling
        model, _, _ = sample_models.load("hf:llama-3.1-405b", {**SMALL, "rope_theta": theta})
        assert model.config.rope_parameters["rope_theta"] == theta
    assert PRESETS["llama-3.1-405b"] == written
