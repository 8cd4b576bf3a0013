"""Issue 56: a value a sidebar field cannot take says so beside the field and above the answer it
did not change; long inputs are cut in messages; counts read as people write them."""

from __future__ import annotations

import pytest
from app_helpers import APP, TIMEOUT, errors, shown, start, summary
from streamlit.testing.v1 import AppTest

from explorer.builders.text import cut_long_words, md, number
from explorer.fields import out_of_range_note
from explorer.sidebar import HF_MODEL


def test_numbers_read_as_people_write_them():
    assert [number(v) for v in (1280, 1.28e3, 1 << 20, 0.5, 12.3456, 123456.7, 0.95, 1e12)] == [
        "1,280",
        "1,280",
        "1,048,576",
        "0.5",
        "12.35",
        "123,457",
        "0.95",
        "1,000,000,000,000",
    ]
    assert number(2e18) == "2 x 10^18" and number(0) == "0" and "e+" not in number(1.5e14)


def test_long_words_are_cut_with_their_length_and_short_text_is_left_alone():
    name = "hf:" + "x" * 5000
    assert cut_long_words(f"Could not build {name}: no such type") == (
        f"Could not build {name[:60]}... (5,003 characters): no such type"
    )
    assert (
        cut_long_words("model.layers.0.self_attn.q_proj and 40 words") == "model.layers.0.self_attn.q_proj and 40 words"
    )
    assert len(md("y" * 5000)) < 100


def test_the_note_names_the_rule_the_value_and_what_the_answer_is_still_for():
    assert out_of_range_note("Batch size", 0, 1, 4096, 1) == (
        "Batch size must be from 1 to 4,096 (got 0): not applied; the answer is for 1."
    )
    assert "(got nothing)" in out_of_range_note("Solver time limit (s)", None, 1, 600, 10)


def test_a_link_out_of_range_reads_its_bounds_with_commas():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({"model": "mlp", "dev_count": "5000"})
    at.run()
    note = "Number of devices must be from 1 to 1,024 (got 5,000): not applied"
    assert any(note in w for w in _warnings(at)), _warnings(at)


def _warnings(at) -> list[str]:
    return [shown(w.value) for w in at.warning]


def test_an_out_of_range_search_budget_is_said_beside_it_and_above_the_unchanged_answer():
    at = start()
    before = summary(at)
    at.number_input(key="search_budget").set_value(5_000_000).run()
    assert not at.exception, at.exception
    note = "Search budget (cost-model evaluations, 0 = automatic) must be from 0 to 1,000,000 (got 5,000,000)"
    assert [w for w in _warnings(at) if note in w], _warnings(at)  # above the page
    assert "Not applied: from 0 to 1,000,000 (got 5,000,000)." in _warnings(at)  # beside the field
    assert at.session_state["config"].options.search_budget is None and summary(at) == before  # not applied
    at.number_input(key="search_budget").set_value(200).run()  # a value it can take: applied, no note
    assert not [w for w in _warnings(at) if "must be from" in w]
    assert at.session_state["config"].options.search_budget == 200


@pytest.mark.slow
def test_an_out_of_range_hf_batch_keeps_the_last_one_and_a_long_name_is_cut():
    pytest.importorskip("transformers")
    at = start()
    at.checkbox(key="follow_model").uncheck().run()
    at.selectbox(key="model").set_value(HF_MODEL).run()
    at.text_input(key="hf_set").set_value("n_layer=2 n_embd=64 n_head=4 vocab_size=1000")
    at.button(key="hf_build").click().run()
    label = at.session_state["config"].model.label
    at.number_input(key="hf_batch").set_value(0)
    at.button(key="hf_build").click().run()
    assert not at.exception, at.exception
    assert any("Batch size must be from 1 to 4,096 (got 0): not applied" in w for w in _warnings(at))
    assert at.session_state["config"].model.label == label  # the answer is still for batch 1
    at.number_input(key="hf_batch").set_value(1)
    at.text_input(key="hf_name").set_value("x" * 5000)
    at.button(key="hf_build").click().run()
    said = errors(at)
    assert said and all(len(e) < 1000 for e in said) and any("(5,003 characters)" in e for e in said), said


def test_a_config_fields_pair_without_a_value_speaks_of_the_field_not_the_command_line_flag():
    import sample_models

    with pytest.raises(
        ValueError, match=r"^Config fields take field=value pairs, separated by spaces \(got 'n_layer'\)"
    ):
        sample_models.parse_overrides("hf:gpt2", ["n_layer"], where="Config fields")
    with pytest.raises(ValueError, match=r"^--set expects KEY=VALUE"):  # the command line's words stay
        sample_models.parse_overrides("hf:gpt2", ["n_layer"])


def test_a_count_takes_its_noun_in_the_right_number():
    from explorer.builders.text import counted

    assert [counted(n, "device") for n in (1, 2, 1024)] == ["1 device", "2 devices", "1,024 devices"]
