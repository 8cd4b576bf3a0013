"""Every cluster time on the pages as its band (low-high), never a lone point: the builders (the
layouts table, the Pareto and scaling charts, the time chart, the Techniques table) without
Streamlit, then the Plan a cluster and Techniques pages under AppTest with the planner's results
given a band by hand (dataclasses.replace), so the tests hold whether or not the planner computes
bands yet. What the times assume reaches the page escaped."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from app_helpers import errors, shown, start

from explorer.builders import cluster_figures, techniques
from partitioner import cluster
from partitioner.cluster import bands
from tests.band_helpers import banded, banded_plan

GiB = 2**30
WIDTH = (0.1, 0.25)  # the band: 10 % under the point, 25 % over
WIDE = (0.5, 4.0)  # on the pages: wide enough that the sample's answers overlap
HOSTILE = "eager *kernels* [x](http://example.com) <b>"  # what a preset or a profile could name
ASSUMES = (HOSTILE, "MFU: causal attention FLOPs")
RANGE = re.compile(r"\d[\d,.]*-\d[\d,.]*")


def _banded(r: cluster.LayoutResult, width: tuple[float, float] = WIDTH) -> cluster.LayoutResult:
    return banded(r, width[0], width[1], ASSUMES)


def _banded_plan(found: cluster.ClusterPlan, width: tuple[float, float] = WIDTH) -> cluster.ClusterPlan:
    return banded_plan(found, width[0], width[1], ASSUMES)


@pytest.fixture(scope="module")
def found() -> cluster.ClusterPlan:
    from test_cluster_figures import _found

    return _banded_plan(_found())


def test_the_layouts_table_keeps_each_band_as_numbers_and_shows_it_as_text(found):
    results = found.best(6)
    table = cluster_figures.layouts_table(results, 1e12)
    for r, row in zip(results, table.itertuples()):
        assert row.step_low_s == pytest.approx(r.step_s * 0.9) and row.step_high_s == pytest.approx(r.step_s * 1.25)
        assert row.mfu_low < row.mfu < row.mfu_high and row.train_days_low < row.train_days < row.train_days_high
        for text in (row.step, row.mfu_text, row.usd_text, row.train_text, row.train_usd_text):
            assert RANGE.search(text), text  # low-high, never a lone point
        assert row.step == bands.seconds_band(r.step_low_s, r.step_high_s)
    point = cluster_figures.layouts_table([dataclasses.replace(results[0], band_s=(0.0, 0.0))], 1e12)
    assert point["step_low_s"][0] == point["step_high_s"][0] == point["step_s"][0]  # no band yet: the point


def test_the_charts_draw_each_band_as_bars(found):
    best = list(found.by_devices.values())
    for fig in (cluster_figures.pareto_figure(found), cluster_figures.scaling_figure(found)):
        line = next(t for t in fig.data if t.error_y.array is not None)
        assert list(line.error_y.array) == pytest.approx([r.step_high_s - r.step_s for r in best])
        assert list(line.error_y.arrayminus) == pytest.approx([r.step_s - r.step_low_s for r in best])
        assert all(b > 0 for b in line.error_y.array) and "band" in line.name
    r = found.fastest
    title = cluster_figures.time_figure(r).layout.title.text
    assert title.startswith(f"Time by cause: step {bands.seconds_band(r.step_low_s, r.step_high_s)}<br>")


def test_answers_within_each_others_band_are_named():
    found = cluster.ClusterPlan((), None, None, None, (), {}, 0, 0.0, {})
    toy = _profile_result()
    fast = dataclasses.replace(toy, band_s=(1.0, 1.2))
    near = dataclasses.replace(toy, layout=cluster.Layout(dp=2), band_s=(1.1, 1.5))
    far = dataclasses.replace(toy, layout=cluster.Layout(dp=4), band_s=(1.3, 1.6))
    within = bands.within_band(dataclasses.replace(found, fewest_devices=far, fastest=fast, cheapest=near))
    assert within == {
        "fewest devices": ["cheapest"],
        "fastest": ["cheapest"],
        "cheapest": ["fewest devices", "fastest"],
    }
    same = bands.within_band(dataclasses.replace(found, fewest_devices=fast, fastest=fast, cheapest=far))
    assert same == {"fewest devices": [], "fastest": [], "cheapest": []}  # one layout is not within its own band


def _profile_result() -> cluster.LayoutResult:
    return cluster.LayoutResult(
        cluster.Layout(), True, {"weights": 1.0}, 1.1, {"compute": 1.1}, "compute", 0.4, 1e3, 1.0
    )


def test_the_techniques_table_shows_the_planners_band_and_what_it_assumes():
    planner = techniques.PLANNER
    rows = [
        techniques.Technique("a", "p", 2, 1.0, GiB, 8 * GiB, priced_by="roofline"),
        techniques.Technique("b", "p", 2, 1.1, GiB, 8 * GiB, priced_by=planner, band_s=(1.0, 1.3), assumes=ASSUMES),
        techniques.Technique("c", "p", 2, 1.2, GiB, 8 * GiB, priced_by=planner, band_s=(1.1, 1.5), assumes=ASSUMES),
    ]
    table = techniques.table(rows, 2)
    assert list(table["forward pass"]) == ["1 s", "1.0-1.3 s", "1.1-1.5 s"]
    assert techniques.assumptions(rows) == "; ".join(ASSUMES)


@pytest.fixture
def banded_planner(monkeypatch: pytest.MonkeyPatch):
    """The planner's searches and evaluations given a band and assumptions; the pages' caches
    cleared before and after (they would otherwise keep these results for other tests)."""
    import streamlit as st

    search, evaluate = cluster.search, cluster.evaluate
    answered: list[cluster.ClusterPlan] = []

    def banded_search(*a, **k):
        answered.append(_banded_plan(search(*a, **k), WIDE))
        return answered[-1]

    monkeypatch.setattr(cluster, "search", banded_search)
    monkeypatch.setattr(cluster, "evaluate", lambda *a, **k: _banded(evaluate(*a, **k), WIDE))
    st.cache_data.clear()
    yield answered
    st.cache_data.clear()


def _no_raw(at, hostile: str = "[x](http") -> None:
    """No Markdown element holds the hostile assumption unescaped."""
    for element in (*at.caption, *at.markdown, *at.error, *at.warning):
        assert hostile not in element.value and "*kernels*" not in element.value


def test_the_cluster_page_shows_every_time_as_its_band(banded_planner):
    at = start()
    at.switch_page("views/cluster.py").run()
    assert not at.exception and not errors(at), errors(at)
    answers = [shown(c.value) for c in at.caption if " a step;" in shown(c.value)]
    assert len(answers) == 3 and all(RANGE.match(a) and "MFU " in a for a in answers)
    assert all(RANGE.search(a.split("MFU ")[1]) for a in answers)
    assert not [c for c in at.caption if c.value.startswith("A point")]  # every answer has its band
    runs = [shown(c.value) for c in at.caption if shown(c.value).startswith("1 trillion tokens: ")]
    assert len(runs) == 3 and all(RANGE.search(r) for r in runs)
    expected = [names for names in bands.within_band(banded_planner[-1]).values() if names]
    within = [shown(c.value) for c in at.caption if c.value.startswith("Within the band of the")]
    assert [w.removeprefix("Within the band of the ").split(":")[0] for w in within] == [
        " and the ".join(names) for names in expected
    ]
    assert within and all("neither is surely faster" in w for w in within)  # the sample's answers overlap
    assumed = [shown(c.value) for c in at.caption if "assume" in c.value]
    assert any(HOSTILE in a and "MFU: causal attention FLOPs" in a for a in assumed)  # near the answers
    assert any(a.startswith("The time assumes:") for a in assumed)  # near the opened layout's time chart
    _no_raw(at)
    table = next(df.value for df in at.dataframe if "limit" in df.value.columns)
    assert table["step"].str.match(RANGE).all() and table["mfu_text"].str.match(RANGE).all()
    figures = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    pareto = next(f for f in figures if f["layout"]["title"]["text"].startswith("Devices against"))
    assert any(trace.get("error_y", {}).get("array") for trace in pareto["data"])


def test_the_techniques_page_shows_the_planners_band(banded_planner):
    at = start()
    at.switch_page("views/techniques.py").run()
    assert not at.exception and not errors(at), errors(at)
    table = at.table[0].value  # a static table: its texts wrap (issue 56)
    planner = table[table["priced by"] == techniques.PLANNER]
    assert len(planner) == 2 and planner["forward pass"].str.match(RANGE).all()
    assert any(HOSTILE in shown(c.value) for c in at.caption)
    _no_raw(at)


def test_the_app_and_the_command_line_reach_the_same_cluster_sizes():
    """Up to 4,096 nodes (Llama 3 ran 16,384 H100s: 2,048 nodes of 8) on the page, in a link and on
    the command line."""
    from cli.cluster import MAX_NODES
    from explorer.cluster_inputs import RANGES

    assert RANGES["cl_max_nodes"] == (1, MAX_NODES) and MAX_NODES >= 4096
    at = start()
    at.switch_page("views/cluster.py").run()
    at.number_input(key="cl_max_nodes").set_value(MAX_NODES + 1).run()  # the page says its range (issue 56)
    notes = [shown(w.value) for w in at.warning]
    assert any(f"Up to nodes must be from 1 to {MAX_NODES:,} (got {MAX_NODES + 1:,})" in n for n in notes), notes
