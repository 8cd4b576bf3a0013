"""Every page's view in its link: the cluster page's workload and hardware, the Training memory
page's budget, loss and optimizer, Explore's view, colour and search, Learn's algorithm and step,
the Pipeline page's settings. A link opened in a fresh session brings back exactly what was shared;
a value its widget could not hold is dropped with a note. The pages' widgets are bound to the URL
by Streamlit (NOTE: [Bound keys] in explorer.builders.links; links.bound_notes names what no
widget took); how the Sharding page made its spec is carried by hand (links.read_page_link).
Streamlit's browser side writes the bound widgets' values into the URL, which AppTest has not:
test_browser_links.py shares such a link in Chromium."""

from __future__ import annotations

from app_helpers import APP, TIMEOUT, shown, start
from streamlit.testing.v1 import AppTest

from explorer.builders.links import bound_notes, page_keys, read_page_link


def _params(at: AppTest) -> dict[str, str]:
    return {k: v[0] if isinstance(v, list) else v for k, v in dict(at.query_params).items()}


def _open(params: dict[str, str], page: str) -> AppTest:
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    fresh.query_params.update(params)
    fresh.switch_page(page).run()
    assert not fresh.exception, fresh.exception
    return fresh


def _said(at: AppTest) -> str:
    return " ".join(shown(w.value) for w in at.warning)


def test_hand_carried_keys_are_checked_and_written_for_their_page_only():
    state = {"sh_spec_from": "model", "learn_step": 3, "cl_batch": 1024, "model": "mlp"}
    assert page_keys("sharding", state) == {"sh_spec_from": "model"} and page_keys("learn", state) == {
        "learn_step": "3"
    }
    assert page_keys("cluster", state) == {}  # cl_batch: Streamlit's binding writes it
    assert page_keys("sharding", {"sh_spec_from": "<b>"}) == {}
    read = read_page_link({"sh_spec_from": "suggest", "cl_batch": "9", "model": "mlp"})
    assert read.values == {"sh_spec_from": "suggest"} and not read.notes  # cl_batch, model: bound
    read = read_page_link({"sh_spec_from": "fastest"})
    assert read.values == {} and "sh_spec_from=fastest" in read.notes[0] and "model, suggest" in read.notes[0]


def test_a_cluster_link_reopens_its_workload_and_hardware():
    link = {
        "model": "mlp",
        "cl_batch": "1024",
        "cl_seq": "8192",
        "cl_max_nodes": "128",
        "cl_price_h100-80gb": "3.5",
        "cl_intra_h100-80gb": "pcie5",
        "cl_per_node": "4",
    }
    fresh = _open(link, "views/cluster.py")
    assert fresh.number_input(key="cl_batch").value == 1024
    assert fresh.number_input(key="cl_seq").value == 8192
    assert fresh.number_input(key="cl_max_nodes").value == 128
    assert fresh.number_input(key="cl_price_h100-80gb").value == 3.5
    assert fresh.selectbox(key="cl_intra_h100-80gb").value == "pcie5"
    assert fresh.number_input(key="cl_per_node").value == 4
    assert not any("link" in w for w in _said(fresh).split(". ")), _said(fresh)
    assert {k: v for k, v in _params(fresh).items() if k.startswith("cl_")} == {
        k: v for k, v in link.items() if k != "model"
    }  # the link stays as it was shared
    at = start()  # the same fields set by hand: the same answers
    at.switch_page("views/cluster.py").run()
    for key, value in (("cl_batch", 1024), ("cl_seq", 8192), ("cl_max_nodes", 128), ("cl_per_node", 4)):
        at.number_input(key=key).set_value(value).run()
    at.number_input(key="cl_price_h100-80gb").set_value(3.5).run()
    at.selectbox(key="cl_intra_h100-80gb").set_value("pcie5").run()
    assert not at.exception, at.exception
    assert [m.value for m in fresh.metric] == [m.value for m in at.metric]


