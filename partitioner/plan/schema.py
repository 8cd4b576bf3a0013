"""Plan JSON migrations: older schema versions upgraded, as dicts, to the current one.

Schema 1 (the first release) kept options as a loose dict (``"node_latency": "given"``, and for
``aot_based`` the mapping again) and stored no start or finish times; schema 2 records a typed
provenance and the schedule. :func:`upgrade` turns a version-1 dict into a version-2 dict that
:meth:`partitioner.plan.Plan.from_dict` reads like any other.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from partitioner.graph import toposort

__all__ = ["upgrade", "as_float", "as_int"]


def upgrade(data: Mapping[str, Any]) -> dict[str, Any]:
    """A plan dict of any readable version as a version-2 dict (unchanged when already 2)."""
    out = dict(data)
    if out.get("schema_version") != 1:
        return out
    old = dict(out.pop("options", {}) or {})
    options: dict[str, Any] = {}
    if out.get("transfer_rate_bytes_per_s") is not None:
        options["transfer_rate_bytes_per_s"] = out["transfer_rate_bytes_per_s"]
    for key in ("saturate_host", "force_partition", "search_budget"):
        if old.get(key):
            options[key] = old[key]
    out["provenance"] = {"options": options, "single_partition": bool(old.get("single_partition", False)),
                         "edited": bool(old.get("edited", False))}
    if isinstance(out.get("partitions"), list):
        out["partitions"] = _with_schedule(out["partitions"], list(out.get("edges", []) or []))
    out["schema_version"] = 2
    return out


def _with_schedule(partitions: list[Any], edges: list[Any]) -> list[Any]:
    """Start and finish times from the recorded latencies and edges: the longest-path schedule
    version 1's latency was. Left as they are when the plan is malformed or cyclic."""
    try:
        ids = sorted(int(p["id"]) for p in partitions)
        if not all(isinstance(p, dict) for p in partitions):
            return partitions
        if ids != list(range(len(ids))):
            return partitions
        cost = {(int(e["src"]), int(e["dst"])): float(e["latency_s"]) for e in edges}
        latency = {int(p["id"]): float(p["latency_s"]) for p in partitions}
    except (KeyError, TypeError, ValueError):
        return partitions
    order = toposort(len(ids), cost)
    if order is None:
        return partitions
    incoming: dict[int, list[tuple[int, float]]] = {p: [] for p in ids}
    for (a, b), lat in cost.items():
        incoming[b].append((a, lat))
    times: dict[int, tuple[float, float]] = {}
    for p in order:
        start = max((times[q][1] + lat for q, lat in incoming[p]), default=0.0)
        times[p] = (start, start + latency[p])
    return [{**p, "start_s": times[int(p["id"])][0], "finish_s": times[int(p["id"])][1]} for p in partitions]


def as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(f"expected a number, got {value!r}")
    out = float(value)
    if math.isnan(out):
        raise ValueError("a figure is NaN")
    return out


def as_int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise TypeError(f"expected an integer, got {value!r}")
    return int(value)  # an infinite float raises OverflowError: a format error
