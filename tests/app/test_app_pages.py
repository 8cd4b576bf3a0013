"""The app's other pages under AppTest: Learn, user models, links, real runs, Review, Compare and
Hugging Face models (Pipeline, Training memory and Sharding: test_split_pages.py)."""

from __future__ import annotations

import pytest
from app_helpers import APP, TIMEOUT, charts, errors, review, shared_link, shown, start, summary
from streamlit.testing.v1 import AppTest

import partitioner
import sample_models
from explorer import compute
from explorer.builders.config import DEFAULT_MODEL, PLAN_MODES
from explorer.builders.inputs import ALLOW_USER_MODELS_ENV
from explorer.builders.teaching import MODE_TEXT
from explorer.sidebar import HF_MODEL, USER_MODEL


def test_learn_page_explains_the_current_plan():
    at = start()
    at.switch_page("views/learn.py").run()
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    labels = [e.label for e in at.expander]
    for mode in partitioner.MODES:
        assert any(label.startswith(MODE_TEXT[mode].title) for label in labels), mode
    assert "Critical path" in text and "cost model" in text.lower()


def test_user_models_only_when_the_operator_allows(monkeypatch, tmp_path):
    monkeypatch.delenv(ALLOW_USER_MODELS_ENV, raising=False)
    at = start()
    assert USER_MODEL not in at.selectbox(key="model").options
    (tmp_path / "my_models_for_app_test.py").write_text(
        "import torch\n"
        "def build():\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))\n"
        "    return model, (torch.randn(2, 16),)\n"
        "def broken():\n"
        "    raise RuntimeError('no weights here')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ALLOW_USER_MODELS_ENV, "1")
    at = start()
    at.selectbox(key="model").set_value(USER_MODEL).run()
    assert not at.exception and any("import path" in i.value for i in at.info)
    at.text_input(key="user_factory").set_value("my_models_for_app_test:broken").run()
    assert any("no weights here" in e for e in errors(at))
    at.text_input(key="user_factory").set_value("my_models_for_app_test:nope").run()
    assert any("did you mean" in e or "has no attribute" in e for e in errors(at))
    at.text_input(key="user_factory").set_value("my_models_for_app_test:build").run()
    assert not at.exception and not errors(at)
    assert summary(at)["model"] == "my_models_for_app_test:build" and charts(at)[0] == 1


def test_reload_the_model_shows_the_edited_factory(monkeypatch, tmp_path):
    source = (
        "import torch\n"
        "def build():\n"
        "    layers = [torch.nn.Linear(64, 64) for _ in range({n})]\n"
        "    return torch.nn.Sequential(*layers), (torch.randn(2, 64),)\n"
    )
    path = tmp_path / "my_models_for_reload_test.py"
    path.write_text(source.format(n=2))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ALLOW_USER_MODELS_ENV, "1")
    at = start()
    at.selectbox(key="model").set_value(USER_MODEL).run()
    at.number_input(key="dev_count").set_value(4).run()
    at.text_input(key="dev_memory").set_value("48KiB").run()
    at.text_input(key="user_factory").set_value("my_models_for_reload_test:build").run()
    assert not at.exception and not errors(at)
    before = at.session_state["config"]
    graph_before = compute.trace(before.model)
    assert len(graph_before.op_indices) == 2
    path.write_text(source.format(n=5))  # the person edits their model file
    at.button(key="user_reload").click().run()
    assert not at.exception and not errors(at)
    after = at.session_state["config"]
    graph_after = compute.trace(after.model)
    assert len(graph_after.op_indices) == 5 and graph_after.fingerprint() != graph_before.fingerprint()
    plan = compute.plan(after).plan
    assert plan is not None and len(plan.node_to_partition()) == 5
    assert summary(at)["partitions"] == len(plan.partitions)


def test_the_app_and_the_command_line_make_the_same_plan(tmp_path):
    from cli.main import main

    at = start()
    at.selectbox(key="model").set_value("mlp").run()
    at.selectbox(key="mode").set_value("kl_based").run()
    config = at.session_state["config"]
    ours = compute.plan(config).plan
    assert ours is not None
    count, memory = sample_models.default_devices("mlp")
    out = tmp_path / "plan.json"
    argv = ["plan", "mlp", "--devices", f"{count}x{memory}B", "--mode", "kl_based", "--out", str(out)]
    if config.transfer_rate_bytes_per_s:
        argv += ["--transfer-rate", repr(config.transfer_rate_bytes_per_s)]
    assert main(argv) == 0
    theirs = partitioner.Plan.from_json(out.read_text())
    assert theirs.model == ours.model == "mlp"
    assert theirs.node_to_partition() == ours.node_to_partition()
    assert theirs.partition_to_devices() == ours.partition_to_devices()
    assert theirs.latency_s == ours.latency_s and theirs.graph_fingerprint == ours.graph_fingerprint


