"""A cluster time as the page shows it: the library's one wording of bands
(:mod:`partitioner.cluster.bands`), which the command line writes too. Pure: no Streamlit."""

from __future__ import annotations

from partitioner.cluster.bands import (
    ANSWERS,
    assumptions,
    band,
    cost_band,
    dollars_band,
    duration_band,
    mfu_band,
    run_days,
    seconds_band,
    tokens_band,
    within_band,
)

__all__ = [
    "ANSWERS",
    "band",
    "seconds_band",
    "mfu_band",
    "duration_band",
    "tokens_band",
    "dollars_band",
    "run_days",
    "cost_band",
    "within_band",
    "assumptions",
]
