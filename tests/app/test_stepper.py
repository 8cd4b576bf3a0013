"""The stepper that teaches: decisions grouped into rounds so any run plays in about a minute, a
step drawn on the folded model for large graphs with the view sent to its nodes, a note where
the replay and the mode part; then the Learn page under AppTest on gpt2_small (play, pause)."""

from __future__ import annotations

import json

import pytest
from app_helpers import APP
from streamlit.testing.v1 import AppTest

import partitioner
import sample_models
from explorer.builders import stepping
from partitioner.accelerator import steps
from partitioner.draw.nodeview import block_of, step_boxes_to_dot, touched_nodes
from partitioner.testing.synthetic import blocks_graph


@pytest.fixture(scope="module")
def transformer():
    model, inputs = sample_models.build("transformer")
    graph = partitioner.trace(model, inputs)
    devices = partitioner.parse_devices(f"4x{sample_models.spec('transformer').device_memory_bytes}")
    return graph, devices


@pytest.mark.parametrize("algorithm", list(steps.ALGORITHMS))
def test_groups_cover_every_decision_once_in_order_within_a_minute(transformer, algorithm):
    graph, devices = transformer
    trace = steps.record(
        graph, devices, algorithm, options=partitioner.PartitionOptions.build(transfer_rate_bytes_per_s=25e9)
    )
    groups = stepping.group_steps(trace)
    assert groups and len(groups) <= stepping.MAX_GROUPS
    assert groups[0].first == 0 and groups[-1].last == len(trace.decisions) - 1
    assert all(b.first == a.last + 1 for a, b in zip(groups, groups[1:]))
    few = stepping.group_steps(trace, max_groups=5)
    assert len(few) <= 5 and sum(g.size for g in few) == len(trace.decisions)


def test_the_fill_is_grouped_by_partition(transformer):
    graph, devices = transformer
    trace = steps.record(graph, devices, "size_based")
    for g in stepping.group_steps(trace, max_groups=10_000):
        places = [d.moves[0][1] for d in trace.decisions[g.first : g.last + 1] if d.kind == "place"]
        assert len(set(places)) <= 1, g


def test_a_long_run_plays_in_sixty_steps():
    graph = blocks_graph(60)
    devices = partitioner.parse_devices(f"4x{graph.total_size_bytes // 3}")
    trace = steps.record(
        graph,
        devices,
        "cost_aware_merge",
        budget=2000,
        options=partitioner.PartitionOptions.build(transfer_rate_bytes_per_s=1e9),
    )
    assert len(trace.decisions) > 300 and len(stepping._round_ends(trace)) > stepping.MAX_GROUPS
    groups = stepping.group_steps(trace)
    assert len(groups) == stepping.MAX_GROUPS and sum(g.size for g in groups) == len(trace.decisions)
    assert all(b.first == a.last + 1 for a, b in zip(groups, groups[1:]))


def test_the_player_steps_on_ticks_only_and_stops_at_the_last_step():
    assert stepping.player_step(3, 5, playing=True, tick=True) == (4, True)
    assert stepping.player_step(3, 5, playing=True, tick=False) == (3, True)  # a click is not a tick
    assert stepping.player_step(4, 5, playing=True, tick=True) == (5, False)  # the tick that reaches the end
    assert stepping.player_step(5, 5, playing=True, tick=True) == (5, False)
    assert stepping.player_step(9, 5, playing=False, tick=True) == (5, False)  # a link's step past the end
    assert stepping.player_step(0, 5, playing=False, tick=True) == (1, False)


