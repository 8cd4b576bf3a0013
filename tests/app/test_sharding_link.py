"""Issue 56: a Sharding link keeps the suggested spec: the link carries how the spec was made
(``sh_spec_from``) and the receiver makes it again, so both see the same memory and verdict."""

from __future__ import annotations

from app_helpers import APP, TIMEOUT, errors, shared_link, shown, start
from streamlit.testing.v1 import AppTest


def _largest(at: AppTest) -> str:
    return next(m for m in at.metric if m.label == "Largest device memory").value


def test_a_link_to_a_suggested_spec_opens_on_that_spec():
    at = start()
    at.number_input(key="dev_headroom").set_value(0.0)
    at.text_input(key="dev_memory").set_value("14 MiB").run()
    at.number_input(key="dev_count").set_value(2).run()
    at.switch_page("views/sharding.py").run()
    at.toggle(key="sh_training").set_value(True).run()
    over = _largest(at)
    at.button(key="sh_suggest").click().run()
    assert not at.exception and not errors(at)
    fits = [s.value for s in at.success]
    assert any("Every device fits" in s for s in fits) and _largest(at) != over
    assert at.query_params.get("sh_spec_from") in ("suggest", ["suggest"]), dict(at.query_params)
    params = shared_link(at, "dev_headroom", "dev_memory", "dev_count", "sh_training")

    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    fresh.query_params.update(params)
    fresh.switch_page("views/sharding.py").run()
    assert not fresh.exception and not errors(fresh)
    assert [s.value for s in fresh.success] == fits  # the receiver sees what the sender saw
    assert _largest(fresh) == _largest(at)


def test_a_link_with_an_unknown_spec_origin_is_dropped_with_a_note():
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    fresh.query_params.update({"sh_spec_from": "<b>mine</b>"})
    fresh.switch_page("views/sharding.py").run()
    assert not fresh.exception
    notes = " ".join(shown(w.value) for w in fresh.warning)
    assert "sh_spec_from=<b>mine</b> in the link was ignored" in notes  # said as text (escaped markdown)
    assert all("<b>" not in str(w.value) or "\\<b\\>" in str(w.value) for w in fresh.warning)
