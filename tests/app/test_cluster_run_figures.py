"""A checked cluster run drawn without Streamlit: the prediction stacked by part beside what the
run times apart, each part's error, each rank's held bytes against the prediction."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from explorer.builders import cluster_run_figures
from partitioner.cluster.run.checked import END_TO_END, REST, SYNC, PartCheck


def _check() -> SimpleNamespace:
    parts = (
        PartCheck("compute", 0.010),
        PartCheck("all_reduce tp", 0.002),
        PartCheck(REST, 0.012, 0.015),
        PartCheck(SYNC, 0.003, 0.002),
        PartCheck(END_TO_END, 0.015, 0.017),
    )
    run = SimpleNamespace(layout=SimpleNamespace(label=lambda: "tp=2 dp=2"))
    return SimpleNamespace(parts=parts, run=run, error=parts[-1].error)


def test_the_run_figure_stacks_the_prediction_and_the_measured_parts():
    fig = cluster_run_figures.run_figure(_check())
    predicted = [t for t in fig.data if list(t.x) == ["predicted"]]
    measured = [t for t in fig.data if list(t.x) == ["measured"]]
    assert [t.name for t in predicted] == ["compute", "all_reduce tp"]
    assert sum(t.y[0] for t in measured) == pytest.approx(0.017)  # the rest and the sync: the whole step
    assert "tp=2 dp=2" in fig.layout.title.text and "+13" in fig.layout.title.text  # 0.017 / 0.015 - 1


def test_the_parts_table_says_which_parts_were_timed_apart():
    table = cluster_run_figures.parts_table(_check())
    assert table["measured"].iloc[0] == "inside the rest" and table["error"].iloc[0] == "-"
    assert table["error"].iloc[-1].startswith("+13")


def test_the_rank_table_holds_each_ranks_bytes_against_the_prediction():
    predicted = SimpleNamespace(memory={"weights": 1000.0, "gradients": 1000.0}, layout=SimpleNamespace(pp=1))
    rank = SimpleNamespace(
        rank=0, pp=0, dp=1, tp=0, parameter_bytes=1000, gradient_bytes=1100, memory_bytes=2100, step_s=0.01
    )
    table = cluster_run_figures.run_table(predicted, [rank])
    assert table["mesh"].iloc[0] == "dp=1 tp=0" and table["error"].iloc[0].startswith("+5")
