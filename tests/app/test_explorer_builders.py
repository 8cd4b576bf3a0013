"""The app's pure builders, tested without Streamlit: schedule, tables and figures."""

from __future__ import annotations

import re

import pytest
from builder_helpers import MiB, over_capacity_plan

import partitioner
from explorer.builders import editing, figures, tables, teaching, timeline
from partitioner.accelerator.compare import ModeResult, best_mode, compare_modes
from partitioner.draw.dag import CRITICAL_COLOUR, WARNING_COLOUR, device_colours
from partitioner.testing.synthetic import synthetic_graph

# -- schedule and tables -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["size_based", "sparse_nn", "cost_aware"])
def test_schedule_finishes_at_the_plan_latency_and_follows_the_start_rule(plans, mode):
    plan = plans[mode]
    times = tables.schedule(plan)
    assert set(times) == {p.id for p in plan.partitions}
    assert max(f for _, f in times.values()) == pytest.approx(plan.latency_s, rel=1e-9)
    latency = {p.id: p.latency_s for p in plan.partitions}
    for p in plan.partitions:
        incoming = [times[e.src][1] + e.latency_s for e in plan.edges if e.dst == p.id]
        assert times[p.id][0] == pytest.approx(max(incoming, default=0.0))
        assert times[p.id][1] == pytest.approx(times[p.id][0] + latency[p.id])


def test_schedule_of_a_cyclic_plan_is_empty():
    graph = synthetic_graph([(0, 1), (1, 2)], [10, 10, 10])
    plan = partitioner.evaluate_plan(
        graph, partitioner.parse_devices("2x1KiB"), {"op0": 0, "op1": 1, "op2": 0}, {0: [0], 1: [1]}
    )
    assert tables.schedule(plan) == {}
    fig = timeline.timeline_figure(plan)
    assert "cycle" in fig.layout.annotations[0].text


def test_partition_and_device_tables(plans):
    plan = plans["sparse_nn"]
    parts = tables.partition_table(plan)
    assert list(parts["partition"]) == [p.id for p in plan.partitions]
    assert parts["nodes"].sum() == sum(len(p.node_names) for p in plan.partitions)
    assert set(parts.loc[parts["critical"], "partition"]) == set(plan.critical_path)
    assert (parts["utilisation"] <= 1).all() and not parts["over_capacity"].any()
    assert parts["finish_s"].max() == pytest.approx(plan.latency_s)
    devices = tables.device_table(plan)
    assert list(devices["device"]) == [d.name for d in plan.devices]
    assert list(devices["used_bytes"]) == [plan.device_memory_bytes()[d.logical_id] for d in plan.devices]
    edges = tables.edge_table(plan)
    assert len(edges) == len(plan.edges)
    assert edges["critical"].sum() == len(plan.critical_path) - 1


def test_tables_flag_over_capacity():
    _, plan = over_capacity_plan()
    parts = tables.partition_table(plan)
    assert list(parts["over_capacity"]) == [True, False]
    assert list(tables.device_table(plan)["over_capacity"]) == [True, False]


def test_comparison_table_keeps_failed_modes_with_their_error(mlp):
    results = compare_modes(
        mlp, partitioner.parse_devices("4x64KiB"), ["size_based", "sparse_nn"], force_partition=True
    )
    frame = tables.comparison_table(results)
    assert list(frame["Mode"]) == ["size_based", "sparse_nn"]
    failed = frame.set_index("Mode").loc["sparse_nn"]
    assert "embedding" in failed["Error"] and failed["Latency"] == "-"
    assert frame.set_index("Mode").loc["size_based", "Best"].endswith("best")
    assert not any(c.islower() or "_" in c for c in frame.columns)  # headers people read


def test_best_mode_ignores_floating_point_noise():
    def result(mode, latency, parts):
        return ModeResult(mode, latency, parts, 0.5, 0.01, None, None)

    rows = [result("size_based", 2.2510592000000006e-05, 3), result("cost_aware", 2.2510592e-05, 17)]
    assert best_mode(rows) == "size_based"
    rows.append(result("kl_based", 1e-05, 5))
    assert best_mode(rows) == "kl_based"
    assert best_mode([ModeResult("x", None, None, None, 0.1, "failed", None)]) is None


def test_moves_table_lists_moved_nodes_not_renumbered_partitions(mlp):
    devices = partitioner.parse_devices("3x16KiB")
    plan = partitioner.partition(mlp, devices)
    assert len(plan.partitions) >= 2
    edit = editing.edit_from_plan(plan, "test")
    node = plan.partitions[0].node_names[-1]
    moved = editing.evaluate_edit(editing.move_node(edit, node, editing.NEW, [2]), mlp, devices)
    new = len(plan.partitions)
    assert moved.node_to_partition()[node] == new  # a new id; every other partition keeps its own
    assert {p.id: p.node_names for p in moved.partitions if p.id != new} == {
        p.id: tuple(n for n in p.node_names if n != node) for p in plan.partitions
    }
    frame = tables.moves_table(plan, moved)
    assert list(frame["node"]) == [node] and frame["to"][0] == f"P{new} (dev_2), new"
    assert tables.match_partitions(plan, moved) == {p.id: p.id for p in plan.partitions}


