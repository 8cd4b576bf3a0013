"""The pages that split a model for one technique, under AppTest: Pipeline (stages, the schedule,
a real run), Training memory (min-cut, choices kept across pages) and Sharding (a suggestion, edits,
a real run)."""

from __future__ import annotations

import json

import pytest
from app_helpers import charts, errors, start


def test_pipeline_page_splits_simulates_and_explains_what_cannot_be():
    at = start()
    at.switch_page("views/pipeline.py").run()
    assert not at.exception and not errors(at)
    metrics = {m.label: m.value for m in at.metric}
    assert "Step time" in metrics and metrics["Bubble"].endswith("%")
    assert charts(at)[1] == 3  # schedule timeline, microbatch sweep, memory per stage
    splits = at.dataframe[0].value
    assert list(splits["split"]) == ["this split (exact DP)", "equal layers", "by parameters"]
    stages = at.dataframe[1].value
    assert len(stages) == at.number_input(key="pp_ranks").value
    # Interleaved schedules hold two stages per device; training adds the backward.
    at.selectbox(key="pp_schedule").set_value("interleaved_1f1b").run()
    at.selectbox(key="pp_training").set_value("training, Adam").run()
    # 4 devices of 4 MiB cannot hold the 8 stages with Adam's state together (19 MiB in all): said,
    # not drawn as a plan over the devices' memory.
    assert not at.exception and any("fits the devices' memory" in e for e in errors(at))
    at.text_input(key="dev_memory").set_value("8 MiB").run()
    assert not at.exception and not errors(at)
    stages = at.dataframe[1].value
    assert len(stages) == 2 * at.number_input(key="pp_ranks").value
    assert all(float(share.rstrip("%")) <= 100 for share in stages["Device holds"])
    # A microbatch count the schedule cannot take is a message, and the controls keep their values.
    # (torch's interleaved schedule on 4 ranks takes 1-8, 10, 12, ... microbatches, not 9)
    assert at.number_input(key="pp_ranks").value == 4
    at.number_input(key="pp_microbatches").set_value(9).run()
    assert not at.exception
    assert any("multiple of" in e for e in errors(at))
    assert at.selectbox(key="pp_schedule").value == "interleaved_1f1b"
    # The choices survive a trip to another page.
    at.switch_page("views/explore.py").run()
    at.switch_page("views/pipeline.py").run()
    assert at.number_input(key="pp_microbatches").value == 9


@pytest.mark.slow
def test_pipeline_page_runs_the_split_on_local_processes():
    at = start()
    at.selectbox(key="model").set_value("mlp").run()
    at.text_input(key="dev_memory").set_value("1 GiB").run()
    at.switch_page("views/pipeline.py").run()
    # A batch (mlp: 64 rows) that does not cut into the microbatches: the page says so up front.
    at.number_input(key="pp_ranks").set_value(2).run()
    at.number_input(key="pp_microbatches").set_value(5).run()
    assert any("does not split into 5" in i.value for i in at.info)
    assert all(b.disabled for b in at.button if b.key == "pp_run")
    at.number_input(key="pp_microbatches").set_value(4).run()
    at.selectbox(key="pp_training").set_value("training, SGD").run()
    at.button(key="pp_run").click().run(timeout=240)
    assert not at.exception and not errors(at)
    assert any("Outputs and gradients equal the model's" in s.value for s in at.success)
    measured = [d.value for d in at.dataframe if "forward / microbatch, measured" in d.value.columns]
    assert len(measured) == 1 and list(measured[0]["stage"]) == ["S0", "S1"]
    assert all(e.startswith(("+", "-")) or e == "0%" for e in measured[0]["error"])
    chart = next(
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if json.loads(c.proto.spec)["layout"]["title"]["text"].startswith("Simulated against measured")
    )
    assert [trace["name"] for trace in chart["data"]] == ["simulated", "measured"]


@pytest.mark.slow
def test_training_memory_page_runs_min_cut_and_keeps_the_choices():
    at = start()
    at.selectbox(key="model").set_value("mlp").run()
    at.switch_page("views/training.py").run()
    assert not at.exception and not errors(at)
    assert not at.metric  # nothing runs before the person asks: the worker takes seconds
    at.button(key="tm_run").click().run(timeout=240)
    assert not at.exception and not errors(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Recomputed nodes"] != "0" and metrics["Saved activations"].endswith("B")
    assert charts(at)[1] == 2  # the trade-off curve, training memory per device
    table = [d.value for d in at.dataframe if "activations" in d.value.columns][0]
    assert list(table.columns)[:5] == ["device", "parameters", "gradients", "optimizer", "activations"]
    # Budget 1 saves everything min-cut would; the results are not traced again.
    at.select_slider(key="tm_budget").set_value(1.0).run()
    assert not at.exception and {m.label: m.value for m in at.metric}["Recomputed nodes"] == "0"
    at.switch_page("views/explore.py").run()
    at.switch_page("views/training.py").run()
    assert at.select_slider(key="tm_budget").value == 1.0 and at.metric


@pytest.mark.slow
def test_sharding_page_suggests_edits_and_runs():
    at = start()
    at.number_input(key="dev_headroom").set_value(0.0)  # the whole 7 MiB: the suggestion's four all-reduces fit it
    at.text_input(key="dev_memory").set_value("7 MiB").run()
    at.number_input(key="dev_count").set_value(2).run()
    at.switch_page("views/sharding.py").run()
    assert not at.exception and not errors(at)
    assert any("Over capacity" in w.value for w in at.warning)  # 7.8 MiB each, unsharded
    largest = next(m for m in at.metric if m.label == "Largest device memory")
    assert not largest.delta  # nothing sharded: no "-0 B sharded"
    at.button(key="sh_suggest").click().run()
    assert not at.exception and not errors(at)
    assert any("Every device fits" in s.value for s in at.success)
    largest = next(m for m in at.metric if m.label == "Largest device memory")
    assert largest.delta.startswith("-") and largest.delta.endswith("sharded") and largest.delta != "-0 B sharded"
    collectives = [d.value for d in at.dataframe if "Collective" in d.value.columns][0]
    assert set(collectives["Collective"]) == {"all_reduce"} and len(collectives) == 4
    assert list(collectives.columns) == ["Collective", "Tensor", "Module", "Pass", "Bytes", "Time", "Why"]
    at.switch_page("views/explore.py").run()
    at.switch_page("views/sharding.py").run()
    assert any("Every device fits" in s.value for s in at.success)  # the suggestion was kept
    at.button(key="sh_run").click().run(timeout=240)
    assert not at.exception and not errors(at)
    assert any(
        "as predicted" in s.value and "Outputs equal" in s.value and "all\\_reduce forward" in s.value
        for s in at.success
    )
    # An entry that cannot run (as if typed in the table) is a message naming it; the edits stay.
    specs = at.session_state["shard_specs"]
    (key,) = specs
    specs[key]["blocks.0.ln_1.weight"] = "2"
    at.session_state["shard_specs"] = specs
    at.session_state["shard_editor_version"] = at.session_state["shard_editor_version"] + 1
    at.run()
    assert not at.exception
    assert any("blocks.0.ln_1.weight: only the weights of Linear and Embedding" in e for e in errors(at))
    assert at.session_state["shard_specs"][key]["blocks.0.ln_1.weight"] == "2"
