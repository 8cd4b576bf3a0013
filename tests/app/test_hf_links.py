"""A link to a view of a Hugging Face architecture opens that view again: the model, its config
fields, batch size and sequence length, the devices and the mode all come back from the URL."""

import pytest
from app_helpers import APP, TIMEOUT, errors, shared_link, start, summary
from streamlit.testing.v1 import AppTest

from explorer.sidebar import HF_MODEL

pytest.importorskip("transformers")

TINY = "n_layer=2 n_embd=64 n_head=4 vocab_size=1000"


def _open(params):
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in params.items():
        fresh.query_params[key] = value[0] if isinstance(value, list) else value
    fresh.run()
    assert not fresh.exception, fresh.exception
    return fresh


@pytest.mark.slow
def test_an_hf_view_opens_again_from_its_link():
    at = start()
    at.selectbox(key="model").set_value(HF_MODEL).run()
    at.text_input(key="hf_name").set_value("gpt2")
    at.text_input(key="hf_set").set_value(TINY)
    at.number_input(key="hf_batch").set_value(2)
    at.number_input(key="hf_seq").set_value(16)
    at.button(key="hf_build").click().run()
    at.selectbox(key="dev_preset").set_value("a100-40gb").run()
    at.number_input(key="dev_count").set_value(3).run()
    at.selectbox(key="mode").set_value("kl_based").run()
    assert not at.exception, at.exception
    label = summary(at)["model"]
    assert "batch_size=2" in label and "seq_len=16" in label and label.startswith("hf:gpt2(")
    params = shared_link(at, "model", "hf_name", "hf_set", "hf_batch", "hf_seq", "dev_preset", "dev_count", "mode")
    fresh = _open(params)
    assert fresh.selectbox(key="model").value == HF_MODEL
    assert fresh.text_input(key="hf_name").value == "gpt2" and fresh.text_input(key="hf_set").value == TINY
    assert fresh.number_input(key="hf_batch").value == 2 and fresh.number_input(key="hf_seq").value == 16
    assert fresh.selectbox(key="dev_preset").value == "a100-40gb" and fresh.number_input(key="dev_count").value == 3
    assert fresh.selectbox(key="mode").value == "kl_based"
    assert fresh.session_state["config"] == at.session_state["config"]
    assert summary(fresh)["model"] == label


def test_a_link_without_hf_fields_or_with_nonsense_opens_without_a_traceback():
    fresh = _open(
        {"model": HF_MODEL, "hf_name": "gpt2", "hf_set": TINY, "hf_batch": "many", "hf_seq": "0", "mode": "kl_based"}
    )
    assert fresh.selectbox(key="model").value == HF_MODEL and fresh.selectbox(key="mode").value == "kl_based"
    assert fresh.number_input(key="hf_batch").value == 1  # nonsense is ignored: the defaults
    odd = _open({"model": HF_MODEL, "hf_name": "[x](http://example.com) nope", "hf_set": ""})
    shown = [e.value for e in odd.error]
    assert shown and not any("](http" in e for e in shown)  # a name from a link is shown escaped
    assert any("nope" in e for e in errors(odd))
