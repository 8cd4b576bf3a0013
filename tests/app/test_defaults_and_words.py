"""What a practitioner expects to read: a headroom by default (the cluster page's 4 GiB of an
80 GiB device, as a share on every other page), colour scales from zero in formatted units, a
first page that says where to start, the techniques side by side, and words and numbers that
read right (a device holds, a mode's failure said once, stages named by layer, capacity drawn)."""

from __future__ import annotations

import json

from app_helpers import APP, TIMEOUT, errors, shown, start
from streamlit.testing.v1 import AppTest

from explorer.builders import figures, pipeline_figures, techniques
from explorer.builders.inputs import DEFAULT_HEADROOM_PERCENT
from partitioner import parse_bytes
from partitioner.draw.overlay import SCALE, colour_for

GiB = 2**30


def test_the_default_headroom_is_the_cluster_pages_on_every_page():
    at = start()
    assert at.number_input(key="dev_headroom").value == DEFAULT_HEADROOM_PERCENT > 0
    given = parse_bytes(at.text_input(key="dev_memory").value)
    planned = at.session_state["config"].device_list()[0].memory_bytes
    assert planned == int(given * (1 - DEFAULT_HEADROOM_PERCENT / 100))  # the modes plan within 95 %
    at.switch_page("views/cluster.py").run()
    assert not at.exception
    kept_gib = at.number_input(key="cl_headroom").value
    assert abs(kept_gib - 80 * DEFAULT_HEADROOM_PERCENT / 100) < 1e-9  # the same share of an 80 GiB H100


def test_a_colour_scale_starts_at_zero_so_a_rounding_stays_one_colour():
    low, high = figures.colour_range([71.675e9, 71.68e9])
    assert (low, high) == (0.0, 71.68e9)
    a, b = colour_for(71.675e9, low, high), colour_for(71.68e9, low, high)
    assert a == b or sum(abs(int(a[i : i + 2], 16) - int(b[i : i + 2], 16)) for i in (1, 3, 5)) < 6
    assert a != SCALE[0]  # not the pale end of the scale
    bar = figures.colourbar("memory", low, high)
    assert all(t.endswith("iB") or t.endswith(" B") for t in bar["ticktext"]) and "66.8 GiB" in bar["ticktext"]


def test_the_memory_colour_bar_on_explore_reads_in_bytes():
    at = start()
    at.selectbox(key="explore_overlay").set_value("memory").run()
    assert not at.exception
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    bars = [
        t["marker"] for s in specs for t in s["data"] if isinstance(t.get("marker"), dict) and "colorbar" in t["marker"]
    ]
    assert bars, "no chart coloured by memory"
    assert bars[0]["cmin"] == 0 and all(t.endswith("B") for t in bars[0]["colorbar"]["ticktext"])


def test_the_first_page_says_where_to_start():
    at = start()
    box = next(e for e in at.expander if e.label == "Start here")
    text = " ".join(shown(m.value) for m in box.markdown)
    assert "Pick a model" in text and "llama-3-70b" in text
    links = [json.loads(json.dumps({"page": p.proto.page, "label": p.proto.label})) for p in at.get("page_link")]
    assert any("cluster" in link["page"] and "How many GPUs" in link["label"] for link in links), links
    assert any("techniques" in link["page"] for link in links), links


def test_the_techniques_page_puts_four_answers_side_by_side():
    at = start()
    at.switch_page("views/techniques.py").run()
    assert not at.exception and not errors(at), errors(at)
    table = at.table[0].value  # a static table: its texts wrap (issue 56)
    assert (
        len(table) == 4
        and table["technique"]
        .str.startswith(("Partitions", "Pipeline", "Tensor parallel", "Best cluster layout"))
        .all()
    )
    assert table["forward pass"].str.contains("s").all() and table["fits"].isin(["yes", "no"]).all()
    assert set(table["priced by"]) == {techniques.ROOFLINE, techniques.PLANNER}
    assert table["technique"].str.contains("fastest that fits").sum() == 2  # one for each cost model


