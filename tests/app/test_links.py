"""A shared link's values are read as the sidebar's widgets take them: typed, clamped to the
widget's range or dropped, each with a note (explorer.builders.links)."""

from __future__ import annotations

import pytest

import sample_models
from explorer.builders.config import PLAN_MODES
from explorer.builders.links import read_link
from partitioner import PRESETS

HF = "Hugging Face architecture..."


def read(**params: str):
    return read_link(
        params, sample_models.names(), PLAN_MODES, ["custom", *sorted(PRESETS)], HF, sample_models.config_class
    )


def test_good_values_are_typed_like_the_widgets():
    r = read(
        model="mlp",
        dev_count="6",
        transfer_gbps="12.5",
        saturate_host="true",
        mode="kl_based",
        knob_mlp_n_layer="4",
        knob_mlp_bias="false",
        dev_memory="2 GiB",
        dev_preset="a100-40gb",
    )
    assert r.notes == ()
    assert r.values == {
        "model": "mlp",
        "dev_count": 6,
        "transfer_gbps": 12.5,
        "saturate_host": True,
        "mode": "kl_based",
        "knob_mlp_n_layer": 4,
        "knob_mlp_bias": False,
        "dev_memory": "2 GiB",
        "dev_preset": "a100-40gb",
    }


@pytest.mark.parametrize(
    "key, text, rule",
    [
        ("knob_mlp_bias", "x", "bias must be true or false"),
        ("transfer_gbps", "nan", "transfer_gbps must be a finite number"),
        ("transfer_gbps", "inf", "transfer_gbps must be a finite number"),
        ("knob_mlp_n_layer", "2.5", "n_layer must be a whole number"),
        ("knob_mlp_n_layer", "-3", "n_layer must be > 0"),
        ("knob_mlp_hidden", "0", "hidden must be > 0"),
        ("knob_mlp_nosuch", "3", "not a size knob of mlp"),
        ("knob_cnn_n_stage", "3", "not a size knob of mlp"),
        ("dev_count", "many", "dev_count must be a whole number"),
        ("dev_memory", "lots", "cannot read a size from 'lots'"),
        ("dev_preset", "nosuch", "dev_preset must be one of custom"),
        ("mode", "fastest", "mode must be one of size_based"),
        ("saturate_host", "maybe", "saturate_host must be true or false"),
        ("hf_batch", "4", "not a setting a link carries"),  # hf: settings only with the hf: model
    ],
)
def test_an_unreadable_value_is_dropped_with_its_rule(key, text, rule):
    r = read(model="mlp", **{key: text})
    assert key not in r.values and r.values["model"] == "mlp"
    assert len(r.notes) == 1 and f"{key}" in r.notes[0] and rule in r.notes[0], r.notes


@pytest.mark.parametrize(
    "key, text, expected, said",
    [("dev_count", "1024000", 1024, "1,024"), ("dev_count", "0", 1, "1"), ("transfer_gbps", "-5", 0.0, "0")],
)
def test_an_out_of_range_number_is_clamped_to_the_widgets_range(key, text, expected, said):
    r = read(model="mlp", **{key: text})
    assert r.values[key] == expected and type(r.values[key]) is type(expected)
    assert len(r.notes) == 1 and f"set to {said}" in r.notes[0]  # a count as people write it


def test_hf_settings_are_checked_with_the_hf_model():
    r = read(model=HF, hf_name="llama", hf_batch="100000", hf_seq="x")
    assert r.values == {"model": HF, "hf_name": "llama", "hf_batch": 4096}
    assert any("hf_seq must be a whole number" in n for n in r.notes)


def test_an_unknown_model_sets_nothing_and_says_so():
    r = read(model="nosuch", dev_count="3")
    assert r.values == {} and "model=nosuch" in r.notes[0]
    assert read(dev_count="3").values == {}  # no model: the link is not a view's link


def test_a_link_naming_no_model_applies_to_the_default_one():
    r = read_link(
        {"mode": "kl_based", "dev_count": "0"},
        sample_models.names(),
        PLAN_MODES,
        ["custom"],
        HF,
        sample_models.config_class,
        default_model="mlp",
    )
    assert r.values == {"mode": "kl_based", "dev_count": 1}  # the sidebar keeps its model
    assert len(r.notes) == 1 and "set to 1" in r.notes[0]
