"""The timing loops every calibration figure is measured with: the median over repeats of a loop's
mean call time, after an untimed warm-up call (NOTE: [One statistic] in
:mod:`partitioner.processes.timing`), with a fixed loop or one sized to a time budget."""

from __future__ import annotations

import time
from typing import Any, Callable

from partitioner.processes.timing import step_seconds

__all__ = ["loop_median_s", "budget_median_s"]


def loop_median_s(fn: Callable[[], Any], loops: int = 10, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean time of ``loops`` calls of ``fn`` (called once first:
    the warm-up). O(loops x repeats) calls."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        times.append((time.perf_counter() - start) / loops)
    return step_seconds(times)


def budget_median_s(fn: Callable[[], Any], budget_s: float = 0.05, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean time of a loop sized to take about ``budget_s / repeats``
    (one timed call sizes it; from 1 to 2000 calls a loop)."""
    fn()
    start = time.perf_counter()
    fn()
    one = max(time.perf_counter() - start, 1e-7)
    return loop_median_s(fn, max(1, min(2000, int(budget_s / repeats / one))), repeats)
