"""The Streamlit app under streamlit.testing.v1.AppTest: every page, model and mode runs; edits
re-plan; errors are shown in words and never lose what was entered."""

from __future__ import annotations

import json

import pytest
from app_helpers import MODELS, charts, errors, review, shown, start, summary

import partitioner
import sample_models
from explorer.builders.config import DEFAULT_MODEL, PLAN_MODES


def test_opens_on_a_model_that_needs_several_devices_and_shows_a_plan():
    at = start()
    assert at.selectbox(key="model").value == DEFAULT_MODEL
    count, memory = sample_models.default_devices(DEFAULT_MODEL)
    assert at.number_input(key="dev_count").value == count
    assert summary(at)["partitions"] > 1 and summary(at)["mode"] == partitioner.DEFAULT_MODE
    assert charts(at) == (1, 4)  # the DAG; memory, device memory, latency, timeline
    assert not errors(at)
    assert any(m.label == "Latency (critical path)" for m in at.metric)


@pytest.mark.slow
def test_every_sample_model_and_mode_runs_without_exception():
    at = start()
    at.number_input(key="time_limit_s").set_value(1).run()  # the optimal mode's solver
    for model in MODELS:
        at.selectbox(key="model").set_value(model).run()
        assert not at.exception, (model, at.exception)
        assert at.number_input(key="dev_count").value == sample_models.default_devices(model)[0]
        for mode in PLAN_MODES:
            at.selectbox(key="mode").set_value(mode).run()
            assert not at.exception, (model, mode, at.exception)
            if summary(at) is not None and summary(at)["mode"] == mode:
                assert charts(at)[0] >= 1 and charts(at)[1] == 4, (model, mode)
            else:  # e.g. sparse_nn on a model without embedding tables
                assert any("No plan" in e for e in errors(at)), (model, mode, errors(at))
        at.selectbox(key="mode").set_value(partitioner.DEFAULT_MODE)


