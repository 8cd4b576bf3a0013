"""A min-cut sweep says how far it has got: the joint trace's size, then each budget as it is
done, in order; in the worker as in this process. A progress callback that raises (Streamlit's
Stop) ends the sweep there, and the worker with it."""

from __future__ import annotations

import re
import threading

import pytest

import partitioner
import sample_models
from partitioner import remat
from partitioner.testing.faults import child_pids

BUDGETS = (0.0, 0.25, 1.0)


class Stopped(Exception):
    """What Streamlit's Stop button raises from inside a status update."""


@pytest.fixture(scope="module")
def mlp():
    model, inputs, _ = sample_models.load(
        "mlp", {"n_layer": 2, "in_features": 16, "hidden": 32, "out_features": 8, "batch_size": 4}
    )
    return partitioner.trace(model, inputs), tuple(inputs)


def _check_lines(lines: list[str], budgets: tuple[float, ...]) -> None:
    tracing = re.fullmatch(r"tracing the joint forward and backward of ([\d,]+) forward nodes \(\d+\.\d s\)", lines[0])
    traced = re.fullmatch(r"joint graph traced: ([\d,]+) nodes \(\d+\.\d s\)", lines[1])
    assert tracing and traced
    assert int(traced.group(1).replace(",", "")) > int(tracing.group(1).replace(",", "")) > 0  # a backward joined
    assert len(lines) == 2 + len(budgets)
    for i, (line, budget) in enumerate(zip(lines[2:], budgets), start=1):
        assert re.fullmatch(rf"min-cut at budget {budget:g}: {i} of {len(budgets)} done \(\d+\.\d s\)", line), line


def test_the_sweep_reports_the_trace_then_each_budget_in_order(mlp):
    graph, inputs = mlp
    lines: list[str] = []
    results = remat.sweep(graph, inputs, BUDGETS, timeout_s=None, progress=lines.append)
    _check_lines(lines, BUDGETS)
    assert [r.budget for r in results] == list(BUDGETS)
    assert all(r.gradients_equal for r in results)


def test_a_callback_that_raises_ends_the_sweep_there(mlp):
    graph, inputs = mlp
    lines: list[str] = []

    def stop_after_the_first_budget(text: str) -> None:
        lines.append(text)
        if text.startswith("min-cut"):
            raise Stopped("the person pressed Stop")

    with pytest.raises(Stopped):
        remat.sweep(graph, inputs, BUDGETS, timeout_s=None, progress=stop_after_the_first_budget)
    assert len(lines) == 3 and lines[2].startswith("min-cut at budget 0: 1 of 3")


@pytest.mark.slow
def test_the_worker_reports_each_budget_and_a_stop_leaves_no_process(mlp):
    graph, inputs = mlp
    before = child_pids()
    seen: list[tuple[str, str]] = []
    results = remat.sweep(
        graph, inputs, BUDGETS, timeout_s=300, progress=lambda t: seen.append((t, threading.current_thread().name))
    )
    _check_lines([t for t, _ in seen], BUDGETS)
    assert {name for _, name in seen} == {threading.current_thread().name}
    assert [r.budget for r in results] == list(BUDGETS)

    def stop(text: str) -> None:
        raise Stopped(text)

    with pytest.raises(Stopped, match="tracing the joint"):
        remat.sweep(graph, inputs, BUDGETS, timeout_s=300, progress=stop)
    assert child_pids() <= before