def test_a_serving_link_reopens_its_fields_and_a_disabled_ones_value():
    link = {"model": "mlp", "cl_kind": "inference", "cl_serve_batch": "8", "cl_prompt": "1024", "cl_generate": "512"}
    fresh = _open({**link, "cl_serve_engine": "eager", "cl_accelerator": "h200-141gb"}, "views/cluster.py")
    assert fresh.selectbox(key="cl_kind").value == "inference"
    assert [fresh.number_input(key=k).value for k in ("cl_serve_batch", "cl_prompt", "cl_generate")] == [8, 1024, 512]
    assert fresh.radio(key="cl_serve_engine").value == "eager"  # bound: its default is the radio's own
    assert fresh.selectbox(key="cl_accelerator").value == "h200-141gb"
    assert "link" not in _said(fresh), _said(fresh)
    assert _params(fresh)["cl_serve_engine"] == "eager"


def test_a_training_memory_link_reopens_its_budget_loss_and_optimizer():
    fresh = _open({"model": "mlp", "tm_budget": "0.25", "tm_loss": "mean"}, "views/training.py")
    assert fresh.select_slider(key="tm_budget").value == 0.25 and fresh.selectbox(key="tm_loss").value == "mean"
    assert "link" not in _said(fresh)


def test_bound_notes_name_what_no_widget_took():
    link = {"explore_overlay": "rainbow", "pp_microbatches": "4", "pp_ranks": "99", "explore_search": "fc"}
    state = {"explore_overlay": "device", "pp_microbatches": 4, "pp_ranks": 4}  # explore_search: not drawn
    notes = bound_notes(link, state, "pipeline", {"pp_microbatches": "4"})
    assert set(notes) == {"explore_overlay", "pp_ranks", "explore_search"}, notes
    assert "explore_overlay in the link was ignored: no widget of the page" in notes["explore_overlay"]  # Explore's
    assert "pp_ranks=99" in notes["pp_ranks"] and "it shows 4" in notes["pp_ranks"]
    notes = bound_notes(link, state, "explore", {"explore_overlay": "rainbow"})  # left in the URL: no binding
    assert "no widget of the page" in notes["explore_overlay"] and "explore_search" in notes
    assert not bound_notes(
        {"sh_spec_from": "model", "model": "mlp"}, {"model": "mlp"}, "learn"
    )  # by hand; the sidebar's
    notes = bound_notes({"model": "nosuch", "dev_count": "x", "nosuch": "1"}, {"model": "mlp", "dev_count": 4}, "learn")
    assert "model=nosuch" in notes["model"] and "it shows mlp" in notes["model"]  # the sidebar's, on every page
    assert "dev_count=x" in notes["dev_count"] and "no widget of the page takes it" in notes["nosuch"]


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


# --- a link names only keys whose widget takes a value; every clamp or drop is said; long
# values are cut in the note.


def test_a_link_to_a_button_or_a_key_no_widget_reads_keeps_the_cluster_page_and_says_why():
    keys = ("cl_min_cut_run", "cl_open", "cl_dl_eager", "cl_pareto", "cl_x", "cl_intra_nosuchcard", "tm_budget")
    fresh = _open(
        {"model": "mlp", **{k: "1" for k in keys}, "cl_price_h100-80gb": "1e300", "cl_per_node": "999"},
        "views/cluster.py",
    )
    said = _said(fresh)
    for key in keys:
        assert f"{key} in the link was ignored: no widget" in said, (key, said)
        assert key not in fresh.query_params, key  # not carried on
    assert not {"cl_x", "cl_intra_nosuchcard", "tm_budget"} & set(fresh.session_state)  # nor put in session state
    assert fresh.session_state["cl_min_cut_run"] is False  # the button was not pressed by the link
    assert "cl_price_h100-80gb=1e300 in the link was ignored: out of its widget's range" in said
    assert "cl_per_node=999" in said and "it shows 8" in said  # dropped by the binding: the widget's default
    assert fresh.number_input(key="cl_per_node").value == 8
    fresh.run()  # said once
    assert "in the link" not in _said(fresh)