def test_settings_live_in_the_url_so_a_view_can_be_shared_and_reloaded():
    at = start()
    at.selectbox(key="model").set_value("mlp").run()
    at.number_input(key="dev_count").set_value(6).run()
    at.selectbox(key="mode").set_value("kl_based").run()
    params = shared_link(at, "model", "dev_count", "mode")
    assert params["model"] == "mlp"
    # A fresh session opened on that URL (a reload, or a colleague's browser) shows the same view.
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    fresh.query_params.update(params)
    fresh.run()
    assert not fresh.exception
    assert fresh.selectbox(key="model").value == "mlp" and fresh.number_input(key="dev_count").value == 6
    assert fresh.selectbox(key="mode").value == "kl_based"
    assert fresh.session_state["config"] == at.session_state["config"]
    # Nonsense in the URL is ignored, never a traceback.
    odd = AppTest.from_file(APP, default_timeout=TIMEOUT)
    odd.query_params.update({"model": "mlp", "dev_count": "lots", "mode": "fastest"})
    odd.run()
    assert not odd.exception and odd.selectbox(key="mode").value == partitioner.DEFAULT_MODE


def test_default_scenario_shows_modes_that_differ():
    at = start()
    at.number_input(key="time_limit_s").set_value(1).run()
    at.switch_page("views/compare.py").run()
    frame = at.dataframe[0].value.set_index("Mode")
    ok = frame[frame["Error"] == ""]
    assert ok["Latency"].nunique() > 1  # a real link bandwidth: the modes' plans differ


def test_review_shows_a_loaded_plans_own_figures():
    at = review(start())
    module, example = sample_models.build(DEFAULT_MODEL)
    graph = partitioner.trace(module, example, name=DEFAULT_MODEL)
    count, memory = sample_models.default_devices(DEFAULT_MODEL)
    plan = partitioner.partition(
        graph, partitioner.parse_devices(f"{count}x{memory}B"), mode="cost_aware", transfer_rate_bytes_per_s=1e9
    )
    at.file_uploader(key="plan_upload").upload("slow_link.json", plan.to_json().encode(), "application/json")
    at.run()
    assert not at.exception
    latency = next(m for m in at.metric if m.label == "Latency (critical path)")
    assert latency.value == partitioner.format_seconds(plan.latency_s) and not latency.delta
    assert any("sidebar's rate" in i.value and "1 GB/s" in i.value for i in at.info)
    mode = next(m for m in at.metric if m.label == "Mode")
    assert shown(mode.value) == "cost_aware"  # not aot_based: the edit keeps the mode it came from
    # after a move it is the cost_aware plan, edited
    node = plan.partitions[0].node_names[-1]
    at.selectbox(key="edit_node").set_value(node)
    at.selectbox(key="edit_target").set_value(-1).run()
    at.button(key="edit_move").click().run()
    mode = next(m for m in at.metric if m.label == "Mode")
    assert shown(mode.value) == "cost_aware" and mode.delta == "edited"
    # Partition ids stay stable across an edit: the moves table names the old and the new one.
    moves = next(df.value for df in at.dataframe if "node" in df.value.columns)
    assert moves["node"].tolist() == [node]
    assert moves["from"].tolist()[0].startswith("P0 ") and moves["to"].tolist()[0].startswith(
        f"P{len(plan.partitions)} "
    )


def test_graph_cache_is_bounded_by_bytes(monkeypatch):
    from explorer.builders.config import ModelChoice

    monkeypatch.setattr(compute, "_GRAPHS", type(compute._GRAPHS)())
    small = ModelChoice("mlp", (("n_layer", 2),))
    size = compute._graph_bytes(compute.trace(small))
    monkeypatch.setattr(compute, "MAX_CACHE_BYTES", int(size * 2.5))
    for n in (3, 4, 5):
        compute.trace(ModelChoice("mlp", (("n_layer", n),)))
        assert compute.cached_graph_bytes() <= compute.MAX_CACHE_BYTES or len(compute._GRAPHS) == 1
    assert small not in compute._GRAPHS  # the oldest went first
    with pytest.raises(ValueError, match="sample models are built for real, up to 0.5 GiB"):
        sample_models.load("mlp", {"hidden": 20000})


@pytest.mark.slow
def test_explore_runs_the_plan_on_local_processes():
    at = start()
    at.button(key="run_local").click().run(timeout=300)
    assert not at.exception
    assert any("Outputs equal the model's" in s.value for s in at.success), [e.value for e in at.error]
    assert any(c.proto.spec and "measured" in c.proto.spec for c in at.get("plotly_chart"))


