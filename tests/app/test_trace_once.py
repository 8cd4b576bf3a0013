"""Changing the hf: model's fields traces once, with every field applied, when they are sent
(not once per field); and the app reads a trace the command line cached."""

from __future__ import annotations

import pytest
from app_helpers import start, summary

import sample_models
from cli import inputs as cli_inputs
from partitioner.tracing import cache

TINY = "n_layer=2 n_embd=64 n_head=4 vocab_size=1000"


@pytest.mark.slow
def test_the_hf_fields_trace_once_when_sent(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    cli_inputs.load_model("hf:gpt2", TINY.split() + ["n_positions=64"])  # the command line fills the cache
    loads: list[str] = []
    real = sample_models.load
    monkeypatch.setattr(sample_models, "load", lambda spec, *a, **k: loads.append(spec) or real(spec, *a, **k))
    from explorer.sidebar import HF_MODEL

    at = start()
    at.selectbox(key="model").set_value(HF_MODEL).run()
    before = len(loads)
    at.text_input(key="hf_set").set_value(TINY).run()
    at.number_input(key="hf_batch").set_value(2).run()
    assert len(loads) == before, "a field alone must not trace"
    at.text_input(key="hf_set").set_value(TINY)  # (AppTest forgets a form's unsent values)
    at.number_input(key="hf_batch").set_value(2)
    at.button(key="hf_build").click().run()
    assert len(loads) == before + 1 and not at.exception
    assert summary(at)["model"] == "hf:gpt2(batch_size=2,n_embd=64,n_head=4,n_layer=2,vocab_size=1000)"
    at.number_input(key="hf_batch").set_value(1)
    at.text_input(key="hf_set").set_value(TINY + " n_positions=64")
    at.button(key="hf_build").click().run()
    assert len(loads) == before + 1, "the command line's cached trace is read, not traced again"
    assert summary(at)["model"].startswith("hf:gpt2(n_embd=64,n_head=4,n_layer=2,n_positions=64")
