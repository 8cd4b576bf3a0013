"""Memory headroom: a share of every device kept free, which the modes respect (the plan fills
each device to at most the rest) and the URL carries."""

from __future__ import annotations

import pytest
from app_helpers import APP, TIMEOUT, errors, start
from streamlit.testing.v1 import AppTest

from explorer.builders.inputs import InputError, with_headroom
from partitioner import Device


def test_headroom_keeps_a_share_of_each_device_free():
    devices = [Device("a", 1000, 0), Device("b", 2000, 1)]
    assert [d.memory_bytes for d in with_headroom(devices, 10)] == [900, 1800]
    assert with_headroom(devices, 0) == devices
    with pytest.raises(InputError, match="from 0 to under 100 %"):
        with_headroom(devices, 100)


def _used(at) -> int:
    return int(next(m.value for m in at.metric if m.label == "Devices used").split(" of ")[0])


def test_the_modes_plan_within_what_the_headroom_leaves():
    at = start()
    before = _used(at)
    at.number_input(key="dev_headroom").set_value(40.0).run()
    assert not at.exception and not errors(at)
    assert _used(at) > before  # the same model needs more of the same devices
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)  # the link carries it (Streamlit's binding)
    fresh.query_params["dev_headroom"] = "40"
    fresh.run()
    assert fresh.number_input(key="dev_headroom").value == 40.0 and _used(fresh) == _used(at)
