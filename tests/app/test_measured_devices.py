"""A device profile measured on this machine is a device type in the app: offered beside the
presets, opened from a link, and carried by the plan's devices (the Pipeline and Sharding pages
predict on its curves)."""

from __future__ import annotations

from app_helpers import APP, TIMEOUT, summary
from runtime.test_calibrate import _profile
from streamlit.testing.v1 import AppTest


def test_a_link_opens_the_app_on_a_profile_measured_here(tmp_path, monkeypatch):
    monkeypatch.setenv("PARTITION_EXPLORER_CACHE", str(tmp_path))
    profile = _profile("box")
    profile.save(tmp_path / "profiles" / "box.json")
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in {"model": "mlp", "dev_preset": "box", "dev_count": "2"}.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, at.exception
    picker = at.selectbox(key="dev_preset")
    assert picker.value == "box" and picker.options[-1] == "box" and "a100-40gb" in picker.options
    devices = at.session_state["config"].device_list()
    assert [d.name for d in devices] == ["box_0", "box_1"] and all(d.profile == profile for d in devices)
    assert not at.warning or all("was ignored" not in w.value for w in at.warning)
    assert summary(at)["model"].startswith("mlp")
    # The memory shown is the type's; the custom memory comes back with custom.
    assert at.text_input(key="dev_memory_of_box").value == "8 GiB"
    at.selectbox(key="dev_preset").set_value("custom").run()
    custom = at.text_input(key="dev_memory").value
    at.text_input(key="dev_memory").set_value("3 GiB").run()
    at.selectbox(key="dev_preset").set_value("a100-40gb").run()
    assert at.text_input(key="dev_memory_of_a100-40gb").value == "40 GiB" and custom != "3 GiB"
    at.selectbox(key="dev_preset").set_value("custom").run()
    assert at.text_input(key="dev_memory").value == "3 GiB" and not at.exception