def test_units():
    assert tables.time_unit(2.5e-5) == ("us", 1e-6)
    assert tables.time_unit(3.0) == ("s", 1.0)
    assert tables.time_unit(0.0) == ("ns", 1e-9)
    assert tables.byte_unit(3 * MiB) == ("MiB", float(MiB))
    assert tables.byte_unit(10) == ("B", 1.0)


# -- figures -------------------------------------------------------------------------------


def test_memory_figure_colours_partitions_by_device_and_draws_capacity(plans):
    plan = plans["size_based"]
    fig = figures.memory_figure(plan)
    bars = [t for t in fig.data if t.type == "bar"]
    colours = device_colours(plan.devices)
    assert sum(len(b.x) for b in bars) == len(plan.partitions)
    for bar in bars:
        first = next(p for p in plan.partitions if f"P{p.id}" == bar.x[0])
        assert bar.marker.color == colours[first.device_ids[0]]
    capacity = next(t for t in fig.data if t.name == "device capacity")
    assert list(capacity.y) == pytest.approx([plan.devices[0].memory_bytes / MiB] * len(plan.partitions))
    assert fig.layout.yaxis.title.text == "memory (MiB)"


def test_memory_figures_mark_over_capacity_in_the_warning_colour():
    _, plan = over_capacity_plan()
    fig = figures.memory_figure(plan)
    over = next(t for t in fig.data if t.name == "over capacity")
    assert over.marker.color == WARNING_COLOUR and list(over.x) == ["P0"]
    device_fig = figures.device_memory_figure(plan)
    assert device_fig.data[0].marker.color[0] == WARNING_COLOUR
    assert device_fig.data[0].marker.color[1] != WARNING_COLOUR


def test_latency_figure_splits_compute_memory_communication_and_stars_the_critical_path(plans):
    plan = plans["sparse_nn"]
    fig = figures.latency_figure(plan)
    names = [t.name for t in fig.data]
    assert names == ["compute", "memory", "communication in", "partition latency", "critical path"]
    unit, scale = tables.time_unit(
        max(max(p.compute_latency_s, p.memory_latency_s, p.latency_s) for p in plan.partitions)
    )
    comm = tables.incoming_transfer_s(plan)
    by_label = dict(zip(fig.data[2].x, fig.data[2].y))
    for p in plan.partitions:
        assert by_label[f"P{p.id}"] == pytest.approx(comm[p.id] / scale)
    assert any(v > 0 for v in fig.data[2].y)  # the transfer rate makes edges cost something
    assert list(fig.data[4].x) == [f"P{i}" for i in sorted(plan.critical_path)]
    assert fig.data[4].marker.color == CRITICAL_COLOUR


def test_timeline_places_each_partition_on_its_devices_at_its_start(plans):
    plan = plans["sparse_nn"]
    fig = timeline.timeline_figure(plan)
    times = tables.schedule(plan)
    unit, scale = tables.time_unit(plan.latency_s)
    placed = {}
    for bar in fig.data:
        for y, label, base, width in zip(bar.y, bar.text, bar.base, bar.x):
            if " to " not in label:  # transfers are checked below
                placed.setdefault(int(label[1:]), []).append((y, base, width))
    names = {d.logical_id: d.name for d in plan.devices}
    for p in plan.partitions:
        rows = placed[p.id]
        assert sorted(y for y, _, _ in rows) == sorted(names[d] for d in p.device_ids)
        for _, base, width in rows:
            assert base == pytest.approx(times[p.id][0] / scale)
            assert width == pytest.approx(p.latency_s / scale)


def test_comparison_figure_has_four_panels_and_marks_failures(mlp):
    results = compare_modes(
        mlp, partitioner.parse_devices("4x64KiB"), ["size_based", "sparse_nn"], force_partition=True
    )
    fig = figures.comparison_figure(results)
    assert len([t for t in fig.data if t.type == "bar"]) == 4
    failed = [a for a in fig.layout.annotations if a.text == "failed"]
    # latency, partitions and memory are missing for the failed mode; its time taken is not
    assert len(failed) == 3 and {a.x for a in failed} == {"sparse_nn"}


# -- inputs --------------------------------------------------------------------------------


