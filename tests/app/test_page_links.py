"""Every page's view in its link: the cluster page's workload and hardware, Explore's view,
colour and search, Learn's algorithm and step, the Pipeline page's settings. A link opened in a
fresh session brings back exactly what was shared; a value its widget could not hold is dropped
with a note (explorer.builders.links.read_page_link; for the widgets Streamlit binds to the URL,
links.bound_notes). Streamlit's browser side writes the bound widgets' values into the URL, which
AppTest has not: test_browser_links.py shares such a link in Chromium."""

from __future__ import annotations

from app_helpers import APP, TIMEOUT, shown, start
from streamlit.testing.v1 import AppTest

from explorer.builders.links import BOUND_KEYS, bound_notes, page_keys, read_link, read_page_link


def _params(at: AppTest) -> dict[str, str]:
    return {k: v[0] if isinstance(v, list) else v for k, v in dict(at.query_params).items()}


def _open(params: dict[str, str], page: str) -> AppTest:
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    fresh.query_params.update(params)
    fresh.switch_page(page).run()
    assert not fresh.exception, fresh.exception
    return fresh


def test_page_keys_are_typed_and_an_unholdable_value_is_dropped_with_a_note():
    state = {
        "cl_batch": 1024,
        "cl_tokens": 1e12,
        "cl_kind": "inference",
        "cl_run": False,
        "cl_new_box": 3,
        "explore_view": "Partition DAG",
        "model": "mlp",
        "cl_intra_h100-80gb": "nvlink4",
    }
    assert page_keys("cluster", state) == {
        "cl_batch": "1024",
        "cl_intra_h100-80gb": "nvlink4",
        "cl_kind": "inference",
        "cl_tokens": "1000000000000.0",
    }  # cl_new_box: no widget of the page takes it (NOTE: [Page keys])
    assert page_keys("explore", state) == {}  # bound to the URL by Streamlit: not written here
    read = read_page_link(
        {
            "cl_batch": "1024",
            "cl_tokens": "1000000000000.0",
            "cl_kind": "serving",
            "cl_seq": "0",
            "cl_new_box": "3",
            "explore_overlay": "memory",  # Streamlit's binding reads it
            "model": "mlp",
        },
        {"cl_kind": ["training", "inference"]},
    )
    assert read.values == {"cl_batch": 1024, "cl_tokens": 1e12, "cl_seq": 1}
    assert any("cl_new_box in the link was ignored: no widget" in n for n in read.notes)
    assert any("cl_kind=serving" in n and "training, inference" in n for n in read.notes)
    assert any("cl_seq=0" in n and "set to 1" in n for n in read.notes)
    # the sidebar's reader leaves a page's keys alone: no "not a setting a link carries" for them
    assert not read_link({"model": "mlp", "cl_batch": "1024"}, ["mlp"], ["size_based"], ["custom"], "hf").notes


def test_a_cluster_link_reopens_its_workload():
    at = start()
    at.switch_page("views/cluster.py").run()
    at.number_input(key="cl_batch").set_value(1024).run()
    at.number_input(key="cl_seq").set_value(8192).run()
    at.number_input(key="cl_max_nodes").set_value(128).run()
    assert not at.exception, at.exception
    params = _params(at)
    assert params["cl_batch"] == "1024" and params["cl_seq"] == "8192" and params["cl_max_nodes"] == "128"
    fresh = _open(params, "views/cluster.py")
    assert fresh.number_input(key="cl_batch").value == 1024
    assert fresh.number_input(key="cl_seq").value == 8192
    assert fresh.number_input(key="cl_max_nodes").value == 128
    assert [m.value for m in fresh.metric] == [m.value for m in at.metric]  # the same answers


def test_bound_notes_name_what_the_binding_dropped():
    assert {"explore_view", "explore_overlay", "explore_search", "pp_microbatches", "pp_schedule"} <= set(BOUND_KEYS)
    link = {"explore_overlay": "rainbow", "pp_microbatches": "4", "pp_ranks": "99", "explore_search": "fc"}
    state = {"explore_overlay": "device", "pp_microbatches": 4, "pp_ranks": 4}  # explore_search: not drawn
    notes = bound_notes(link, state)
    assert len(notes) == 2, notes
    assert "explore_overlay=rainbow" in notes[0] and "it shows device" in notes[0]
    assert "pp_ranks=99" in notes[1]


def test_explores_view_colour_and_search_are_in_the_link():
    params = {"model": "mlp", "explore_view": "Model graph by module", "explore_overlay": "memory"}
    fresh = _open({**params, "explore_search": "fc"}, "views/explore.py")
    assert fresh.segmented_control(key="explore_view").value == "Model graph by module"
    fresh.segmented_control(key="explore_view").set_value("Partition DAG").run()  # the colour and search show here
    assert fresh.selectbox(key="explore_overlay").value == "memory"
    assert fresh.text_input(key="explore_search").value == "fc"
    assert not any("link" in shown(w.value) for w in fresh.warning)


def test_a_page_value_no_widget_can_hold_is_dropped_with_a_note():
    fresh = _open({"model": "mlp", "explore_overlay": "rainbow", "explore_view": "Partition DAG"}, "views/explore.py")
    assert fresh.selectbox(key="explore_overlay").value == "device"
    assert any("explore_overlay=rainbow" in shown(w.value) for w in fresh.warning)


