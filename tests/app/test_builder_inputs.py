"""The app's pure builders (inputs, edits, teaching, config), tested without Streamlit: tables, figures, inputs, edits, teaching."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from builder_helpers import MiB, default_devices, over_capacity_plan
from hypothesis import given
from hypothesis import strategies as st

import partitioner
import sample_models
from explorer.builders import editing, inputs, tables, teaching, timeline
from explorer.builders.config import ModelChoice, PlanConfig, device_key, devices_from_key
from partitioner import Device
from partitioner.accelerator.api import partition_with
from partitioner.testing.synthetic import synthetic_graph


@given(st.integers(min_value=1, max_value=2**45))
def test_exact_bytes_text_parses_back(n):
    assert partitioner.parse_bytes(inputs.exact_bytes_text(n)) == n


def test_exact_bytes_text_examples():
    assert inputs.exact_bytes_text(3 * MiB // 2) == "1.5 MiB"
    assert inputs.exact_bytes_text(400 * MiB) == "400 MiB"
    assert inputs.exact_bytes_text(1000) == "1000 B"


def test_device_rows_round_trip_and_presets():
    devices = inputs.rows_to_devices(inputs.device_rows(3, "1.5 MiB"))
    assert [(d.name, d.memory_bytes, d.logical_id) for d in devices] == [
        (f"dev_{i}", 3 * MiB // 2, i) for i in range(3)
    ]
    a100 = inputs.rows_to_devices(inputs.device_rows(2, "", "a100-40gb"))
    assert a100[0].memory_bytes == 40 * 2**30 and a100[0].peak_flops == 312e12
    assert a100[1].link_bandwidth_bytes_per_s == pytest.approx(300e9) and a100[1].kind == "a100-40gb"


def test_rows_to_devices_mixed_blank_and_nan_cells():
    rows = [
        {
            "name": "big",
            "preset": "custom",
            "memory": "16GiB",
            "peak TFLOP/s": float("nan"),
            "memory GB/s": None,
            "link GB/s": 50,
        },
        {"name": None, "preset": "t4-16gb", "memory": None},
    ]
    big, t4 = inputs.rows_to_devices(rows)
    assert big.peak_flops is None and big.link_bandwidth_bytes_per_s == 50e9
    assert t4.name == "dev_1" and t4.memory_bytes == 16 * 2**30 and t4.peak_flops == 65e12


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"name": "a", "preset": "custom", "memory": ""}], "memory is empty"),
        ([{"name": "a", "preset": "custom", "memory": "lots"}], r"device row 1 \(a\).*16GiB"),
        (
            [{"name": "a", "preset": "tpu-v9", "memory": "1GiB"}],
            "unknown device type 'tpu-v9'; choose one of custom, a100-40gb",
        ),
        ([{"name": "a", "memory": "1GiB", "link GB/s": -1}], "link GB/s must be > 0"),
        ([{"name": "a", "memory": "1GiB"}, {"name": "a", "memory": "1GiB"}], "unique; a repeat"),
        ([], "table is empty"),
    ],
)
def test_rows_to_devices_errors_name_the_row_and_fix(rows, message):
    with pytest.raises(inputs.InputError, match=message):
        inputs.rows_to_devices(rows)


def test_a_profile_measured_here_is_a_device_type(tmp_path, monkeypatch):
    """A profile ``partition-explorer calibrate`` cached is offered beside the presets; its devices
    carry the profile (the Pipeline and Sharding pages predict on its curves), and the plan's
    config key holds it and gives it back."""
    from runtime.test_calibrate import _profile

    from explorer.builders.config import device_key, devices_from_key

    monkeypatch.setenv("PARTITION_EXPLORER_CACHE", str(tmp_path))
    assert inputs.device_types()[-1] != "box"
    profile = _profile("box")
    profile.save(tmp_path / "profiles" / "box.json")
    assert inputs.device_types()[-1] == "box"
    rows = inputs.device_rows(2, "1 GiB", "box")
    assert [r["name"] for r in rows] == ["box_0", "box_1"] and rows[0]["peak TFLOP/s"] == profile.peak_flops / 1e12
    devices = inputs.rows_to_devices(rows)
    assert [d.profile for d in devices] == [profile, profile] and devices[0].memory_bytes == 8 * 2**30
    assert devices[0].kind == "box"
    key = tuple(device_key(d) for d in devices)
    assert hash(key) == hash(tuple(device_key(d) for d in inputs.rows_to_devices(rows)))
    assert devices_from_key(key) == devices
    (tmp_path / "profiles" / "box.json").unlink()  # deleted since: named, with what there is
    with pytest.raises(inputs.InputError, match="unknown device type 'box'; choose one of custom"):
        inputs.rows_to_devices(rows)


def test_parse_node_latency_json_and_csv_forms():
    expected = {"fc1": (1e-6, 2e-6), "relu": (3e-7, 0.0)}
    as_pairs = json.dumps({"fc1": [1e-6, 2e-6], "relu": [3e-7, 0]})
    as_dicts = json.dumps({"fc1": {"mem_s": 1e-6, "compute_s": 2e-6}, "relu": {"mem_s": 3e-7, "compute_s": 0}})
    as_list = json.dumps(
        [{"name": "fc1", "mem_s": 1e-6, "compute_s": 2e-6}, {"name": "relu", "mem_s": 3e-7, "compute_s": 0}]
    )
    as_csv = "name,mem_s,compute_s\nfc1,1e-6,2e-6\nrelu,3e-7,0\n"
    for text, name in [(as_pairs, "a.json"), (as_dicts, "b.json"), (as_list, "c.json"), (as_csv, "d.csv")]:
        assert inputs.parse_node_latency(text.encode(), name) == expected


@pytest.mark.parametrize(
    "text, name, message",
    [
        ("", "x.json", "empty"),
        ("{nope", "x.json", "not valid JSON"),
        ('{"fc1": [1]}', "x.json", "needs a pair"),
        ('{"fc1": [1, -2]}', "x.json", ">= 0"),
        ("node,time\nfc1,1\n", "x.csv", "name,mem_s,compute_s"),
        ("name,mem_s,compute_s\nfc1,abc,1\n", "x.csv", "line 2"),
    ],
)
def test_parse_node_latency_errors(text, name, message):
    with pytest.raises(inputs.InputError, match=message):
        inputs.parse_node_latency(text, name)


def test_user_models_are_off_unless_the_operator_allows_them():
    assert not inputs.user_models_allowed({}, ["app.py"])
    assert inputs.user_models_allowed({inputs.ALLOW_USER_MODELS_ENV: "1"}, ["app.py"])
    assert inputs.user_models_allowed({}, ["app.py", "--allow-user-models"])
    assert not inputs.user_models_allowed({inputs.ALLOW_USER_MODELS_ENV: "0"}, [])


# -- editing -------------------------------------------------------------------------------


def test_move_node_to_new_partition_and_back(mlp):
    devices = partitioner.parse_devices("4x64KiB")
    plan = partitioner.partition(mlp, devices, force_partition=True)
    edit = editing.edit_from_plan(plan, "test")
    with pytest.raises(dataclasses.FrozenInstanceError):  # a record: edits make new ones
        edit.source = "changed"  # type: ignore[misc]
    last = [p for p in plan.partitions if len(p.node_names) > 1][-1]
    node = last.node_names[-1]
    moved = editing.move_node(edit, node, editing.NEW, [3])
    new_id = len(plan.partitions)
    assert moved.node_to_partition[node] == new_id and moved.partition_to_devices[new_id] == (3,)
    assert edit.node_to_partition[node] == last.id  # the original is untouched
    scored = editing.evaluate_edit(moved, mlp, devices)
    assert len(scored.partitions) == len(plan.partitions) + 1
    back = editing.move_node(moved, node, last.id)
    assert new_id not in back.partition_to_devices  # emptied partitions are dropped
    assert editing.evaluate_edit(back, mlp, devices).latency_s == pytest.approx(plan.latency_s)
    with pytest.raises(KeyError, match="not in the plan"):
        editing.move_node(edit, "nope", 0)


def test_edits_that_break_rules_are_scored_and_explained(mlp):
    devices = partitioner.parse_devices("2x16KiB")
    plan = partitioner.partition(mlp, devices)
    assert len(plan.partitions) == 2
    edit = editing.edit_from_plan(plan, "test")
    crowded = editing.place_partition(edit, 1, [0])
    scored = editing.evaluate_edit(crowded, mlp, devices)
    assert any("move nodes to another device or add memory" in v.message for v in scored.violations(mlp))
    first = plan.partitions[0].node_names[0]
    cyclic = editing.evaluate_edit(editing.move_node(edit, first, 1), mlp, devices)
    assert any("cycle" in v.message for v in cyclic.violations(mlp))
    replicated = editing.place_partition(edit, 0, [1, 0, 1])
    assert replicated.partition_to_devices[0] == (0, 1)


def test_undo_history_steps_back_and_keeps_the_last_fifty(mlp):
    plan = partitioner.partition(mlp, partitioner.parse_devices("2x16KiB"))
    edit = editing.edit_from_plan(plan, "test")
    moved = editing.place_partition(edit, 0, [1])
    history = editing.remember(editing.remember((), "the first edit", None), "a placement", edit)
    history, back = editing.undo(history)
    assert back == edit and history == (("the first edit", None),)
    assert editing.undo(history) == ((), None)  # back to the current plan
    with pytest.raises(IndexError, match="nothing to undo"):
        editing.undo(())
    long = ()
    for i in range(60):
        long = editing.remember(long, f"edit {i}", moved)
    assert len(long) == editing.HISTORY_LIMIT and long[0][0] == "edit 10"


def test_a_loaded_plan_is_scored_at_its_own_rate_the_sidebars_at_the_sidebars(mlp):
    devices = partitioner.parse_devices("2x16KiB")
    loaded = partitioner.partition(mlp, devices, transfer_rate_bytes_per_s=1e6)
    current = partitioner.partition(mlp, devices)
    mine = editing.edit_from_plan(loaded, "file p.json", loaded=True)
    assert editing.scoring_inputs(mine, current, 5e9, None) == (loaded, 1e6, loaded.options.node_latency_dict)
    theirs = editing.edit_from_plan(current, "the plan")
    assert theirs.loaded is None and editing.scoring_inputs(theirs, current, 5e9, None) == (current, 5e9, None)


# -- teaching and config -------------------------------------------------------------------


def test_every_mode_has_teaching_text():
    assert set(teaching.MODE_TEXT) == set(partitioner.MODES)


def test_single_partition_is_explained(mlp):
    plan = partitioner.partition(mlp, partitioner.parse_devices("2x1GiB"))
    notes = teaching.explain_plan(plan)
    assert "One partition" in notes[0] and "force partitioning" in notes[0]


def test_plan_notes_mention_replicas_free_transfers_and_over_capacity(dlrm, plans):
    notes = " ".join(teaching.explain_plan(plans["sparse_nn"]))
    assert "Replicated" in notes and "Critical path" in notes
    free = partitioner.partition(dlrm, default_devices("dlrm"))
    assert "Transfers are free" in " ".join(teaching.explain_plan(free))
    _, over = over_capacity_plan()
    assert "Over capacity" in " ".join(teaching.explain_plan(over))


def test_plan_config_is_hashable_and_feeds_partition(mlp):
    devices = partitioner.parse_devices("4x64KiB")
    config = PlanConfig.build(
        ModelChoice("mlp", (("n_layer", 4),)),
        devices,
        mode="kl_based",
        force_partition=True,
        node_latency={"linear": (1e-6, 2e-6)},
    )
    assert hash(config) == hash(
        PlanConfig.build(
            ModelChoice("mlp", (("n_layer", 4),)),
            devices,
            mode="kl_based",
            force_partition=True,
            node_latency={"linear": (1e-6, 2e-6)},
        )
    )
    assert config.device_list() == devices
    assert devices_from_key((device_key(devices[0]),)) == devices[:1]
    assert config.with_mode("size_based").mode == "size_based"
    names = {n.name for n in mlp.nodes}
    node = next(n for n in ("linear", "layers_0") if n in names)
    config = PlanConfig.build(ModelChoice("mlp"), devices, node_latency={node: (1e-6, 2e-6)})
    plan = partition_with(mlp, config.device_list(), config.mode, config.options)
    assert plan.options.node_latency == ((node, (1e-6, 2e-6)),)
    assert ModelChoice("mlp", (("n_layer", 4),)).label == "mlp(n_layer=4)" == sample_models.label("mlp", {"n_layer": 4})


def test_pure_builders_import_no_streamlit():
    code = (
        "import importlib, pkgutil, sys, explorer.builders as b\n"
        "names = [m.name for m in pkgutil.iter_modules(b.__path__)]\n"
        "for n in names: importlib.import_module('explorer.builders.' + n)\n"
        "print(len(names), 'streamlit' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, loaded = out.stdout.split()
    assert int(count) >= 18 and loaded == "False"  # every builder module, none loading Streamlit


def test_timeline_draws_transfers_as_their_own_bars():
    graph = synthetic_graph([(0, 1), (1, 2)], [100, 100, 100])
    devices = [Device(f"d{i}", 1000, i) for i in range(3)]
    plan = partitioner.evaluate_plan(
        graph, devices, {"op0": 0, "op1": 1, "op2": 2}, {0: [0], 1: [1], 2: [2]}, transfer_rate_bytes_per_s=100.0
    )
    fig = timeline.timeline_figure(plan)
    times = tables.schedule(plan)
    unit, scale = tables.time_unit(plan.latency_s)
    transfers = {
        label: (y, base, width)
        for bar in fig.data
        for y, label, base, width in zip(bar.y, bar.text, bar.base, bar.x)
        if " to " in label
    }
    assert set(transfers) == {"P0 to P1", "P1 to P2"}
    for e in plan.edges:
        y, base, width = transfers[f"P{e.src} to P{e.dst}"]
        assert y == f"d{e.dst} incoming" and e.latency_s == pytest.approx(1.0)
        assert base == pytest.approx(times[e.src][1] / scale) and width == pytest.approx(e.latency_s / scale)
        # The receiving partition starts when its data has arrived: no unexplained gap.
        assert times[e.dst][0] == pytest.approx(times[e.src][1] + e.latency_s)


def test_readable_partition_table_has_units_and_digits(plans):
    plan = plans["cost_aware"]
    frame = tables.readable_partition_table(plan)
    assert list(frame["Partition"]) == [f"P{p.id}" for p in plan.partitions]
    unit, scale = tables.time_unit(plan.latency_s)
    for row, p in zip(frame.itertuples(), plan.partitions):
        assert row.Start.endswith(unit) and row.Finish.endswith(unit)
        assert float(row.Finish.split()[0]) == pytest.approx(p.finish_s / scale, rel=1e-3)
    assert all(n.endswith("node" if n.startswith("1 ") else "nodes") for n in frame["Nodes"])


def test_pipeline_figures_draw_every_action_and_each_stage_against_its_device():
    from explorer.builders import pipeline_figures
    from partitioner import Device, pipeline
    from partitioner.testing.synthetic import synthetic_graph

    sim = pipeline.simulate([0.01, 0.02, 0.01], microbatches=4, schedule="1f1b")
    fig = pipeline_figures.schedule_figure(sim, ranks=3)
    drawn = sum(len(t.x) for t in fig.data if t.name in pipeline_figures.KIND_NAMES.values())
    assert drawn == len(sim.timeline) == 3 * 4 * 2  # a forward and a backward per stage and microbatch
    idle = next(t for t in fig.data if t.name == "idle (bubble)")
    assert list(idle.y) == ["rank 0", "rank 1", "rank 2"]
    graph = synthetic_graph([(i, i + 1) for i in range(7)], [10] * 8)
    pp = pipeline.plan(
        graph, [Device(f"d{i}", 1000, i) for i in range(2)], stages=2, microbatches=2, schedule="gpipe", training="sgd"
    )
    memory = pipeline_figures.stage_memory_figure(pp, [1000, 1000])
    stacked = [t for t in memory.data if t.type == "bar"]
    assert [sum(v) for v in zip(*(t.y for t in stacked))] == pytest.approx(list(pp.stage_memory_bytes))
    sweep = pipeline_figures.microbatch_figure([(1, 0.04, 0.5), (4, 0.02, 0.2)], chosen=4)
    assert [list(t.x) for t in sweep.data] == [[1, 4], [1, 4]]


def test_training_memory_builders():
    from explorer.builders import training_figures
    from partitioner.remat.memory import RematResult

    module, inputs, _ = sample_models.load("mlp")
    graph = partitioner.trace(module, inputs)
    ops = [graph.nodes[v].name for v in graph.op_indices]
    results = [
        RematResult(
            b,
            tuple(ops[:k]),
            tuple(ops[k : k + 2]),
            100 * k,
            10,
            1000 * (4 - k),
            1e-9 * (4 - k),
            {n: 100 for n in ops[:k]},
        )
        for b, k in ((0.0, 0), (0.5, 2), (1.0, 4))
    ]
    fig = training_figures.tradeoff_figure(results, 0.5)
    assert list(fig.data[0].y) == [0, 200, 400] and len(fig.data) == 2  # the sweep and the current budget
    dot = training_figures.remat_to_dot(graph, results[1])
    saved, redo = training_figures.STATUS_COLOURS["saved"], training_figures.STATUS_COLOURS["recomputed"]
    assert dot.count(f'fillcolor="{saved}"') == 2 and dot.count(f'fillcolor="{redo}"') == 2
    assert dot.count("fillcolor=") == len(ops)
    devices = [partitioner.Device("a", 1000, 0), partitioner.Device("b", 2000, 1)]
    used = {
        0: {"parameters": 10, "gradients": 10, "optimizer": 20, "activations": 5},
        1: {"parameters": 30, "gradients": 30, "optimizer": 60, "activations": 7},
    }
    fig = training_figures.training_memory_figure(used, devices)
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == list(training_figures.PARTS)
    kib = 1024  # the axis unit follows the largest figure (2,000 B: KiB)
    assert [sum(t.y[i] for t in bars) for i in range(2)] == pytest.approx([45 / kib, 127 / kib])
    assert list(fig.data[-1].y) == pytest.approx([1000 / kib, 2000 / kib])


def test_stages_sharing_a_device_are_drawn_together_against_it():
    """Interleaved 1F1B puts stages s and s + 2 on one of 2 devices: one bar a device, its stages'
    weights and stashes stacked to what the plan says it holds, against its capacity."""
    from explorer.builders import pipeline_figures, pipeline_tables
    from partitioner import Device, pipeline
    from partitioner.testing.synthetic import synthetic_graph
    from partitioner.units import format_share

    graph = synthetic_graph([(i, i + 1) for i in range(11)], [10] * 12)
    devices = [Device(f"d{i}", 4000, i) for i in range(2)]
    pp = pipeline.plan(graph, devices, stages=4, microbatches=4, schedule="interleaved_1f1b", training="sgd")
    fig = pipeline_figures.stage_memory_figure(pp, [4000] * 4)
    bars = [t for t in fig.data if t.type == "bar"]
    totals: dict[str, float] = {}
    for t in bars:
        for x, y in zip(t.x, t.y):
            totals[x] = totals.get(x, 0.0) + y
    held = pp.device_memory_bytes()
    capacity = next(t for t in fig.data if t.name == "device capacity")
    assert list(capacity.x) == ["device 0", "device 1"]
    scale = 4000 / capacity.y[0]  # bytes a unit of the axis
    assert {x: y * scale for x, y in totals.items()} == pytest.approx({f"device {d}": b for d, b in held.items()})
    assert sum(t.showlegend is not False for t in bars) == 2  # weights and stash named once
    table = pipeline_tables.stages_table(pp, {0: "d0", 1: "d1"}, [4000] * 4, graph)
    assert list(table["Device holds"]) == [format_share(held[d], 4000) for d in pp.device_ids]
