"""The graph views' builders without Streamlit: the model collapsed by module, search, colour
overlays, and decision traces that replay to the algorithm's plan; then the same views in the
app under AppTest (collapse, search, overlay, side by side, step-through)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import partitioner
import sample_models
from partitioner.accelerator import steps
from partitioner.cost.model import node_seconds
from partitioner.draw.collapse import collapse, collapsed_to_dot, search
from partitioner.draw.dag import plan_to_dot
from partitioner.draw.nodeview import partition_to_dot, step_to_dot
from partitioner.draw.overlay import SCALE, colour_for, node_values, partition_values
from partitioner.testing.synthetic import random_fx_module

APP = str(Path(__file__).resolve().parents[2] / "explorer" / "app.py")


@pytest.fixture(scope="module")
def traced():
    model, inputs = sample_models.build("transformer")
    graph = partitioner.trace(model, inputs)
    devices = partitioner.parse_devices(f"4x{sample_models.spec('transformer').device_memory_bytes}")
    plan = partitioner.partition(graph, devices, mode="cost_aware")
    node_s = node_seconds(graph, list(plan.devices), plan.options.node_latency_dict)
    return graph, devices, plan, node_s


def test_collapsed_boxes_sum_their_members_and_cover_every_op_once(traced):
    graph, _, plan, node_s = traced
    cg = collapse(graph, plan, node_s, fold=False)
    assert sorted(v for g in cg.groups for v in g.members) == sorted(graph.op_indices)
    assert len(cg.groups) < len(graph.op_indices) / 3  # repeated blocks became boxes
    where = plan.node_to_partition()
    devices_of = {p.id: p.device_ids for p in plan.partitions}
    for g in cg.groups:
        assert g.output_bytes == sum(graph.output_bytes[v] for v in g.members)
        read = {u for v in g.members for u in graph.preds[v] if graph.nodes[u].op == "get_attr"}
        assert g.param_bytes == sum(graph.nodes[v].param_bytes for v in g.members) + sum(
            graph.output_bytes[u] for u in read
        )
        assert g.flops == sum(graph.nodes[v].flops for v in g.members)
        assert g.latency_s == pytest.approx(sum(node_s[v] for v in g.members))
        assert sum(n for _, n in g.devices) == sum(len(devices_of[where[graph.nodes[v].name]]) for v in g.members)
        assert set(g.partitions) == {where[graph.nodes[v].name] for v in g.members}
    blocks = [g for g in cg.groups if g.key.startswith("blocks.")]
    assert blocks and all(g.expandable for g in blocks)
    # Edge bytes: each output counted once per box that reads it.
    for a, b, n in cg.edges:
        assert n == sum(
            graph.output_bytes[v] for v in cg.groups[a].members if any(cg.box_of[w] == b for w in graph.users[v])
        )


def test_expanding_a_box_splits_exactly_its_members(traced):
    graph, _, plan, node_s = traced
    cg = collapse(graph, plan, node_s, fold=False)
    block = next(g for g in cg.groups if g.key.startswith("blocks."))
    opened = collapse(graph, plan, node_s, expanded={block.key}, fold=False)
    inside = [g for g in opened.groups if set(g.members) <= set(block.members)]
    assert len(inside) > 1 and sorted(v for g in inside for v in g.members) == sorted(block.members)
    assert len(opened.groups) == len(cg.groups) - 1 + len(inside)
    dot = collapsed_to_dot(opened, plan, overlay="flops", highlight=[0])
    assert f'id="m:{inside[0].key}"' in dot and "flops" in dot and "penwidth=4" in dot


def test_runs_of_top_level_nodes_merge_when_boxes_are_too_many():
    module, inputs = random_fx_module(3, 60)
    graph = partitioner.trace(module, inputs)
    many = collapse(graph)
    assert len(many.groups) == len(graph.op_indices)  # one-layer modules and functions: a box a node
    few = collapse(graph, max_boxes=10)
    assert len(few.groups) < len(many.groups)
    assert sorted(v for g in few.groups for v in g.members) == sorted(graph.op_indices)
    runs = [g for g in few.groups if g.key.startswith("run:")]
    assert runs and all(not graph.nodes[v].module_path for g in runs for v in g.members)
    assert any(len(g.members) > 1 for g in runs)


def test_search_finds_nodes_by_name_or_module_and_their_partitions(traced):
    graph, _, plan, _ = traced
    hit = search(graph, "BLOCKS.1.", plan)
    assert hit.nodes and all("blocks.1." in graph.nodes[v].module_path for v in hit.nodes)
    where = plan.node_to_partition()
    assert set(hit.partitions) == {where[graph.nodes[v].name] for v in hit.nodes}
    assert search(graph, "no such module", plan).nodes == ()
    dot = plan_to_dot(plan, graph, highlight=hit.partitions)
    assert dot.count("penwidth=5") == len(hit.partitions)


def test_overlays_colour_by_their_metric_on_one_scale(traced):
    graph, _, plan, node_s = traced
    assert colour_for(0, 0, 10) == SCALE[0] and colour_for(10, 0, 10) == SCALE[-1]
    assert colour_for(5, 5, 5) == SCALE[0]
    for overlay in ("memory", "latency", "flops", "bytes crossing"):
        values = partition_values(plan, overlay, graph)
        dot = plan_to_dot(plan, graph, overlay=overlay)
        top = max(values, key=values.get)
        assert f'fillcolor="{SCALE[-1]}"' in dot.split(f"  p{top} [")[1].split("\n")[0]
        assert f"<B>{overlay}</B>" in dot  # its legend
    flops = partition_values(plan, "flops", graph)
    assert sum(flops.values()) == sum(graph.nodes[v].flops for v in graph.op_indices)
    crossing = node_values(
        graph, "bytes crossing", node_s, {graph.index[n]: p for n, p in plan.node_to_partition().items()}
    )
    assert sum(1 for c in crossing if c) >= len(plan.edges) > 0
    # Shared scale: a side by side draws both plans against one range.
    assert plan_to_dot(plan, graph, overlay="memory", scale=(0, 1e15)).count(f'fillcolor="{SCALE[0]}"') == len(
        plan.partitions
    )


def test_every_partition_and_node_has_an_id_and_a_tooltip(traced):
    graph, _, plan, node_s = traced
    dot = plan_to_dot(plan, graph)
    for p in plan.partitions:
        line = dot.split(f"  p{p.id} [")[1].split("\n")[0]
        assert f'id="p{p.id}"' in line and f'tooltip="P{p.id} on ' in line
    first = plan.partitions[0]
    nodes = partition_to_dot(plan, graph, first.id, overlay="latency", node_s=node_s, highlight=[first.node_names[0]])
    v = graph.index[first.node_names[0]]
    line = nodes.split(f"  n{v} [")[1].split("\n")[0]
    assert "module: " in line and "latency " in line and f"P{first.id} on " in line and "penwidth=4" in line


@pytest.mark.parametrize("algorithm", list(steps.ALGORITHMS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_decision_trace_replays_to_the_algorithms_plan(algorithm, seed):
    module, inputs = random_fx_module(seed, 24)
    graph = partitioner.trace(module, inputs)
    total = graph.total_size_bytes
    devices = partitioner.parse_devices(f"3x{total // 2}")
    trace = steps.record(
        graph, devices, algorithm, options=partitioner.PartitionOptions.build(transfer_rate_bytes_per_s=1e8)
    )
    assert trace.decisions and len(trace.frames) == len(trace.decisions)
    replayed = trace.replay()
    assert replayed.part == trace.result.part
    for p in {p for p in trace.result.part if p >= 0}:
        assert sorted(replayed.devices_of[p]) == sorted(trace.result.devices_of[p])
    if algorithm == "size_based":  # the mode's own plan, node for node
        plan = partitioner.partition(graph, devices, mode="size_based", force_partition=True)
        groups = {}
        for v, p in enumerate(replayed.part):
            if p >= 0:
                groups.setdefault(p, set()).add(graph.nodes[v].name)
        assert sorted(map(sorted, groups.values())) == sorted(sorted(p.node_names) for p in plan.partitions)
    else:  # every taken step's latency is what the cost model gives the plan after it
        problem = partitioner.accelerator.api.build_problem(
            graph, devices, partitioner.PartitionOptions.build(transfer_rate_bytes_per_s=1e8)
        )
        for d, frame in zip(trace.decisions, trace.frames):
            if d.accepted and d.latency_s is not None and d.kind != "roll back":
                top = max(frame.devices_of)
                assert problem.cost.evaluate(
                    list(frame.part), [list(frame.devices_of[q]) for q in range(top + 1)]
                ).latency_s == pytest.approx(d.latency_s)


def test_a_step_is_drawn_with_its_nodes_outlined(traced):
    graph, devices, plan, _ = traced
    trace = steps.record(graph, devices, "size_based")
    dot = step_to_dot(trace, 5, plan.devices)
    v = trace.decisions[5].moves[0][0]
    assert "penwidth=4" in dot.split(f"  n{v} [")[1].split("\n")[0]
    assert dot.count("not placed") == 2 * (len(graph.op_indices) - 6)  # label and tooltip
    with pytest.raises(partitioner.PartitionError, match="unknown algorithm"):
        steps.record(graph, devices, "simulated_annealing")


# -- the app ----------------------------------------------------------------------------------


def viewers(at: AppTest) -> dict[str, dict]:
    return {e.proto.id.rsplit("-", 1)[-1]: json.loads(e.proto.json) for e in at.get("bidi_component")}


def test_app_overlay_search_and_collapse():
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    dag = viewers(at)["explore_dag"]
    assert '<g id="p0"' in dag["svg"] and dag["clickable"]
    at.selectbox(key="explore_overlay").set_value("latency").run()
    assert "latency" in viewers(at)["explore_dag"]["svg"] and not at.exception
    at.text_input(key="explore_search").set_value("blocks.1.").run()
    assert viewers(at)["explore_dag"]["focus"].startswith("p")
    assert any("matches" in c.value for c in at.caption)
    at.text_input(key="explore_search").set_value("no_such_node").run()
    assert any("No node or module" in w.value for w in at.warning)
    at.text_input(key="explore_search").set_value("").run()
    at.session_state["explore_view"] = "Model graph by module"
    at.run()
    model = viewers(at)["explore_model"]
    model["svg"] = model["svg"].replace("&#45;", "-")  # Graphviz writes '-' in ids as an entity
    assert 'id="m:fold:blocks.0-3"' in model["svg"] and "blocks.0.attn" not in model["svg"]
    at.multiselect(key="explore_expanded").set_value(["blocks.2"]).run()  # one of the folded blocks
    model = viewers(at)["explore_model"]
    model["svg"] = model["svg"].replace("&#45;", "-")
    assert 'id="m:blocks.2.attn"' in model["svg"] and not at.exception
    assert 'id="m:fold:blocks.0-1"' in model["svg"] and 'id="m:blocks.3"' in model["svg"]
    assert model["focus"].startswith("m:blocks.2."), "the view follows the block just opened"
    at.selectbox(key="explore_flow").set_value("blocks.2.attn").run()
    svg = viewers(at)["explore_model"]["svg"]
    assert "#2ca02c" in svg and "#9467bd" in svg and not at.exception  # what feeds it, what follows
    at.selectbox(key="explore_drill").set_value(0).run()
    assert "explore_nodes" in viewers(at)


@pytest.mark.slow
def test_app_side_by_side_on_compare_and_review():
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.switch_page("views/compare.py").run()
    assert not at.exception
    names = at.selectbox(key="compare_left").options
    at.selectbox(key="compare_left").set_value("size_based plan")
    at.selectbox(key="compare_right").set_value("cost_aware plan").run()
    shown = viewers(at)
    assert {"compare_sbs_a", "compare_sbs_b"} <= set(shown) and len(names) >= 2
    span = shown["compare_sbs_a"]["span"]
    assert span == shown["compare_sbs_b"]["span"] and min(span) > 0  # one scale
    assert shown["compare_sbs_a"]["sync"] == shown["compare_sbs_b"]["sync"]  # pan and zoom together
    assert any("moved" in m.value for m in at.markdown)
    at.switch_page("views/review.py").run()
    at.toggle(key="review_sbs_on").set_value(True).run()
    assert {"review_sbs_a", "review_sbs_b"} <= set(viewers(at)) and not at.exception


def test_app_steps_through_the_size_based_fill():
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/learn.py").run()
    assert not at.exception
    first = viewers(at)["learn_steps"]["svg"]
    at.button(key="learn_next").click().run()
    at.button(key="learn_next").click().run()
    assert at.slider(key="learn_step").value == 3
    assert viewers(at)["learn_steps"]["svg"] != first
    at.radio(key="learn_algorithm").set_value("kl_pass").run()
    assert not at.exception and any("of " in m.value for m in at.metric)


def test_the_partition_picker_relabels_after_a_model_switch():
    """The browser keeps a selectbox's label until the server sends a value: after another model
    with the same partition ids, the picker must send the new label, not keep "P1 (53 nodes)"."""
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.selectbox(key="explore_drill").set_value(1).run()
    before = at.selectbox(key="explore_drill").options[2]
    at.selectbox(key="model").set_value("cnn").run()
    assert not at.exception
    picker = at.selectbox(key="explore_drill")
    assert picker.value == 1 and picker.options[2] != before
    assert picker.proto.set_value and picker.proto.raw_value == picker.options[2]