def test_torchs_numbers_on_request_and_both_side_by_side():
    at = start()
    table = next(df.value for df in at.dataframe if "latency, torch" in df.value.columns)
    assert list(table.columns) == [
        "",
        "latency, physical",
        "latency, torch",
        "peak memory, physical",
        "peak memory, torch",
    ]
    assert at.session_state["config"].options.cost_model == "physical"
    at.checkbox(key="torch_cost_model").check().run()
    assert not at.exception
    config = at.session_state["config"]
    assert config.options.cost_model == "torch" and compute.plan(config).plan.cost_model == "torch"
    assert any("torch cost model" in c.value for c in at.caption)
    review(at)
    assert any("latency, torch" in df.value.columns for df in at.dataframe)
    at.switch_page("views/learn.py").run()
    assert any("Two cost models" in m.value for m in at.markdown)


def test_optimal_mode_says_how_far_from_the_best_and_compare_measures_every_mode():
    at = start()
    at.number_input(key="time_limit_s").set_value(2).run()
    at.selectbox(key="mode").set_value("optimal").run()
    assert not at.exception
    config = at.session_state["config"]
    assert config.mode == "optimal" and config.options.time_limit_s == 2
    plan = compute.plan(config).plan
    assert plan.provenance.solver.startswith("CP-SAT searched")
    assert any(plan.bound_summary() in c.value for c in at.caption)
    at.switch_page("views/compare.py").run()
    frame = at.dataframe[0].value.set_index("Mode")
    assert frame.loc["optimal", "Gap to optimal"] == "0%"  # signs as a person writes them: never "+0.0%"
    ok = frame[frame["Error"] == ""]
    assert all(float(g.rstrip("%")) >= -1e-9 for g in ok["Gap to optimal"])
    assert all(g.endswith("%") for g in ok["Gap to bound"])
    at.switch_page("views/learn.py").run()
    assert any("Optimal: an exact solver" in m.value for m in at.markdown)


def test_bad_inputs_in_the_app_are_messages_not_tracebacks():
    at = start()
    for memory in ("1e400GiB", "99999999999999999999 TiB", "lots", "-4GiB", ""):
        at.text_input(key="dev_memory").set_value(memory).run()
        assert not at.exception, (memory, at.exception)
        assert errors(at) or at.info, memory  # the sidebar says what is wrong
    at.text_input(key="dev_memory").set_value("4MiB").run()
    at.radio(key="latency_source").set_value("upload").run()
    nested = ('{"a":' * 50_000 + "1" + "}" * 50_000).encode()
    for name, data in (("deep.json", nested), ("nan.csv", b"layers_0,nan,1\n"), ("bin.json", b"\x00\xff" * 64)):
        at.file_uploader(key="latency_file").upload(name, data, "application/octet-stream")
        at.run()
        assert not at.exception, (name, at.exception)
        assert errors(at), name
    at.radio(key="latency_source").set_value("roofline").run()
    at.selectbox(key="model").set_value("mlp").run()
    at.number_input(key="knob_mlp_hidden").set_value(100_000).run()
    assert not at.exception and any("lower the size settings" in e for e in errors(at))


@pytest.mark.slow
def test_a_hugging_face_architecture_by_name():
    pytest.importorskip("transformers")
    at = start()
    at.checkbox(key="follow_model").uncheck().run()  # its own tiny devices below, not the H100s a model gets
    at.selectbox(key="model").set_value(HF_MODEL).run()
    at.text_input(key="hf_name").set_value("gpt2")
    at.text_input(key="hf_set").set_value("n_layer=2 n_embd=64 n_head=4 vocab_size=1000")
    at.button(key="hf_build").click().run()
    at.text_input(key="dev_memory").set_value("1 MiB").run()
    assert not at.exception, at.exception
    assert summary(at)["model"] == "hf:gpt2(n_embd=64,n_head=4,n_layer=2,vocab_size=1000)"
    assert summary(at)["partitions"] >= 2 and charts(at)[0] >= 1
    at.number_input(key="time_limit_s").set_value(1).run()
    at.switch_page("views/compare.py").run()  # Accelerate's own device map beside the modes
    assert not at.exception, at.exception
    frame = at.dataframe[0].value.set_index("Mode")
    assert list(frame.index) == PLAN_MODES + ["accelerate"]
    row = frame.loc["accelerate"]
    assert row["Latency"] != "-" or "does not fit by our count" in row["Error"]
    at.switch_page("views/explore.py").run()
    at.text_input(key="hf_set").set_value("n_layers=2")
    at.button(key="hf_build").click().run()  # a typo is a message naming the field
    assert not at.exception and any("did you mean n_layer" in e for e in errors(at))