def test_a_step_shows_its_span_the_decisions_taken_and_the_latency(transformer):
    graph, devices = transformer
    options = partitioner.PartitionOptions.build(transfer_rate_bytes_per_s=25e9)
    trace = steps.record(graph, devices, "cost_aware_merge", options=options)
    plan = partitioner.partition(graph, devices, "cost_aware", transfer_rate_bytes_per_s=25e9)
    groups = stepping.group_steps(trace)
    for step in (1, len(groups)):
        shown = stepping.step_shown(trace, groups, step, plan)
        group = groups[step - 1]
        assert shown.decision == group.last
        assert shown.span.endswith(str(group.last + 1)) and str(group.first + 1) in shown.span
        assert shown.taken == sum(d.accepted for d in trace.decisions[: group.last + 1])
        assert shown.partitions == len({p for p in trace.frames[group.last].part if p >= 0})
    last = stepping.step_shown(trace, groups, len(groups), plan)
    assert last.latency_s == stepping.final_latency(trace, plan)


def test_the_replay_note_says_where_the_replay_and_the_mode_part(transformer):
    graph, devices = transformer
    options = partitioner.PartitionOptions.build(transfer_rate_bytes_per_s=25e9)
    fill = steps.record(graph, devices, "size_based", options=options)
    plan = partitioner.partition(graph, devices, "size_based", transfer_rate_bytes_per_s=25e9)
    assert "ends where" in stepping.replay_note(fill, plan)
    merge = steps.record(graph, devices, "cost_aware_merge", options=options)
    aware = partitioner.partition(graph, devices, "cost_aware", transfer_rate_bytes_per_s=25e9)
    note = stepping.replay_note(merge, aware)
    last = merge.frames[-1]
    if (
        last.latency_s is not None
        and abs(last.latency_s - aware.latency_s) < 1e-12
        and len({p for p in last.part if p >= 0}) == len(aware.partitions)
    ):
        assert "ends where" in note
    else:
        assert "one of the mode's starts" in note and partitioner.units.format_seconds(aware.latency_s) in note


def test_a_step_on_a_large_graph_is_drawn_folded_with_its_block_opened():
    graph = blocks_graph(30)
    devices = partitioner.parse_devices(f"4x{graph.total_size_bytes // 3}")
    trace = steps.record(graph, devices, "size_based")
    index = next(i for i, d in enumerate(trace.decisions) if d.moves and block_of(graph, d.moves[0][0]) == "blocks.12")
    touched = touched_nodes(trace, index)
    dot, focus = step_boxes_to_dot(trace, index, devices, expanded=[block_of(graph, touched[0])])
    assert focus is not None and focus.startswith("m:blocks.12.")
    assert "blocks.0-11 (x12)" in dot and "penwidth=4" in dot
    assert dot.count("->") < 40  # boxes, not 750 nodes
    far, _ = step_boxes_to_dot(trace, len(trace.decisions) - 1, devices)
    assert "(x" in far and "P0" in far


def _viewers(at: AppTest) -> dict[str, dict]:
    return {e.proto.id.rsplit("-", 1)[-1]: json.loads(e.proto.json) for e in at.get("bidi_component")}


@pytest.mark.slow
def test_the_learn_page_steps_gpt2_small_over_its_folded_blocks_and_plays():
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.selectbox(key="model").set_value("gpt2_small").run()
    at.switch_page("views/learn.py").run()
    assert not at.exception
    assert not any("steps are drawn for models of up to" in i.value for i in at.info)
    view = _viewers(at)["learn_steps"]
    assert "(x" in view["svg"] or "blocks" in view["svg"]
    at.button(key="learn_next").click().run()
    assert at.slider(key="learn_step").value == 2
    assert _viewers(at)["learn_steps"]["focus"], "the view follows the step"
    at.radio(key="learn_algorithm").set_value("kl_pass").run()
    assert 3 < at.slider(key="learn_step").max <= stepping.MAX_GROUPS
    at.button(key="learn_play").click().run()
    assert at.session_state["learn_playing"] and at.button(key="learn_play").label == "Pause"
    at.button(key="learn_play").click().run()
    assert not at.session_state["learn_playing"] and not at.exception
    last = at.slider(key="learn_step").max
    at.slider(key="learn_step").set_value(last).run()
    assert any("replay ends" in i.value for i in at.info)
