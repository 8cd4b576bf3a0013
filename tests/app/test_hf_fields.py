"""The hf: source starts each architecture with fields of its own config (two layers, under its
own name for them) and keeps the fields valid when the architecture changes."""

from __future__ import annotations

import pytest

from explorer.builders.inputs import hf_default_fields, hf_fields_for
from explorer.sidebar import HF_MODEL

from app_helpers import errors, start

pytest.importorskip("transformers")


def test_defaults_follow_the_architecture():
    assert hf_default_fields("gpt2") == "n_layer=2"
    assert hf_default_fields("llama") == "num_hidden_layers=2"
    assert hf_default_fields("hf:llama-3-70b") == "num_hidden_layers=2"  # a preset: its architecture's
    assert hf_default_fields("t5") == "num_decoder_layers=2 num_layers=2"
    assert hf_default_fields("no-such-architecture") == ""


def test_fields_carry_over_to_the_new_architecture():
    assert hf_fields_for("n_layer=2", "gpt2", "llama") == "num_hidden_layers=2"
    assert hf_fields_for("n_layer=4 dtype=bf16", "gpt2", "mistral") == "num_hidden_layers=4 dtype=bf16"
    assert hf_fields_for("num_hidden_layers=3", "llama", "gpt2") == "n_layer=3"
    assert hf_fields_for("hidden_size=64", "llama", "gpt2") == "hidden_size=64"  # the person's own, kept
    assert hf_fields_for("num_hidden_layers=2", "llama", "no-such-architecture") == ""


@pytest.mark.slow
def test_switching_to_llama_builds_without_an_error():
    at = start()
    at.selectbox(key="model").set_value(HF_MODEL).run()
    at.text_input(key="dev_memory").set_value("4 GiB").run()  # llama's default width: 2.5 GiB at 2 layers
    assert at.text_input(key="hf_set").value == "n_layer=2"
    at.text_input(key="hf_name").set_value("llama")
    at.button(key="hf_build").click().run()
    assert not at.exception, at.exception
    assert at.text_input(key="hf_set").value == "num_hidden_layers=2"
    assert not errors(at), errors(at)
    assert at.session_state["plan_summary"]["model"].startswith("hf:llama(num_hidden_layers=2")
