"""Every card of the hardware table is a device type in the app, its devices priced by the card's
kernel curves under the engine chosen, with what the times assume said under the device type."""

from __future__ import annotations

from app_helpers import APP, TIMEOUT
from streamlit.testing.v1 import AppTest

from partitioner.hardware import HARDWARE


def test_every_preset_is_a_device_type_and_says_what_its_times_assume():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["model"] = "mlp"
    at.run()
    assert not at.exception, at.exception
    assert set(HARDWARE) <= set(at.selectbox(key="dev_preset").options)
    for name, card in HARDWARE.items():
        at.selectbox(key="dev_preset").set_value(name).run()
        assert not at.exception, (name, at.exception)
        devices = at.session_state["config"].device_list()
        assert {d.kind for d in devices} == {name}
        captions = " ".join(c.value for c in at.caption)
        if card.accelerator:
            assert all(d.profile is not None and d.profile.gpu is not None for d in devices), name
            assert ("derived from the measured" in captions) == (name not in ("h100-80gb", "h200-141gb")), name
            assert "eager PyTorch" in captions
        else:
            assert all(d.profile is None for d in devices)


def test_the_engine_changes_the_times_and_travels_in_the_link():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in {"model": "transformer", "dev_preset": "h100-80gb", "dev_count": "2"}.items():
        at.query_params[key] = value
    at.run()
    eager = at.session_state["config"].device_list()
    at.radio(key="dev_engine").set_value("graphs").run()
    assert not at.exception, at.exception
    graphs = at.session_state["config"].device_list()
    assert {d.profile.engine for d in eager} == {"eager"} and {d.profile.engine for d in graphs} == {"graphs"}
    assert "CUDA graphs" in " ".join(c.value for c in at.caption)
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in {"model": "transformer", "dev_preset": "h100-80gb", "dev_engine": "graphs"}.items():
        fresh.query_params[key] = value
    fresh.run()
    assert {d.profile.engine for d in fresh.session_state["config"].device_list()} == {"graphs"}
