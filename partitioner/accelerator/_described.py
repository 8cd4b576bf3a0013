"""One line on a move or swap a local search tried, for a decision trace (:mod:`._search`)."""

from __future__ import annotations

from typing import Any, Sequence

from partitioner.units import format_seconds

__all__ = ["describe"]


def describe(s: Any, moves: Sequence[tuple[int, int]], lat: float | None, outcome: str) -> str:
    """One line on a tried move or swap for a decision trace."""
    names = s.cost.graph.nodes
    what = " and ".join(f"{names[v].name} P{s.part[v]} -> P{q}" for v, q in moves)
    result = "does not fit" if lat is None else f"latency {format_seconds(lat)}"
    return f"{what}: {result}, {outcome}"
