"""A cluster time as people read it: its band, low-high ("12-15 days", "38-44 %"), never a lone
point; which answers sit within each other's band; what the times assume. The bands are
:class:`~partitioner.cluster.layout_types.LayoutResult`'s (``step_low_s``, ``step_high_s``,
``mfu_band``, ``tokens_per_s_band``: NOTE: [Bands] in :mod:`partitioner.cluster.engine`); this
module only writes them, the one wording the command line and the app share. Torch-free.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from partitioner.cluster.layout_search import ClusterPlan
    from partitioner.cluster.layout_types import LayoutResult

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
    "host_memory_line",
]

# The search's answers: (the words a person reads, the ClusterPlan field); the knee only for serving
# (NOTE: [Serving knee] in partitioner.cluster.knee), None otherwise.
ANSWERS = (
    ("fewest devices", "fewest_devices"),
    ("fastest", "fastest"),
    ("cheapest", "cheapest"),
    ("the knee of price and speed", "knee"),
)


def band(low: float, high: float, unit: str = "") -> str:
    """``low``-``high`` to two significant figures of the high end (12.3, 15.1 -> "12-15"), more
    where two figures would write both ends alike; one number (three figures) where the ends are
    alike to four figures: a band of no width."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{low:,.3g}-{high:,.3g}{unit}" if low != high else f"{high:,.3g}{unit}"
    top = max(abs(low), abs(high))
    if top == 0:
        return f"0{unit}"
    figures = 1 - math.floor(math.log10(top))  # decimals for two figures (negative: round to tens, ...)
    for extra in range(3):
        a, b = _fixed(low, figures + extra), _fixed(high, figures + extra)
        if a != b:
            return f"{a}-{b}{unit}"
    return f"{_fixed(high, figures + 1)}{unit}"


def _fixed(value: float, decimals: int) -> str:
    """``value`` rounded to ``decimals`` (to tens, hundreds, ... where negative), with commas."""
    return f"{round(value, decimals):,.{max(0, decimals)}f}"


def _scaled(low: float, high: float, scales: tuple[tuple[str, float], ...], unit: str = "") -> str:
    """The band in the first unit the high end reaches 1 of (the last unit otherwise)."""
    name, size = next(((n, s) for n, s in scales if abs(high) >= s), scales[-1])
    return band(low / size, high / size, f"{name}{unit}")


def seconds_band(low: float, high: float) -> str:
    """Seconds: "1.2-1.5 s", "80-95 ms"."""
    return _scaled(low, high, ((" s", 1.0), (" ms", 1e-3), (" us", 1e-6), (" ns", 1e-9)))


def duration_band(low: float, high: float) -> str:
    """A run's length in the unit a person plans in: "12-15 days", "3.1-3.8 hours"."""
    return _scaled(low, high, ((" days", 86400.0), (" hours", 3600.0), (" minutes", 60.0), (" s", 1.0)))


def mfu_band(r: LayoutResult) -> str:
    """ "38-44 %"."""
    low, high = r.mfu_band
    return band(100 * low, 100 * high, " %")


def tokens_band(low: float, high: float) -> str:
    """Tokens a second: "1.2-1.4 M", "850-990"."""
    return _scaled(low, high, ((" G", 1e9), (" M", 1e6), (" k", 1e3), ("", 1.0)))


def dollars_band(low: float, high: float) -> str:
    """ "$1.2-1.5 M", "$0.12-0.15"."""
    return "$" + _scaled(low, high, ((" M", 1e6), ("", 1.0)))


def _share(r: LayoutResult) -> tuple[float, float]:
    """(low, high) of the step over its point: what every time-derived figure is scaled by."""
    return (r.step_low_s / r.step_s, r.step_high_s / r.step_s) if r.step_s > 0 else (1.0, 1.0)


def run_days(r: LayoutResult, train_tokens: float) -> tuple[float, float]:
    """(low, high) seconds to train ``train_tokens`` at the layout's band of tokens a second."""
    slow, fast = r.tokens_per_s_band
    return (
        train_tokens / fast if fast > 0 else math.inf,
        train_tokens / slow if slow > 0 else math.inf,
    )


def cost_band(r: LayoutResult, dollars: float) -> tuple[float, float]:
    """(low, high) of a cost priced at the step's point: it grows with the step's time."""
    low, high = _share(r)
    return dollars * low, dollars * high


def within_band(found: ClusterPlan) -> dict[str, list[str]]:
    """For each answer, the other answers (another layout) whose step band overlaps its own: the
    search cannot say which of the two is faster."""
    answers = [(title, getattr(found, attr)) for title, attr in ANSWERS]
    return {
        title: [t for t, o in answers if o is not None and o.layout != r.layout and r.overlaps(o)]
        for title, r in answers
        if r is not None
    }


def assumptions(results: list[LayoutResult | None]) -> str:
    """What the times assume, each once, in the order the results name them ("" when none do)."""
    seen: dict[str, None] = {}
    for r in results:
        if r is not None:
            seen.update(dict.fromkeys(r.assumes))
    return "; ".join(seen)


def host_memory_line(r: LayoutResult) -> str:
    """ "host memory: 476.8 GiB of 2 TiB a node" for a layout with ZeRO-Offload (NOTE: [Host memory
    under ZeRO-Offload] in :mod:`partitioner.cluster.memory`), "over" when it does not fit there;
    "" for any other layout. O(1)."""
    if not r.layout.offload or not r.host_memory_bytes:
        return ""
    from partitioner.units import format_bytes

    over = " (over: does not fit)" if r.limit == "host memory" else ""
    return f"host memory: {format_bytes(int(r.host_bytes))} of {format_bytes(int(r.host_memory_bytes))} a node{over}"