def test_the_pipeline_pages_settings_are_in_the_link():
    fresh = _open({"model": "mlp", "pp_microbatches": "4", "pp_schedule": "gpipe"}, "views/pipeline.py")
    assert fresh.number_input(key="pp_microbatches").value == 4 and fresh.selectbox(key="pp_schedule").value == "gpipe"
    assert not any("link" in shown(w.value) for w in fresh.warning)


def test_a_link_naming_only_a_preset_builds_it_at_its_real_size():
    import pytest

    pytest.importorskip("transformers")
    from explorer.state import HF_MODEL

    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    fresh.query_params.update({"model": HF_MODEL, "hf_name": "llama-3-8b", "dev_preset": "h100-80gb"})
    fresh.run()
    assert not fresh.exception, fresh.exception
    assert fresh.text_input(key="hf_set").value == ""  # not gpt2's n_layer=2
    assert fresh.session_state["config"].model.label == "hf:llama-3-8b(dtype=bf16)"  # its checkpoint's dtype


# --- issue 54: a link names only keys whose widget takes a value; every clamp or drop is said; long
# values are cut in the note.
CHOICES = {"cl_accelerator": ["h100-80gb", "h200-141gb"], "cl_kind": ["training", "inference"]}


def test_a_buttons_key_or_a_key_no_widget_reads_is_dropped_with_a_note_naming_it():
    for key in ("cl_min_cut_run", "cl_run", "cl_open", "cl_dl_eager", "cl_runs", "cl_min_cut", "cl_pareto", "cl_x"):
        read = read_page_link({key: "1"}, CHOICES)
        assert read.values == {}, key
        assert len(read.notes) == 1 and read.notes[0].startswith(f"{key} in the link was ignored"), read.notes
    read = read_page_link({"cl_price_nosuchcard": "2", "cl_intra_nosuchcard": "nvlink4"}, CHOICES)
    assert read.values == {} and len(read.notes) == 2, read.notes
    assert page_keys("cluster", {"cl_min_cut_run": True, "cl_runs": {}, "cl_serve_engine": "graphs"}) == {
        "cl_serve_engine": "graphs"
    }


def test_out_of_range_prices_and_a_huge_step_are_clamped_and_said():
    read = read_page_link({"cl_price_h100-80gb": "1e300", "cl_price_h200-141gb": "-5", "learn_step": "9" * 30}, CHOICES)
    assert read.values == {"cl_price_h100-80gb": 1000.0, "cl_price_h200-141gb": 0.0, "learn_step": 60}
    assert len(read.notes) == 3, read.notes
    assert any("cl_price_h100-80gb=1e300" in n and "set to 1,000" in n for n in read.notes)  # as people write it
    assert any("cl_price_h200-141gb=-5" in n and "set to 0" in n for n in read.notes)
    assert any(n.startswith("learn_step=") and "set to 60" in n for n in read.notes)
    read = read_page_link({"learn_step": "9" * 5000}, CHOICES)  # past Python's digits limit
    assert read.values == {} and "learn_step=" in read.notes[0] and "5,000 characters" in read.notes[0]


def test_a_long_value_is_cut_in_its_note():
    long = "dp2 " * 20_000
    read = read_page_link({"cl_write": long, "cl_kind": "x" * 80_000}, CHOICES)
    assert read.values == {}
    assert len(read.notes) == 2 and all(len(n) < 400 for n in read.notes), [len(n) for n in read.notes]
    assert any("80,000 characters" in n for n in read.notes)
    sidebar = read_link({"model": "mlp", "dev_memory": "9" * 80_000, "k" * 80_000: "1"}, ["mlp"], ["m"], ["c"], "hf")
    assert len(sidebar.notes) == 2 and all(len(n) < 400 for n in sidebar.notes), [len(n) for n in sidebar.notes]


def test_a_link_to_a_button_keeps_the_cluster_page_and_says_why():
    fresh = _open(
        {"model": "mlp", "cl_min_cut_run": "1", "cl_run": "true", "cl_price_h100-80gb": "1e300"}, "views/cluster.py"
    )
    said = " ".join(shown(w.value) for w in fresh.warning)
    assert "cl_min_cut_run in the link was ignored" in said and "cl_run in the link was ignored" in said
    assert "cl_price_h100-80gb=1e300" in said and "set to 1,000" in said  # as people write it


def test_every_carried_cluster_choice_is_checked_against_its_widgets_options():
    from explorer.state import page_choices

    choices = page_choices()
    read = read_page_link({"cl_serve_engine": "graphs", "cl_engine": "turbo"}, choices)
    assert read.values == {"cl_serve_engine": "graphs"}
    assert len(read.notes) == 1 and "cl_engine=turbo" in read.notes[0] and "eager, graphs" in read.notes[0]
    assert {"cl_serve_engine", "cl_engine", "cl_accelerator"} <= set(choices)


def test_a_size_knob_past_what_a_number_box_holds_is_dropped_with_a_note():
    import sample_models

    read = read_link(
        {"model": "mlp", "knob_mlp_hidden": "1" + "0" * 20, "knob_mlp_n_layer": "2"},
        ["mlp"],
        ["m"],
        ["c"],
        "hf",
        sample_models.config_class,
    )
    assert read.values.get("knob_mlp_n_layer") == 2 and "knob_mlp_hidden" not in read.values
    assert len(read.notes) == 1 and "knob_mlp_hidden=100000000000000000000" in read.notes[0]
    assert "9,007,199,254,740,991" in read.notes[0]
