"""The hf: source starts each architecture with fields of its own config (two layers, under its
own name for them) and keeps the fields valid when the architecture changes."""

from __future__ import annotations

import pytest
from app_helpers import errors, shown, start, summary

from explorer.builders.inputs import hf_default_fields, hf_fields_for, size_warning
from explorer.sidebar import HF_MODEL

pytest.importorskip("transformers")


def test_defaults_follow_the_architecture():
    assert hf_default_fields("gpt2") == "n_layer=2"
    assert hf_default_fields("llama") == "num_hidden_layers=2"
    assert hf_default_fields("hf:llama-3-70b") == ""  # a preset: its own size, nothing set over it
    assert hf_default_fields("t5") == "num_decoder_layers=2 num_layers=2"
    assert hf_default_fields("no-such-architecture") == ""


def test_fields_carry_over_to_the_new_architecture():
    assert hf_fields_for("n_layer=2", "gpt2", "llama") == "num_hidden_layers=2"
    assert hf_fields_for("n_layer=4 dtype=bf16", "gpt2", "mistral") == "num_hidden_layers=4 dtype=bf16"
    assert hf_fields_for("num_hidden_layers=3", "llama", "gpt2") == "n_layer=3"
    assert hf_fields_for("hidden_size=64", "llama", "gpt2") == "hidden_size=64"  # the person's own, kept
    assert hf_fields_for("num_hidden_layers=2", "llama", "no-such-architecture") == ""


def test_choosing_a_preset_clears_the_fields_the_preset_sets():
    from sample_models._hf import PRESETS

    assert hf_fields_for("n_layer=2", "gpt2", "llama-3-70b") == ""  # the 2-layer default is not the preset's
    assert hf_fields_for("n_layer=4 dtype=bf16", "gpt2", "llama-3-70b") == "dtype=bf16"
    assert hf_fields_for("hidden_size=64 num_hidden_layers=3 dtype=fp16", "llama", "hf:mixtral-8x7b") == "dtype=fp16"
    for preset, (_, fields) in PRESETS.items():  # whatever was typed, no field the preset sets survives
        kept = hf_fields_for(" ".join(f"{f}=1" for f in fields) + " dtype=bf16", "gpt2", preset)
        assert kept == "dtype=bf16", (preset, kept)


def test_an_overridden_preset_size_is_a_warning_naming_both_sizes():
    text = size_warning("hf:llama-3-70b", {"num_hidden_layers": 2, "dtype": "bf16"})
    assert text.startswith("llama-3-70b with 2 of 80 layers") and "num_hidden_layers" in text
    assert "hidden_size=1024 (the checkpoint's 8192)" in size_warning("hf:llama-3-70b", {"hidden_size": 1024})
    assert size_warning("hf:llama-3-70b", {"num_hidden_layers": 80, "dtype": "bf16"}) is None  # its own size
    assert size_warning("hf:llama", {"num_hidden_layers": 2}) is None  # an architecture has no real size


def _heading_warnings(at) -> list[str]:
    return [shown(w.value) for w in at.warning if "layers" in w.value]


@pytest.mark.slow
def test_typing_a_preset_answers_for_its_real_size_and_an_override_warns_on_every_page():
    at = start()
    at.selectbox(key="model").set_value(HF_MODEL).run()
    at.text_input(key="hf_name").set_value("llama-3-8b")
    at.button(key="hf_build").click().run()
    assert not at.exception, at.exception
    assert "layers" not in at.text_input(key="hf_set").value  # the gpt2 default did not carry over
    assert at.session_state["config"].model.label == "hf:llama-3-8b(dtype=bf16)"  # its checkpoint's dtype
    assert not _heading_warnings(at)
    at.text_input(key="hf_set").set_value("num_hidden_layers=2")
    at.button(key="hf_build").click().run()
    for page in ("views/explore.py", "views/cluster.py", "views/learn.py", "views/pipeline.py"):
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert any(w.startswith("llama-3-8b with 2 of 32 layers") for w in _heading_warnings(at)), page


@pytest.mark.slow
def test_switching_to_llama_builds_without_an_error():
    at = start()
    at.checkbox(key="follow_model").uncheck().run()  # the custom devices below, not the H100s a model gets
    at.selectbox(key="model").set_value(HF_MODEL).run()
    at.text_input(key="dev_memory").set_value("4 GiB").run()  # llama's default width: 2.5 GiB at 2 layers
    assert at.text_input(key="hf_set").value == "n_layer=2"
    at.text_input(key="hf_name").set_value("llama")
    at.button(key="hf_build").click().run()
    assert not at.exception, at.exception
    assert at.text_input(key="hf_set").value == "num_hidden_layers=2"
    assert not errors(at), errors(at)
    assert summary(at)["model"].startswith("hf:llama(num_hidden_layers=2")