def test_readable_device_and_edge_tables_speak_in_units_and_name_partitions_as_the_dag(plans):
    plan = plans["cost_aware"]
    devices = tables.readable_device_table(plan)
    assert not [c for c in devices.columns if "_" in c or c != c.strip()]  # headers in words
    assert list(devices["Device"]) == [d.name for d in sorted(plan.devices, key=lambda d: d.logical_id)]
    assert all(re.fullmatch(r"(<0\.1|\d+\.\d)%", share) for share in devices["Of capacity"])  # as the partition table
    held = sorted(f"P{p.id}" for p in plan.partitions)
    assert sorted(x for cell in devices["Partitions"] if cell != "-" for x in cell.split(", ")) == held
    edges = tables.readable_edge_table(plan)
    assert len(edges) == len(plan.edges) and not [c for c in edges.columns if "_" in c]
    assert all(str(v).startswith("P") for v in list(edges["From"]) + list(edges["To"]))
    assert all(re.fullmatch(r"[\d.]+ (s|ms|us|ns)|free \(same device\)", t) for t in edges["Transfer time"])
    assert all(re.fullmatch(r"[\d.]+ (B|KiB|MiB|GiB|TiB)", b) for b in edges["Bytes crossing"])


def test_over_capacity_message_gives_sizes_people_read():
    graph, plan = over_capacity_plan()
    message = next(v.message for v in plan.violations(graph) if "of its" in v.message)
    assert "of its 1 KiB (" in message and " over)" in message
    assert not re.search(r"\d{4,} B", message)


def test_moves_table_counts_a_partition_placed_on_other_devices(mlp):
    devices = partitioner.parse_devices("3x16KiB")
    plan = partitioner.partition(mlp, devices)
    edit = editing.edit_from_plan(plan, "test")
    part = plan.partitions[-1]
    spare = next(d.logical_id for d in devices if d.logical_id not in part.device_ids)
    placed = editing.evaluate_edit(editing.place_partition(edit, part.id, [spare]), mlp, devices)
    frame = tables.moves_table(plan, placed)
    assert sorted(frame["node"]) == sorted(part.node_names)
    assert set(frame["change"]) == {"other devices"}
    assert set(frame["to"]) == {f"P{part.id} ({devices[spare].name})"}


def test_devices_needed_is_the_memory_lower_bound(mlp):
    from partitioner.devices import fewest_devices

    need = mlp.total_size_bytes
    devices = partitioner.parse_devices(f"4x{need // 3 + 1}B")
    assert fewest_devices(need, devices) == 3
    assert fewest_devices(need, partitioner.parse_devices(f"1x{need}B")) == 1
    assert fewest_devices(need, partitioner.parse_devices(f"2x{need // 3}B")) is None
    mixed = partitioner.parse_devices(f"1x{need // 4}B,1x{need}B")  # the largest first
    assert fewest_devices(need, mixed) == 1
    headline, why = teaching.devices_needed(mlp, devices)
    assert headline == "needs at least 3" and "lower bound" in why
    assert teaching.devices_needed(mlp, partitioner.parse_devices("1x1KiB"))[0] == "needs more than these"


def test_comparison_says_when_optimal_is_optimal_for_a_coarsened_graph_and_who_beats_it():
    from partitioner.accelerator.compare import ModeResult

    def row(mode: str, latency: float) -> ModeResult:
        return ModeResult(mode, latency, 2, 0.5, 0.1, None, None)

    results = [row("kl_based", 1.2e-3), row("optimal", 1.0e-3), row("accelerate", 0.999e-3)]
    frame = tables.comparison_table(results, op_count=4000).set_index("Mode")
    assert "coarsened graph only" in frame.loc["optimal", "Note"] and "4,000 ops" in frame.loc["optimal", "Note"]
    assert frame.loc["accelerate", "Note"].startswith("beats optimal by 1 us (0.1% of its 1 ms)")
    assert frame.loc["kl_based", "Note"] == ""
    small = tables.comparison_table(results, op_count=50).set_index("Mode")
    assert small.loc["optimal", "Note"] == ""


def test_predicted_parts_stack_beside_the_measured_time_with_the_error():
    from explorer.builders.measured_figures import predicted_parts_figure

    fig = predicted_parts_figure(
        [("compute", 3e-3), ("dtensor dispatch", 1e-3), ("all_reduce", 0.0)], 6e-3, "The <b>forward</b>"
    )
    names = [trace.name for trace in fig.data]
    assert names == ["compute", "dtensor dispatch", "measured"]  # a part of no time is not drawn
    assert sum(trace.y[0] for trace in fig.data[:-1]) == pytest.approx(4.0)  # in ms
    assert fig.data[-1].y[0] == pytest.approx(6.0) and fig.layout.yaxis.title.text == "time (ms)"
    assert "(error +50.0%)" in fig.layout.title.text and "<b>" not in fig.layout.title.text