def test_a_device_edit_re_plans():
    at = start()
    before = summary(at)
    at.text_input(key="dev_memory").set_value("8 MiB").run()
    assert summary(at)["partitions"] < before["partitions"]
    assert summary(at)["memory_utilisation"] != before["memory_utilisation"]
    at.number_input(key="dev_count").set_value(6).run()
    assert summary(at)["devices"] == 6
    # a per-device edit in the table: one big device holds the whole model
    version = at.session_state["dev_table_version"]
    at.session_state[f"dev_table_{version}"] = {
        "edited_rows": {0: {"memory": "64 MiB"}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    assert not at.exception
    assert summary(at)["partitions"] == 1
    assert any("One partition" in m.value for m in at.markdown)


def test_a_mode_change_and_options_re_plan():
    at = start()
    at.number_input(key="transfer_gbps").set_value(1.0).run()
    sized = summary(at)
    at.selectbox(key="mode").set_value("cost_aware").run()
    after = summary(at)
    assert sized["mode"] == partitioner.DEFAULT_MODE and after["mode"] == "cost_aware"
    assert after["latency_s"] <= sized["latency_s"]  # the search starts from the size-based fill
    at.number_input(key="transfer_gbps").set_value(0.0).run()
    assert summary(at)["latency_s"] < after["latency_s"]  # transfers are free again
    at.number_input(key="dev_count").set_value(8).run()
    at.checkbox(key="saturate_host").check().run()
    assert not at.exception
    assert any("Replicated" in m.value for m in at.markdown)


def test_bad_inputs_show_errors_and_keep_what_was_entered():
    at = start()
    at.text_input(key="dev_memory").set_value("lots").run()
    assert not at.exception
    assert any("16GiB" in e for e in errors(at))
    assert at.text_input(key="dev_memory").value == "lots"
    at.text_input(key="dev_memory").set_value("4 MiB")
    at.number_input(key="dev_count").set_value(1).run()
    assert any("add devices or memory" in e for e in errors(at))  # infeasible on one device
    assert at.number_input(key="dev_count").value == 1
    at.number_input(key="dev_count").set_value(4).run()
    assert not errors(at) and charts(at)[0] == 1
    at.number_input(key=f"knob_{DEFAULT_MODEL}_n_head").set_value(7).run()
    assert not at.exception
    assert any("n_head" in e for e in errors(at))
    assert at.number_input(key=f"knob_{DEFAULT_MODEL}_n_head").value == 7


def test_knobs_are_kept_per_model():
    at = start()
    at.number_input(key="knob_transformer_n_layer").set_value(1).run()
    small = summary(at)
    assert small["model"] == "transformer(n_layer=1)"
    at.selectbox(key="model").set_value("mlp").run()
    at.selectbox(key="model").set_value("transformer").run()
    assert at.number_input(key="knob_transformer_n_layer").value == 1
    assert summary(at)["model"] == "transformer(n_layer=1)"


def test_uploaded_node_latencies_are_used_and_bad_files_explained():
    at = start()
    at.radio(key="latency_source").set_value("upload").run()
    assert not at.exception and summary(at) is not None
    graph = sample_models.build(DEFAULT_MODEL)
    name = partitioner.trace(*graph).op_names[0]
    at.file_uploader(key="latency_file").upload("lat.csv", f"name,mem_s,compute_s\n{name},1,2\n".encode(), "text/csv")
    at.run()
    assert not at.exception
    assert summary(at)["latency_s"] >= 2.0  # one node now costs 2 s
    at.file_uploader(key="latency_file").set_value(("lat.json", b"{broken", "application/json")).run()
    assert any("not valid JSON" in e for e in errors(at))
    at.file_uploader(key="latency_file").set_value(("lat.json", b'{"no_such_node": [1, 2]}', "application/json"))
    at.run()
    assert any("no_such_node" in e for e in errors(at))


def test_compare_page_tabulates_every_mode_and_shows_failures():
    at = start()
    at.number_input(key="time_limit_s").set_value(1).run()
    at.switch_page("views/compare.py").run()
    assert not at.exception
    frame = at.dataframe[0].value
    assert list(frame["Mode"]) == PLAN_MODES
    assert frame.set_index("Mode").loc["sparse_nn", "Error"]  # the transformer has no tables to spread
    assert charts(at)[1] == 1
    at.button(key="compare_open_cost_aware").click().run()
    assert not at.exception
    assert at.selectbox(key="mode").value == "cost_aware"
    assert summary(at)["mode"] == "cost_aware" and charts(at)[0] == 1
    # Opening a mode from Compare keeps the model and devices the person chose.
    at.selectbox(key="model").set_value("dlrm").run()
    at.number_input(key="dev_count").set_value(5).run()
    at.switch_page("views/compare.py").run()
    at.button(key="compare_open_sparse_nn").click().run()
    assert not at.exception
    assert at.selectbox(key="model").value == "dlrm" and at.number_input(key="dev_count").value == 5
    assert summary(at)["mode"] == "sparse_nn" and summary(at)["model"] == "dlrm"


def test_review_page_downloads_and_rejects_bad_plans():
    at = review(start())
    labels = [b.proto.label for b in at.get("download_button")]
    assert {"Plan (JSON)", "DAG (SVG)", "DAG (DOT)"} <= set(labels)
    at.file_uploader(key="plan_upload").upload("plan.json", b"this is not json", "application/json")
    at.run()
    assert not at.exception
    assert any("not valid JSON" in e for e in errors(at))
    at.text_area(key="plan_paste").set_value(json.dumps({"schema_version": 99})).run()
    at.button(key="plan_paste_load").click().run()
    assert any("schema_version must be one of [1, 2]" in e for e in errors(at))
    at.text_area(key="plan_paste").set_value(json.dumps({"schema_version": 1, "mode": "x"})).run()
    at.button(key="plan_paste_load").click().run()
    assert any("lacks the field" in e for e in errors(at))
    assert at.text_area(key="plan_paste").value  # what was pasted is kept


def test_review_page_loads_a_plan_and_moves_a_node():
    at = review(start())
    module, example = sample_models.build(DEFAULT_MODEL)
    graph = partitioner.trace(module, example, name=DEFAULT_MODEL)
    count, memory = sample_models.default_devices(DEFAULT_MODEL)
    plan = partitioner.partition(graph, partitioner.parse_devices(f"{count}x{memory}B"), mode="size_based")
    at.file_uploader(key="plan_upload").upload("size.json", plan.to_json().encode(), "application/json")
    at.run()
    assert not at.exception
    assert any("valid for the current model" in s.value for s in at.success)
    edit = at.session_state["edit"]
    assert edit.node_to_partition == plan.node_to_partition()
    node = plan.partitions[0].node_names[-1]
    at.selectbox(key="edit_node").set_value(node)
    at.selectbox(key="edit_target").set_value(-1).run()  # enables the device choice
    at.selectbox(key="edit_device").set_value(count - 1)
    at.button(key="edit_move").click().run()
    assert not at.exception
    moved = at.session_state["edit"]
    assert len(set(moved.node_to_partition.values())) == len(plan.partitions) + 1
    assert moved.node_to_partition[node] != plan.node_to_partition()[node]
    assert any(m.label == "Partitions" and m.value == str(len(plan.partitions) + 1) for m in at.metric)
    moves = next(df.value for df in at.dataframe if "node" in df.value.columns)
    assert moves["node"].tolist() == [node]
    # a node moved against the flow of data makes a cycle: explained, drawn, nothing crashes
    first = plan.partitions[0].node_names[0]
    last = len(plan.partitions)  # the ids are 0..len(plan.partitions) after the move
    at.selectbox(key="edit_node").set_value(first)
    at.selectbox(key="edit_target").set_value(last).run()
    at.button(key="edit_move").click().run()
    assert not at.exception
    assert any("cycle" in e for e in errors(at))
    assert any(m.label == "Latency (critical path)" and "inf" in m.value for m in at.metric)
    # crowd every partition onto one device: over capacity, listed in words; the edit is kept
    for pid in range(len(set(at.session_state["edit"].node_to_partition.values()))):
        at.selectbox(key="edit_place_partition").set_value(pid)
        at.multiselect(key="edit_place_devices").set_value([0])
        at.button(key="edit_place").click().run()
        assert not at.exception
        if any("add memory" in e for e in errors(at)):
            break
    assert any("add memory" in e for e in errors(at))
    assert charts(at)[0] == 1
    at.switch_page("views/learn.py").run()
    at.switch_page("views/review.py").run()
    assert at.session_state["edit"].partition_to_devices  # nothing lost across pages
    at.button(key="edit_reset").click().run()
    assert "edit" not in at.session_state


def test_review_undo_steps_back_through_moves_placements_and_start_over():
    at = review(start())
    assert at.button(key="edit_undo").disabled  # nothing to undo yet
    before = at.session_state["edit_scored"][1]
    part = before.partitions[0]
    spare = next(d.logical_id for d in before.devices if d.logical_id not in part.device_ids)
    at.selectbox(key="edit_place_partition").set_value(part.id)
    at.multiselect(key="edit_place_devices").set_value([spare])
    at.button(key="edit_place").click().run()
    assert not at.exception
    assert at.session_state["edit"].partition_to_devices[part.id] == (spare,)
    moves = next(df.value for df in at.dataframe if "node" in df.value.columns)
    assert sorted(moves["node"]) == sorted(part.node_names)  # a placement moves every node of it
    assert set(moves["change"]) == {"other devices"}
    placed = at.session_state["edit"].partition_to_devices
    first = at.selectbox(key="edit_node").value
    at.selectbox(key="edit_node").set_value(first)
    at.selectbox(key="edit_target").set_value(-1).run()
    at.button(key="edit_move").click().run()
    assert not at.exception
    moved = at.session_state["edit"].node_to_partition
    at.button(key="edit_reset").click().run()  # start over: kept for Undo
    assert "edit" not in at.session_state
    at.button(key="edit_undo").click().run()
    assert at.session_state["edit"].node_to_partition == moved  # the move is back
    at.button(key="edit_undo").click().run()
    assert at.session_state["edit"].partition_to_devices == placed  # before the move
    at.button(key="edit_undo").click().run()
    assert "edit" not in at.session_state and not at.exception  # the plan as the mode made it
    assert at.button(key="edit_undo").disabled


def test_explore_headline_says_how_many_devices_the_model_needs_at_least():
    at = start()
    used = next(m for m in at.metric if m.label == "Devices used")
    assert used.proto.delta.startswith("needs at least ")
    needed = int(used.proto.delta.rsplit(" ", 1)[1])
    assert 1 <= needed <= int(used.value.split(" of ")[0])  # a lower bound on what the plan uses
    at.number_input(key="dev_headroom").set_value(0.0)  # the whole 1 KiB of each device is planned on
    at.text_input(key="dev_memory").set_value("1 KiB").run()  # no plan: the caption says what it needs
    assert errors(at) and any("all 4 devices together hold 4 KiB" in shown(c.value) for c in at.caption)
