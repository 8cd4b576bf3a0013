"""Issue 56: choosing a Hugging Face model with *Switch to each model's default devices* ticked gives
devices that make a plan (not the sample's 4 x 4 MiB), built in its checkpoint's dtype and named so;
a link's devices and an unticked box keep the person's own."""

from __future__ import annotations

import pytest
from app_helpers import errors, shown, start, summary

from explorer.sidebar import HF_DEVICE_TYPE, HF_MODEL, hf_device_count

pytest.importorskip("transformers")

GIB = 1 << 30


def test_the_device_count_holds_the_model_with_room_to_spare_and_at_least_two():
    assert hf_device_count(1 * GIB, 80 * GIB, 5) == 2  # a small model: two, so there is something to split
    assert hf_device_count(141 * 10**9, 80 * GIB, 5) == 2  # Llama-3-70B in bf16: 155 GB with the spare in 2 x 76 GiB
    assert hf_device_count(150 * 10**9, 80 * GIB, 5) == 3  # 165 GB with the spare: over 2 x 76 GiB
    assert hf_device_count(141 * 10**9, 80 * GIB, 50) == 4  # less of each device usable: more of them
    assert hf_device_count(10**15, 80 * GIB, 5) == 1024  # the widget's most


def _choose(at, name: str):
    at.selectbox(key="model").set_value(HF_MODEL).run()
    at.text_input(key="hf_name").set_value(name)
    at.button(key="hf_build").click().run()
    assert not at.exception, at.exception
    return at


def test_a_preset_chosen_with_follow_on_gets_gpus_that_make_a_plan_and_names_its_dtype():
    at = start()
    assert at.session_state["dev_memory"] == "4 MiB"  # the sample's devices before
    _choose(at, "mistral-7b")
    assert at.session_state["dev_preset"] == HF_DEVICE_TYPE and at.session_state["dev_count"] == 2
    assert not [e for e in errors(at) if e.startswith("No plan")], errors(at)
    facts = summary(at)
    assert facts is not None and facts["model"] == "hf:mistral-7b(dtype=bf16)" and facts["devices"] == 2
    sidebar = " ".join(shown(c.value) for c in at.sidebar.caption)
    assert f"Devices set to 2 x {HF_DEVICE_TYPE}" in sidebar and "in **bf16** (its checkpoint's" in sidebar
    heading = [m.value for m in at.markdown if m.value.startswith("####")][0]
    assert "dtype=bf16" in heading  # said beside the model on the page
    at.selectbox(key="model").set_value("mlp").run()  # back to a sample: its own small devices again
    assert at.session_state["dev_preset"] == "custom" and "MiB" in at.session_state["dev_memory"]


def test_unticked_the_devices_stay_the_persons_own():
    at = start()
    at.checkbox(key="follow_model").uncheck().run()
    at.number_input(key="dev_count").set_value(3).run()
    _choose(at, "mistral-7b")
    assert at.session_state["dev_count"] == 3 and at.session_state["dev_memory"] == "4 MiB"
    assert not any("Devices set to" in shown(c.value) for c in at.sidebar.caption)


def test_a_link_naming_a_preset_but_no_devices_opens_on_the_models_default_devices():
    from app_helpers import APP, TIMEOUT
    from streamlit.testing.v1 import AppTest

    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    fresh.query_params.update({"model": HF_MODEL, "hf_name": "gpt2", "hf_set": "n_layer=2 n_embd=64 n_head=4"})
    fresh.run()
    assert not fresh.exception, fresh.exception
    assert fresh.session_state["dev_preset"] == HF_DEVICE_TYPE and fresh.session_state["dev_count"] == 2
    assert not [e for e in errors(fresh) if e.startswith("No plan")], errors(fresh)
    named = AppTest.from_file(APP, default_timeout=TIMEOUT)  # a link that names its devices keeps them
    named.query_params.update(
        {"model": HF_MODEL, "hf_name": "gpt2", "hf_set": "n_layer=2 n_embd=64 n_head=4", "dev_count": "3"}
    )
    named.run()
    assert not named.exception and named.session_state["dev_count"] == 3
    assert named.session_state["dev_preset"] != HF_DEVICE_TYPE
