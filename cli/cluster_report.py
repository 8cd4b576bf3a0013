"""What the command line prints of a cluster search: the answers and the best layouts, each
time as its band, low-high ("12-15 days", "38-44 % MFU"), never a lone point; which answers sit
within each other's band; what the times assume. The bands are the library's (:class:`partitioner.cluster.LayoutResult`'s ``step_low_s``,
``step_high_s``, ``mfu_band``, ``tokens_per_s_band``); this module only writes them.

The wording is the library's (:mod:`partitioner.cluster.bands`), the app's too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cli.report import format_table
from partitioner.cluster.bands import (
    ANSWERS,
    assumptions,
    band,
    cost_band,
    dollars_band,
    duration_band,
    host_memory_line,
    mfu_band,
    run_days,
    seconds_band,
    tokens_band,
    within_band,
)
from partitioner.units import format_bytes

if TYPE_CHECKING:
    from partitioner.cluster import ClusterPlan, LayoutResult, Workload

__all__ = ["print_answers", "table_best"]


def _row(r: LayoutResult, work: Workload) -> list[str]:
    """One row of the best layouts: every time-derived figure as its band."""
    if work.kind == "training":
        run = duration_band(*run_days(r, work.train_tokens))
    else:
        run = tokens_band(*r.tokens_per_s_band)
    return [
        str(r.devices),
        r.layout.label(),
        seconds_band(r.step_low_s, r.step_high_s),
        mfu_band(r),
        format_bytes(int(r.memory_bytes)),
        r.limit,
        dollars_band(*cost_band(r, r.cost_per_million_tokens)),
        run,
    ]


def print_answers(work: Workload, found: ClusterPlan) -> None:
    """The fewest-devices, fastest and cheapest layouts (and serving's knee), each time as its band, with what the
    whole run takes (training) or how fast each sequence streams (inference), which other answers
    sit within its band, and what the times assume."""
    step = "time to first token" if work.kind == "inference" else "step"
    within = within_band(found)
    for title, attr in ANSWERS:
        r = getattr(found, attr)
        if r is None:  # the knee: serving only
            continue
        line = (
            f"{title}: {r.devices} device{'s' if r.devices != 1 else ''}, {r.layout.label()}: {step} "
            f"{seconds_band(r.step_low_s, r.step_high_s)}, MFU {mfu_band(r)}, "
            f"{dollars_band(*cost_band(r, r.cost_per_million_tokens))} per million tokens, "
            f"limited by {r.limit}"
        )
        if work.kind == "training":
            dollars = cost_band(r, r.cost_per_million_tokens * work.train_tokens / 1e6)
            line += (
                f"; {work.train_tokens:.3g} tokens take {duration_band(*run_days(r, work.train_tokens))} "
                f"and {dollars_band(*dollars)}"
            )
        else:
            share = r.extra["tokens_per_s_per_sequence"] / r.tokens_per_s if r.tokens_per_s else 0.0
            slow, fast = r.tokens_per_s_band
            line += f"; {band(slow * share, fast * share)} tokens/s per sequence"
        if host_memory_line(r):
            line += f"; {host_memory_line(r)}"
        if r.band_s[1] <= 0:  # the library gave this answer no band (yet): say so rather than look sure
            line += "; a point: the planner gives no band for this answer"
        if within.get(title):
            line += f"; within the band of the {' and the '.join(within[title])}"
        print(line)
    assumed = assumptions([getattr(found, attr) for _, attr in ANSWERS])
    if assumed:
        print(f"times assume: {assumed}")


def table_best(work: Workload, found: ClusterPlan, top: int) -> str:
    """The ``top`` best layouts, one a row, each time as its band."""
    step = "time to first token" if work.kind == "inference" else "step"
    run = "training run" if work.kind == "training" else "tokens/s"
    return format_table(
        ["devices", "layout", step, "MFU", "memory/device", "limit", "$/M tokens", run],
        [_row(r, work) for r in found.best(top)],
    )
