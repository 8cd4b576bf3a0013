"""Issue 56 on the device panel and Plan a cluster: a number a field cannot take is said beside the
field and above the page, and the answer stays the last one it could; token counts, money and
shares of memory read as people write them, one rounding rule on every page."""

from __future__ import annotations

import pytest
from app_helpers import errors, shown, start, summary

from explorer.builders.tables import percent
from explorer.cluster_inputs import tokens_in_words


def _warnings(at) -> list[str]:
    return [shown(w.value) for w in at.warning]


def _refused(at, key: str, bad: float, rule: str) -> None:
    """Set the field ``key`` to ``bad``: no exception, and a warning says ``rule`` and that it was
    not applied."""
    at.number_input(key=key).set_value(bad).run()
    assert not at.exception, at.exception
    assert [w for w in _warnings(at) if rule in w and "not applied" in w], _warnings(at)


@pytest.mark.parametrize(
    "key, bad, rule",
    [
        ("dev_count", 0, "Number of devices must be from 1 to 1,024 (got 0)"),
        ("dev_count", 99999, "Number of devices must be from 1 to 1,024 (got 99,999)"),
        ("dev_headroom", 95.0, "Memory headroom (% of each device) must be from 0 to 90 (got 95)"),
        ("dev_headroom", -1.0, "Memory headroom (% of each device) must be from 0 to 90 (got -1)"),
        ("transfer_gbps", -1.0, "Transfer rate between devices (GB/s) must be from 0 to 1,000,000 (got -1)"),
    ],
)
def test_a_device_field_out_of_range_is_said_and_the_plan_is_unchanged(key, bad, rule):
    at = start()
    before = summary(at)
    _refused(at, key, bad, rule)
    assert [w for w in _warnings(at) if w.startswith("Not applied: from")]  # beside the field
    assert summary(at) == before


def test_a_device_count_in_range_applies_without_a_note():
    at = start()
    at.number_input(key="dev_count").set_value(3).run()
    assert not at.exception and not [w for w in _warnings(at) if "must be from" in w]
    assert len(at.session_state["config"].devices) == 3


def _cluster():
    at = start()
    at.switch_page("views/cluster.py").run()
    assert not at.exception and not errors(at)
    return at


def _answers(at) -> list[str]:
    return [shown(c.value) for c in at.caption if " a step;" in shown(c.value)]


@pytest.mark.parametrize(
    "key, bad, rule",
    [
        ("cl_batch", 0, "Global batch (sequences a step) must be from 1 to 1,048,576 (got 0)"),
        ("cl_max_nodes", 0, "Up to nodes must be from 1 to 4,096 (got 0)"),
        ("cl_max_nodes", 5000, "Up to nodes must be from 1 to 4,096 (got 5,000)"),
        ("cl_seq", 10_000_000, "Sequence length (tokens) must be from 1 to 1,048,576 (got 10,000,000)"),
    ],
)
def test_a_cluster_field_out_of_range_is_said_and_the_answers_are_unchanged(key, bad, rule):
    at = _cluster()
    before = _answers(at)
    _refused(at, key, bad, rule)
    assert _answers(at) == before and before


def test_tokens_to_train_read_in_words_not_in_e_notation():
    at = _cluster()
    assert at.number_input(key="cl_tokens").format == "%.0f"
    captions = [shown(c.value) for c in at.caption]
    assert "1 trillion tokens" in captions
    assert any(c.startswith("1 trillion tokens: ") for c in captions)  # each answer's run
    assert not [c for c in captions if "e+" in c], captions
    assert [tokens_in_words(n) for n in (1e12, 15.6e12, 3e11, 2e6, 5e5)] == [
        "1 trillion",
        "15.6 trillion",
        "300 billion",
        "2 million",
        "500,000",
    ]


def test_one_rounding_rule_for_a_share_of_memory():
    assert [percent(u) for u in (0.995, 1.0, 0.1234, float("inf"), None)] == ["99.5%", "100.0%", "12.3%", "-", "-"]
