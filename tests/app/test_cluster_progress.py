"""The Plan a cluster page's search draws a progress bar (layouts tried of the total) and leaves
none behind; a second run of the page, answered from the search's cache, replays the bar to its
end without an error."""

from __future__ import annotations

import streamlit as st
from app_helpers import errors, start

from partitioner import cluster


def test_the_search_reports_progress_and_a_cached_answer_replays_it(monkeypatch):
    told: list[cluster.SearchProgress] = []
    search = cluster.search

    def watched(*args, progress=None, **kwargs):
        assert progress is not None  # the page asks to be told

        def both(at: cluster.SearchProgress) -> None:
            told.append(at)
            progress(at)

        return search(*args, progress=both, **kwargs)

    monkeypatch.setattr(cluster, "search", watched)
    st.cache_data.clear()  # an earlier test's search of the same inputs would answer from the cache
    at = start()
    at.switch_page("views/cluster.py").run()
    assert not at.exception and not errors(at)
    assert told and told[-1].tried == told[-1].total > 0  # the last report is the end
    assert not at.get("progress")  # emptied once the answer is in
    searched = len(told)
    at.run()  # the same inputs: the cache answers, replaying the bar's messages
    assert not at.exception and not errors(at) and not at.get("progress")
    assert len(told) == searched  # no second search
    assert [m.label for m in at.metric] == ["Fewest devices", "Fastest", "Cheapest"]
