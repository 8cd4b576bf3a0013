"""The one statistic every timed figure here uses: the median of the timed repeats, after an
untimed warm-up (NOTE: [One statistic]).

# NOTE: [One statistic]
A device profile's figures are medians of repeated timings (:mod:`partitioner.calibration.host`),
so a run that reported its best step would be compared with a prediction built from medians: on a
shared machine the best of seven is often 20-40 % below the median. Every real run (an fx plan's
walk, a pipeline's step, a tensor-parallel forward, a composed layout's step) and every
calibration loop reduces its repeats with :func:`step_seconds`, and the first call of each is a
warm-up that is not counted (allocations, shape inference, lazy initialisation).
"""

from __future__ import annotations

import statistics
from typing import Mapping, Sequence

__all__ = ["STATISTIC", "step_seconds", "median_by_key"]

STATISTIC = "median"


def step_seconds(times: Sequence[float]) -> float:
    """The median of ``times`` (the timed repeats after the warm-up); 0.0 when none. O(n log n)."""
    return float(statistics.median(times)) if times else 0.0


def median_by_key(samples: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per key, the median over the repeats that have it (a partition's compute over walks)."""
    keys = sorted({k for s in samples for k in s})
    return {k: step_seconds([s[k] for s in samples if k in s]) for k in keys}
