"""Learn's stepper at a grain a student can follow: on a large graph a step is one block's
decisions (not one partition's thousands), the last step shows the latency the replay ends at,
and a new algorithm starts at step 1."""

from __future__ import annotations

import pytest
from app_helpers import APP, TIMEOUT, shared_link, start, summary
from streamlit.testing.v1 import AppTest

import partitioner
from explorer.builders import stepping
from partitioner.accelerator import steps
from partitioner.draw.nodeview import block_of
from partitioner.testing.synthetic import blocks_graph
from partitioner.units import format_seconds


def test_a_large_fill_steps_one_block_at_a_time():
    graph = blocks_graph(40)  # 1,000 operations in blocks.0 .. blocks.39
    assert len(graph.op_indices) > stepping.BLOCK_GRAIN_ABOVE
    devices = partitioner.parse_devices(f"2x{graph.total_size_bytes * 2 // 3}")
    trace = steps.record(graph, devices, "size_based")
    groups = stepping.group_steps(trace, max_groups=10_000)
    parts = {d.moves[0][1] for d in trace.decisions if d.kind == "place"}
    assert len(groups) > len(parts) + 30  # about one step a block, not one a partition
    for g in groups:
        blocks = {block_of(graph, d.moves[0][0]) for d in trace.decisions[g.first : g.last + 1] if d.moves}
        assert len(blocks) <= 1, (g.title, blocks)
    middle = next(g for g in groups if "blocks.7" in g.title)
    assert middle.title.endswith("in blocks.7")
    assert len(stepping.group_steps(trace)) <= stepping.MAX_GROUPS  # played, still about a minute


def test_a_small_graph_keeps_one_step_a_partition():
    graph = blocks_graph(4)  # 100 operations: the fill's partitions are the steps
    devices = partitioner.parse_devices(f"3x{graph.total_size_bytes // 2}")
    trace = steps.record(graph, devices, "size_based")
    groups = stepping.group_steps(trace, max_groups=10_000)
    assert len(groups) == len({d.moves[0][1] for d in trace.decisions if d.kind == "place"})


def _learn():
    at = start()
    at.switch_page("views/learn.py").run()
    assert not at.exception, at.exception
    return at


def _metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_the_last_step_of_a_fill_shows_the_latency_it_ends_at():
    at = _learn()
    at.radio(key="learn_algorithm").set_value("size_based").run()
    last = at.slider(key="learn_step").max
    at.slider(key="learn_step").set_value(last).run()
    assert not at.exception
    shown = _metric(at, "Latency after it")
    assert shown != "plan not complete"
    plan = summary(at)
    note = " ".join(i.value for i in at.info if "replay ends" in i.value)
    assert shown in note or format_seconds(plan["latency_s"]) == shown, (shown, note)


def test_a_new_algorithm_starts_at_step_one():
    at = _learn()
    at.radio(key="learn_algorithm").set_value("size_based").run()
    at.slider(key="learn_step").set_value(at.slider(key="learn_step").max).run()
    assert at.slider(key="learn_step").value > 1
    at.radio(key="learn_algorithm").set_value("kl_pass").run()
    assert not at.exception
    assert at.session_state["learn_step"] == 1
    assert _metric(at, "Step").startswith("1 of ")


@pytest.mark.slow
def test_the_step_and_algorithm_are_in_the_link():
    at = _learn()
    at.radio(key="learn_algorithm").set_value("kl_pass").run()
    at.button(key="learn_next").click().run()
    assert at.query_params.get("learn_step") in ("2", ["2"])  # a step the player set: written back
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    fresh.query_params.update(shared_link(at, "learn_algorithm"))
    fresh.switch_page("views/learn.py").run()
    assert fresh.radio(key="learn_algorithm").value == "kl_pass" and fresh.slider(key="learn_step").value == 2
    assert _metric(fresh, "Step") == _metric(at, "Step")
