"""Issue 56: the optimal mode's solver says on the page what it is doing and how long it may take
(each phase and its time limit), and the line is gone once the plan is in."""

from __future__ import annotations

import streamlit as st
from app_helpers import errors, shown, start

from explorer import compute


def test_the_optimal_mode_says_each_phase_and_leaves_no_line_behind(monkeypatch):
    told = []
    partition_with = compute.partition_with

    def watched(graph, devices, mode, options, progress=None):
        assert progress is not None  # the page asks to be told

        def both(at):
            told.append(at)
            progress(at)

        return partition_with(graph, devices, mode, options, progress=both)

    monkeypatch.setattr(compute, "partition_with", watched)
    st.cache_data.clear()  # an earlier test's plan of the same config would answer from the cache
    at = start()
    at.selectbox(key="mode").set_value("optimal").run()
    assert not at.exception and not errors(at)
    assert told and told[-1].phase == "done"
    assert any(t.at_most_s for t in told)  # a phase bounded by the solver's time limit says so
    assert not any("so far" in shown(c.value) for c in at.caption)  # emptied once the plan is in
    at.run()  # the cached plan replays the line to empty
    assert not at.exception and not any("so far" in shown(c.value) for c in at.caption)
