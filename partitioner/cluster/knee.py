"""The knee of serving answers: the layout past which a user's tokens a second gain little for
much more cost. Torch-free; the trade-off curve's knee in the sense of Satopaa et al. 2011
("Finding a 'Kneedle' in a Haystack"), read here as an elasticity on the price-speed front.

# NOTE: [Serving knee]
Each serving answer has a price (dollars a million generated tokens) and a speed for each user
(tokens a second a sequence). The answers worth showing are the price-speed front: cheapest first,
each faster than every cheaper one. Walking the front from the cheapest, a step to a dearer answer
is worth taking when it buys speed in proportion to what it costs: its elasticity
``ln(speed ratio) / ln(price ratio)`` is at least ``KNEE_ELASTICITY`` (one half: doubling the
price buys at least 41 % more speed). From each answer the walk goes to the further answer of best
elasticity, so a dip in the front does not stop it early; the knee is where no further answer is
worth its price. A step that costs nothing more is always taken. Issue 52's example, 27 times the
cheapest price for 10 % more speed, has an elasticity of 0.03.
"""

from __future__ import annotations

import math
from typing import Sequence

from partitioner.cluster.layout_types import LayoutResult

__all__ = ["serving_knee", "price_speed_front", "KNEE_ELASTICITY"]

KNEE_ELASTICITY = 0.5  # NOTE: [Serving knee]


def _speed(r: LayoutResult) -> float:
    """Tokens a second for each user: the serving figure, else 0 (not a serving answer)."""
    return float(r.extra.get("tokens_per_s_per_sequence", 0.0))


def price_speed_front(results: Sequence[LayoutResult]) -> list[LayoutResult]:
    """The fitting serving answers no cheaper answer beats for speed, cheapest first (ties in
    price: the fastest; then the fewer devices). O(n log n)."""
    usable = [r for r in results if r.fits and _speed(r) > 0 and math.isfinite(r.cost_per_million_tokens)]
    usable.sort(key=lambda r: (r.cost_per_million_tokens, -_speed(r), r.devices, r.layout.label()))
    front: list[LayoutResult] = []
    for r in usable:
        if not front or _speed(r) > _speed(front[-1]):
            front.append(r)
    return front


def _elasticity(a: LayoutResult, b: LayoutResult) -> float:
    """ln(speed ratio) / ln(price ratio) of going from ``a`` to the faster ``b``; inf when ``b``
    costs no more."""
    price = b.cost_per_million_tokens / a.cost_per_million_tokens if a.cost_per_million_tokens > 0 else math.inf
    if price <= 1.0:
        return math.inf
    return math.log(_speed(b) / _speed(a)) / math.log(price)


def serving_knee(results: Sequence[LayoutResult], elasticity: float = KNEE_ELASTICITY) -> LayoutResult | None:
    """The serving answer at the knee of price against tokens a second a user (NOTE: [Serving
    knee]); None when no answer fits or none is a serving answer. O(n^2) in the front's length."""
    front = price_speed_front(results)
    if not front:
        return None
    at = 0
    while at + 1 < len(front):
        gains = [(_elasticity(front[at], front[j]), j) for j in range(at + 1, len(front))]
        best, j = max(gains, key=lambda g: (g[0], g[1]))
        if best < elasticity:
            break
        at = j
    return front[at]