def test_the_techniques_table_marks_only_a_fitting_answer_fastest():
    roof, planner = techniques.ROOFLINE, techniques.PLANNER
    rows = [
        techniques.Technique("a", "p", 2, 1.0, 9 * GiB, 8 * GiB, priced_by=roof),
        techniques.Technique("b", "p", 2, 2.0, GiB, 8 * GiB, priced_by=roof),
        techniques.Technique("c", "p", error="no layout fits"),
        techniques.Technique("d", "p", 2, 9.0, GiB, 8 * GiB, priced_by=planner),
    ]
    table = techniques.table(rows, 2)
    assert list(table["fits"]) == ["no", "yes", "no answer", "yes"]
    assert table["technique"][1].endswith("(fastest that fits)") and "fastest" not in table["technique"][0]
    assert table["technique"][3].endswith("(fastest that fits)")  # the planner's own: 9 s is not beside 2 s


def test_one_idle_device_holds_nothing():
    at = start()
    at.switch_page("views/learn.py").run()
    notes = " ".join(shown(m.value) for m in at.markdown if "Idle device" in m.value)
    if "," in notes.split("**")[-1].split("nothing")[0]:
        assert " hold nothing" in notes
    else:
        assert "Idle device:" in notes and " holds nothing" in notes, notes


def test_a_modes_failure_is_said_once():
    at = start()
    at.number_input(key="time_limit_s").set_value(1).run()  # the searches' limit: the wording is the same
    at.switch_page("views/compare.py").run()
    assert not at.exception
    failed = [shown(w.value) for w in at.warning if "found no plan" in w.value]
    assert failed, "a mode that finds no plan on the default model"
    assert all(w.count("found no plan") == 1 for w in failed), failed


def test_pipeline_stages_are_named_by_layer_and_the_capacity_is_drawn():
    at = start()
    at.selectbox(key="model").set_value("transformer").run()
    at.switch_page("views/pipeline.py").run()
    assert not at.exception
    spans = list(next(d.value for d in at.dataframe if "Stage" in d.value.columns)["Nodes"])
    assert all("blocks." in s or s in ("embedding", "head") for s in spans), spans
    figure = next(
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "Memory per stage" in json.dumps(json.loads(c.proto.spec)["layout"].get("title", ""))
    )
    capacity = next(t for t in figure["data"] if t.get("name") == "device capacity")
    assert figure["layout"]["yaxis"]["range"][1] > max(capacity["y"])


def test_stage_span_reads_layers():
    import partitioner
    import sample_models

    model, inputs = sample_models.build("transformer")
    graph = partitioner.trace(model, inputs)
    names = [graph.nodes[v].name for v in graph.op_indices]
    assert pipeline_figures.stage_span(graph, names).startswith("embedding, blocks.0")
    assert pipeline_figures.stage_span(graph, names).endswith(", head")


def test_no_widget_is_given_a_default_beside_its_session_value(monkeypatch):
    """Streamlit logs (once a process: its flag is reset here) a widget created with a default while
    its key holds a value set from code; no page does it (the Pipeline page's pp_ranks did)."""
    from streamlit.elements.lib import policies

    said: list[str] = []
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)
    monkeypatch.setattr(policies._LOGGER, "warning", lambda message, *args, **kwargs: said.append(message % args))
    pages = [
        "views/pipeline.py",
        "views/explore.py",
        "views/pipeline.py",
        "views/learn.py",
        "views/explore.py",
        "views/learn.py",
        "views/techniques.py",
        "views/training.py",
        "views/explore.py",
        "views/training.py",
    ]
    at = start()
    for page in pages:
        at.switch_page(page).run()
        assert not at.exception, at.exception
    assert not [line for line in said if "created with a default value" in line], said


def test_on_a_gpu_type_every_technique_is_priced_by_the_same_measured_kernels():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in {"model": "transformer", "dev_preset": "h100-80gb", "dev_count": "2"}.items():
        at.query_params[key] = value
    at.run()
    at.switch_page("views/techniques.py").run()
    assert not at.exception and not errors(at), errors(at)
    table = at.table[0].value  # a static table: its texts wrap (issue 56)
    assert set(table["priced by"]) == {techniques.KERNELS}
    assert table["technique"].str.contains("fastest that fits").sum() == 1  # one cost model: one fastest
