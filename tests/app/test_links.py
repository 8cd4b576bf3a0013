"""A shared link's sidebar values are taken by the sidebar's widgets, bound to the URL by Streamlit
(NOTE: [Bound keys] in explorer.builders.links): a value a widget cannot hold is dropped and named
above the page, a number out of its field's range is said beside the field and not applied, and
a value the model or the devices refuse is said where they are read. Each link is opened in a
fresh session, as a person opening it would."""

from __future__ import annotations

import pytest
from app_helpers import APP, TIMEOUT, errors, shown
from streamlit.testing.v1 import AppTest

from explorer.builders.config import DEFAULT_MODEL

HF = "Hugging Face architecture..."


def _open(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update(params)
    at.run()
    assert not at.exception, at.exception
    return at


def _said(at: AppTest) -> str:
    return " ".join(shown(w.value) for w in at.warning)


def test_good_values_are_taken_by_the_widgets():
    at = _open(
        model="mlp",
        dev_count="6",
        transfer_gbps="12.5",
        saturate_host="true",
        mode="kl_based",
        knob_mlp_n_layer="4",
        knob_mlp_bias="false",
        dev_preset="a100-40gb",
    )
    assert "in the link" not in _said(at), _said(at)
    config = at.session_state["config"]
    assert config.model.name == "mlp" and dict(config.model.overrides) == {"n_layer": 4, "bias": False}
    assert config.mode == "kl_based" and config.options.saturate_host
    assert config.options.transfer_rate_bytes_per_s == 12.5e9
    assert [dict(d)["kind"] for d in config.devices] == ["a100-40gb"] * 6
    custom = _open(model="mlp", dev_memory="2 GiB")  # the memory of the custom type
    assert custom.text_input(key="dev_memory").value == "2 GiB"
    assert {dict(d)["memory_bytes"] for d in custom.session_state["config"].devices} == {
        int(2 * 2**30 * (1 - custom.number_input(key="dev_headroom").value / 100))
    }


@pytest.mark.parametrize(
    "key, text",
    [
        ("knob_mlp_bias", "x"),
        ("knob_mlp_n_layer", "2.5"),
        ("dev_count", "many"),
        ("dev_preset", "nosuch"),
        ("mode", "fastest"),
        ("saturate_host", "maybe"),
    ],
)
def test_a_value_its_widget_cannot_hold_is_dropped_and_named(key, text):
    at = _open(model="mlp", **{key: text})
    assert f"{key}={text} in the link was ignored" in _said(at), _said(at)
    assert at.session_state["config"] is not None and at.session_state["config"].model.name == "mlp"
    assert at.query_params.get(key) != text  # not carried on (2.5: the whole-number box carries 2)


@pytest.mark.parametrize("key", ["knob_mlp_nosuch", "knob_cnn_n_stage", "hf_batch", "nosuch"])
def test_a_key_no_widget_reads_is_named_and_not_carried_on(key):
    at = _open(model="mlp", **{key: "3"})  # hf_batch: a field of Hugging Face models alone
    assert f"{key} in the link was ignored: no widget of the page takes it" in _said(at), _said(at)
    assert key not in at.query_params and key not in at.session_state


@pytest.mark.parametrize(
    "key, text, rule",
    [
        ("knob_mlp_n_layer", "-3", "n_layer must be > 0"),
        ("knob_mlp_hidden", "0", "hidden must be > 0"),
        ("dev_memory", "lots", "cannot read a size from 'lots'"),
    ],
)
def test_a_value_the_model_or_the_devices_refuse_is_said_where_they_are_read(key, text, rule):
    at = _open(model="mlp", **{key: text})
    assert any(rule in e for e in errors(at)), errors(at)


@pytest.mark.parametrize("key, text, said", [("dev_count", "1024000", "1,024,000"), ("transfer_gbps", "-5", "-5")])
def test_an_out_of_range_number_is_said_beside_its_field_and_not_applied(key, text, said):
    at = _open(model="mlp", **{key: text})
    assert f"(got {said}): not applied" in _said(at), _said(at)
    assert at.session_state["config"] is not None


def test_hf_settings_are_taken_with_the_hf_model():
    pytest.importorskip("transformers")
    at = _open(model=HF, hf_name="gpt2", hf_set="n_layer=1 n_embd=32 n_head=2", hf_batch="100000", hf_seq="x")
    assert at.text_input(key="hf_name").value == "gpt2"
    assert "hf_seq=x in the link was ignored" in _said(at), _said(at)
    assert "Batch size must be from 1 to 4,096 (got 100,000)" in _said(at), _said(at)
    assert at.session_state["config"].model.name == "hf:gpt2"


def test_an_unknown_model_is_named_and_the_rest_applies_to_the_default_one():
    at = _open(model="nosuch", mode="kl_based")
    assert "model=nosuch in the link was ignored" in _said(at), _said(at)
    assert at.session_state["config"].model.name == DEFAULT_MODEL and at.session_state["config"].mode == "kl_based"


def test_a_link_naming_no_model_applies_to_the_default_one():
    at = _open(mode="kl_based", dev_count="3")
    assert at.selectbox(key="model").value == DEFAULT_MODEL
    assert at.session_state["config"].mode == "kl_based" and len(at.session_state["config"].devices) == 3
