"""partitioner.draw.dag: DOT for the partition DAG and one partition's nodes, and rendering it."""

from __future__ import annotations

import re
import shutil

import pytest

import partitioner
from partitioner import Device, Edge, Partition, Plan
from partitioner.draw.dag import (
    CRITICAL_COLOUR,
    PALETTE,
    WARNING_COLOUR,
    device_colours,
    partition_to_dot,
    plan_to_dot,
    render_dot,
)
from partitioner.testing.synthetic import synthetic_graph

KiB = 1024


def chain_plan(devices: str = "3x1KiB") -> tuple[partitioner.Graph, Plan]:
    """Six ops of 200 B in a chain, two per partition on three 1 KiB devices."""
    graph = synthetic_graph([(i, i + 1) for i in range(5)], [200] * 6, name="chain")
    plan = partitioner.evaluate_plan(
        graph,
        partitioner.parse_devices(devices),
        {f"op{i}": i // 2 for i in range(6)},
        {0: [0], 1: [1], 2: [2]},
        transfer_rate_bytes_per_s=1e6,
    )
    return graph, plan


def edges_of(dot: str) -> dict[tuple[int, int], str]:
    return {(int(a), int(b)): attrs for a, b, attrs in re.findall(r"p(\d+) -> p(\d+) \[(.*)\];", dot)}


def make_plan(partitions, devices, edges=(), critical=(), usage=()) -> Plan:
    return Plan(
        mode="aot_based",
        partitions=tuple(partitions),
        devices=tuple(devices),
        edges=tuple(edges),
        latency_s=1.0,
        critical_path=tuple(critical),
        transfer_rate_bytes_per_s=None,
        device_usage=tuple(usage),
        model="toy",
    )


def part(pid, devices, level=0, memory=100, names=None) -> Partition:
    return Partition(pid, tuple(names or (f"op{pid}",)), tuple(devices), memory, 0.0, 0.0, 0.5, level, (), ())


def test_chain_plan_dot_has_one_box_per_partition_ranks_and_labelled_edges():
    graph, plan = chain_plan()
    dot = plan_to_dot(plan, graph)
    assert len(plan.partitions) == 3
    for p in plan.partitions:
        assert f"  p{p.id} [" in dot
        assert f"P{p.id} on dev_{p.device_ids[0]}" in dot
    # memory used of capacity, in the form "600 B / 1 KiB (59%)"
    assert re.search(r"\d+ B / 1 KiB \(\d+%\)", dot)
    for level in {p.bfs_level for p in plan.partitions}:
        same = [p.id for p in plan.partitions if p.bfs_level == level]
        assert "{ rank=same; " + " ".join(f"p{i};" for i in sorted(same)) + " }" in dot
    edges = edges_of(dot)
    assert set(edges) == {(e.src, e.dst) for e in plan.edges}
    for e in plan.edges:
        assert f"{e.bytes} B" in edges[(e.src, e.dst)]
        assert "us" in edges[(e.src, e.dst)]  # 200 B at 1 MB/s: 200 us
    assert "rankdir=TB" in dot


def test_critical_path_is_bold_red_and_can_be_turned_off():
    graph, plan = chain_plan()
    assert plan.critical_path == (0, 1, 2)
    edges = edges_of(plan_to_dot(plan, graph))
    for pair in [(0, 1), (1, 2)]:
        assert CRITICAL_COLOUR in edges[pair] and "penwidth=2.5" in edges[pair]
    plain = plan_to_dot(plan, graph, highlight_critical=False)
    assert CRITICAL_COLOUR not in plain


def test_device_colours_are_stable_and_replicas_are_striped():
    devices = [Device(f"d{i}", 1000, i) for i in (3, 1, 2)]
    colours = device_colours(devices)
    assert colours == {1: PALETTE[0], 2: PALETTE[1], 3: PALETTE[2]}
    plan = make_plan(
        [part(0, (1, 2)), part(1, (3,), level=1)],
        devices,
        edges=[Edge(0, 1, 10, 0.0)],
        usage=[(1, 100), (2, 100), (3, 100)],
    )
    dot = plan_to_dot(plan)
    line0 = next(line for line in dot.splitlines() if line.startswith("  p0 ["))
    # One colour cell per device in an HTML label (Graphviz's "striped" style renders with an
    # empty path and a line through the label in the browser).
    assert f'<TD BGCOLOR="{PALETTE[0]}"' in line0 and f'<TD BGCOLOR="{PALETTE[1]}"' in line0
    assert "striped" not in line0 and "P0 on d1, d2" in line0
    if shutil.which("dot"):
        svg = render_dot(dot, "svg").decode()
        group = svg[svg.index("<title>p0</title>") : svg.index("</g>", svg.index("<title>p0</title>"))]
        assert f'fill="{PALETTE[0]}"' in group and f'fill="{PALETTE[1]}"' in group
        assert all(' d=""' not in tag for tag in group.split("<path")[1:])
    line1 = next(line for line in dot.splitlines() if line.startswith("  p1 ["))
    assert f'fillcolor="{PALETTE[2]}"' in line1


def test_over_capacity_partitions_are_outlined_in_the_warning_colour():
    devices = [Device("small", 100, 0), Device("big", 1000, 1)]
    plan = make_plan(
        [part(0, (0,), memory=150), part(1, (1,), level=1)],
        devices,
        edges=[Edge(0, 1, 10, 0.0)],
        usage=[(0, 150), (1, 100)],
    )
    dot = plan_to_dot(plan)
    line0 = next(line for line in dot.splitlines() if line.startswith("  p0 ["))
    line1 = next(line for line in dot.splitlines() if line.startswith("  p1 ["))
    assert WARNING_COLOUR in line0 and "dashed" in line0 and "(150%)" in line0
    assert WARNING_COLOUR not in line1
    assert "OVER" in dot  # the legend marks the device


def test_output_is_deterministic_and_escapes_names():
    devices = [Device('quo"te\\dev', 1000, 0)]
    plan = make_plan([part(0, (0,))], devices, usage=[(0, 100)])
    dot = plan_to_dot(plan, title='a "title"')
    assert 'label="a \\"title\\""' in dot
    assert 'quo\\"te\\\\dev' in dot
    assert "&quot;" in dot  # the legend's HTML-like label escapes too
    assert render_dot(dot, "svg").startswith(b"<?xml") or b"<svg" in render_dot(dot, "svg")
    graph, chain = chain_plan()
    assert plan_to_dot(chain, graph) == plan_to_dot(chain, graph)


def test_cyclic_hand_edited_plan_still_draws_without_ranks():
    graph = synthetic_graph([(0, 1), (1, 2)], [100, 100, 100])
    plan = partitioner.evaluate_plan(
        graph, partitioner.parse_devices("2x1KiB"), {"op0": 0, "op1": 1, "op2": 0}, {0: [0], 1: [1]}
    )
    assert plan.violations(graph)
    dot = plan_to_dot(plan, graph)
    assert "rank=same" not in dot
    assert set(edges_of(dot)) == {(0, 1), (1, 0)}
    assert b"<svg" in render_dot(dot, "svg")


def test_partition_to_dot_shows_nodes_and_dashed_stubs_for_outside_inputs():
    graph, plan = chain_plan()
    middle = plan.partitions[1]
    dot = partition_to_dot(plan, graph, middle.id)
    for name in middle.node_names:
        assert f"{name}\\n" in dot
    first_inside = graph.index[middle.node_names[0]]
    producer = graph.nodes[first_inside - 1].name
    assert f"{producer}\\nfrom P0" in dot
    assert "style=dashed" in dot
    assert "to P2" in dot
    first = partition_to_dot(plan, graph, 0)
    assert "model input" in first
    with pytest.raises(partitioner.PartitionError, match="no partition 9"):
        partition_to_dot(plan, graph, 9)


def test_partition_to_dot_on_a_traced_model_labels_op_shape_and_bytes():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    graph = partitioner.trace(model, (torch.randn(2, 8),))
    plan = partitioner.partition(graph, partitioner.parse_devices("1x1MiB"))
    dot = partition_to_dot(plan, graph, 0)
    assert "call_module: 0" in dot and "(2, 4) float32" in dot and "params 144 B" in dot
    assert "model output" in dot


def test_partition_to_dot_lists_names_the_model_lacks():
    graph, plan = chain_plan()
    other = synthetic_graph([(0, 1)], [10, 10])
    dot = partition_to_dot(plan, other, 2)
    assert "not in this model" in dot


def test_render_formats_and_errors(monkeypatch):
    graph, plan = chain_plan()
    dot = plan_to_dot(plan, graph)
    assert render_dot(dot, "dot") == dot.encode()
    assert b"<svg" in render_dot(dot, "svg")
    assert render_dot(dot, "png").startswith(b"\x89PNG")
    with pytest.raises(partitioner.PartitionError, match="svg, png, dot"):
        render_dot(dot, "pdf")
    with pytest.raises(partitioner.PartitionError, match="could not render"):
        render_dot("digraph { a -> ", "svg")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(partitioner.PartitionError, match="apt-get install graphviz"):
        render_dot(dot, "svg")
    assert render_dot(dot, "dot") == dot.encode()  # the source needs no binary


def test_hundreds_of_partitions_build_and_lay_out():
    # Speed is measured in bench/bench_app.py, not asserted here (these machines are noisy).
    n = 400
    graph = synthetic_graph([(i, i + 1) for i in range(n - 1)] + [(i, i + 2) for i in range(0, n - 2, 7)], [100] * n)
    devices = partitioner.parse_devices("8x64KiB")
    plan = partitioner.evaluate_plan(
        graph, devices, {f"op{i}": i for i in range(n)}, {i: [i % 8] for i in range(n)}, transfer_rate_bytes_per_s=1e9
    )
    dot = plan_to_dot(plan, graph)
    assert dot.count(" -> ") == len(plan.edges)
    svg = render_dot(dot, "svg").decode()
    assert svg.count('class="node"') >= n