def test_a_bound_value_out_of_a_bounded_fields_range_is_said_beside_it():
    fresh = _open({"model": "mlp", "cl_seq": "0"}, "views/cluster.py")
    assert "Sequence length (tokens) must be from 1" in _said(fresh) and "not applied" in _said(fresh)


def test_a_learn_link_reopens_its_algorithm_and_step_and_drops_what_they_cannot_hold():
    fresh = _open({"model": "mlp", "learn_algorithm": "size_based", "learn_step": "2"}, "views/learn.py")
    assert fresh.radio(key="learn_algorithm").value == "size_based" and fresh.slider(key="learn_step").value == 2
    assert "link" not in _said(fresh), _said(fresh)
    fresh = _open({"model": "mlp", "learn_algorithm": "fastest", "learn_step": "9" * 5000}, "views/learn.py")
    assert fresh.radio(key="learn_algorithm").value == "size_based" and fresh.slider(key="learn_step").value == 1
    assert "learn_algorithm=fastest" in _said(fresh) and "5,000 characters" in _said(fresh), _said(fresh)
    read = read_page_link({"learn_step": "999999"})  # past the last step: the player shows the last
    assert read.values == {"learn_step": 999999} and not read.notes
    assert read_page_link({"learn_step": "0"}).notes and read_page_link({"learn_step": "-2"}).notes


def test_a_long_value_is_cut_in_its_note():
    long = "dp2 " * 20_000
    notes = bound_notes({"cl_write": long, "cl_kind": "x" * 80_000}, {"cl_kind": "training"}, "cluster", {})
    assert len(notes) == 2 and all(len(n) < 400 for n in notes.values()), [len(n) for n in notes.values()]
    assert "80,000 characters" in notes["cl_kind"]
    read = read_page_link({"sh_spec_from": long})
    assert read.values == {} and len(read.notes) == 1 and len(read.notes[0]) < 400
    sidebar = bound_notes({"dev_memory": "9" * 80_000, "k" * 80_000: "1"}, {"dev_memory": "16 GiB"}, "explore")
    assert len(sidebar) == 2 and all(len(n) < 400 for n in sidebar.values()), [len(n) for n in sidebar.values()]


def test_an_engine_radio_carries_the_engines_name_and_drops_another():
    fresh = _open({"model": "mlp", "cl_engine": "graphs", "cl_kind": "training"}, "views/cluster.py")
    assert fresh.radio(key="cl_engine").value == "graphs" and _params(fresh)["cl_engine"] == "graphs"
    fresh = _open({"model": "mlp", "cl_engine": "turbo"}, "views/cluster.py")
    assert fresh.radio(key="cl_engine").value == "eager" and "cl_engine=turbo in the link was ignored" in _said(fresh)


def test_a_sidebar_link_without_a_model_applies_to_the_default_model():
    from explorer.builders.config import DEFAULT_MODEL

    fresh = _open({"mode": "kl_based", "dev_count": "3"}, "views/explore.py")
    assert fresh.selectbox(key="model").value == DEFAULT_MODEL
    assert fresh.session_state["config"].mode == "kl_based" and fresh.session_state["dev_count"] == 3
    assert _params(fresh)["mode"] == "kl_based"


def test_a_size_knob_past_what_a_number_box_holds_is_dropped_with_a_note():
    fresh = _open({"model": "mlp", "knob_mlp_hidden": "1" + "0" * 20, "knob_mlp_n_layer": "2"}, "views/explore.py")
    assert fresh.number_input(key="knob_mlp_n_layer").value == 2
    assert "knob_mlp_hidden=100000000000000000000 in the link was ignored" in _said(fresh), _said(fresh)
    assert fresh.number_input(key="knob_mlp_hidden").value == 256 and "knob_mlp_hidden" not in fresh.query_params
