"""Plan JSON at the boundary: older schema versions upgraded, as dicts, to the current one, and
every field checked against the schema before a record is built (:func:`check`).

Schema 1 (the first release) kept options as a loose dict (``"node_latency": "given"``, and for
``aot_based`` the mapping again) and stored no start or finish times; schema 2 records a typed
provenance and the schedule. :func:`upgrade` turns a version-1 dict into a version-2 dict that
:meth:`partitioner.plan.Plan.from_dict` reads like any other.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from partitioner.devices import Device
from partitioner.errors import DeviceSpecError, PartitionError
from partitioner.graph import toposort
from partitioner.options import COST_MODELS, PartitionOptions

__all__ = ["upgrade", "check", "PlanFormatError", "as_float", "as_int"]


class PlanFormatError(PartitionError):
    """A plan file is not valid plan JSON (syntax, schema version, or a field's type or range)."""


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
    out["provenance"] = {
        "options": options,
        "single_partition": bool(old.get("single_partition", False)),
        "edited": bool(old.get("edited", False)),
    }
    edges = out.get("edges", [])
    if isinstance(out.get("partitions"), (list, tuple)) and isinstance(edges, (list, tuple)):
        out["partitions"] = _with_schedule(list(out["partitions"]), list(edges))
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
    except (KeyError, TypeError, ValueError, OverflowError):
        return partitions
    if any(not (0 <= a < len(ids) and 0 <= b < len(ids)) for a, b in cost):
        return partitions  # check() names the edge
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


# NOTE: [Plan schema] What :func:`check` holds a plan file to, field by field (a hand-written
# checker: jsonschema is not a dependency, and its messages name JSON pointers, not the fix).
# Types and ranges here; the rules a well-formed plan can still break against a model or its
# devices (a gap in the ids, a node twice, an unknown device) are :mod:`partitioner.plan.validate`'s
# violations, reported on a plan that loaded. Ids that edges, parents, children and the critical
# path name must be partitions of the file: a reader indexes by them.
_MAX_INT = 2**63 - 1  # int64: the tables and figures hold every count
_MAX_FLOAT_INT = 2**1000  # a whole number written where seconds go: below float's range (inf aside)


def _whole(low: int) -> Any:
    def rule(v: Any) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and low <= v <= _MAX_INT
        return None if ok else f"must be a whole number from {low} to {_MAX_INT}"

    return rule


def _number(finite: bool, positive: bool = False) -> Any:
    def rule(v: Any) -> str | None:
        ok = (
            isinstance(v, (int, float))
            and not isinstance(v, bool)
            and (isinstance(v, float) or abs(v) <= _MAX_FLOAT_INT)
            and not math.isnan(v)
            and (v > 0 if positive else v >= 0)
            and (math.isfinite(v) or not finite)
        )
        what = "a positive" if positive else "a non-negative"
        return None if ok else f"must be {what}{', finite' if finite else ''} number"

    return rule


def _kind(kind: Any, name: str) -> Any:
    def rule(v: Any) -> str | None:
        ok = isinstance(v, kind) and not (kind is not bool and isinstance(v, bool))
        return None if ok else f"must be {name}"

    return rule


def _optional(inner: Any) -> Any:
    return lambda v: None if v is None else inner(v)


def _list(inner: Any, what: str) -> Any:
    def rule(v: Any) -> str | None:
        if not isinstance(v, (list, tuple)):  # tuples: Plan.to_dict's own output, read back
            return f"must be a list of {what}"
        bad = next((i for i, x in enumerate(v) if inner(x) is not None), None)
        return None if bad is None else f"must be a list of {what} (item {bad} is {_shown(v[bad])})"

    return rule


_ID, _COUNT, _SECONDS, _TIME = _whole(0), _whole(0), _number(finite=True), _number(finite=False)
_STR, _BOOL = _kind(str, "a string"), _kind(bool, "true or false")
_IDS = _list(_ID, "whole numbers >= 0")
_RATE = _optional(_number(finite=True, positive=True))
_TOP = {
    "mode": (True, _STR),
    "partitions": (True, _list(_kind(Mapping, "an object"), "objects")),
    "devices": (True, _list(_kind(Mapping, "an object"), "objects")),
    "latency_s": (True, _TIME),
    "edges": (False, _list(_kind(Mapping, "an object"), "objects")),
    "critical_path": (False, _IDS),
    "transfer_rate_bytes_per_s": (False, _RATE),
    "device_usage": (False, _list(_list(_COUNT, "whole numbers"), "[device id, bytes] pairs")),
    "provenance": (False, _kind(Mapping, "an object")),
    "model": (False, _STR),
    "graph_fingerprint": (False, _STR),
    "lower_bound_s": (False, _SECONDS),
    "proven_optimal": (False, _BOOL),
}
_PARTITION = {
    "id": (True, _ID),
    "node_names": (True, _list(_STR, "strings")),
    "device_ids": (True, _IDS),
    "memory_bytes": (True, _COUNT),
    "memory_latency_s": (True, _SECONDS),
    "compute_latency_s": (True, _SECONDS),
    "latency_s": (True, _SECONDS),
    "bfs_level": (True, _whole(-1)),
    "parents": (True, _IDS),
    "children": (True, _IDS),
    "start_s": (False, _TIME),
    "finish_s": (False, _TIME),
}
_EDGE = {"src": (True, _ID), "dst": (True, _ID), "bytes": (True, _COUNT), "latency_s": (True, _TIME)}
_PROVENANCE = {
    "options": (False, _kind(Mapping, "an object")),
    "single_partition": (False, _BOOL),
    "edited": (False, _BOOL),
    "forced_cap_bytes": (False, _optional(_COUNT)),
    "solver": (False, _STR),
    "solver_bound": (False, _BOOL),
}
_OPTIONS = {
    "transfer_rate_bytes_per_s": (False, _RATE),
    "node_latency": (False, _optional(_kind(Mapping, "an object"))),
    "saturate_host": (False, _BOOL),
    "force_partition": (False, _BOOL),
    "search_budget": (False, _optional(_whole(1))),
    "cost_model": (False, _STR),
    "time_limit_s": (False, _optional(_number(finite=True, positive=True))),
}
_V1_OPTIONS = {key: spec for key, spec in _OPTIONS.items() if key != "node_latency"} | {
    "single_partition": (False, _BOOL),
    "edited": (False, _BOOL),
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fields(data: Mapping[str, Any], spec: Mapping[str, tuple[bool, Any]], where: str, problems: list[str]) -> bool:
    """Check ``data``'s fields against ``spec`` (required, rule), adding a line per problem."""
    ok = True
    for key, (required, rule) in spec.items():
        if key not in data:
            if required:
                problems.append(f"{where or 'plan JSON'} lacks the field {key!r}")
                ok = False
            continue
        broken = rule(data[key])
        if broken:
            problems.append(f"{where}{'.' if where else ''}{key} {broken} (got {_shown(data[key])})")
            ok = False
    return ok


def check(data: Any) -> dict[str, Any]:
    """``data`` (a parsed plan file of any readable version) as a version-2 dict whose every field
    has the type and range :class:`~partitioner.plan.Plan` needs; raises :class:`PlanFormatError`
    listing every problem (NOTE: [Plan schema]). O(size of the file)."""
    if not isinstance(data, Mapping):
        raise PlanFormatError(f"a plan must be a JSON object, got {type(data).__name__}; export the plan again")
    problems: list[str] = []
    if data.get("schema_version") == 1 and data.get("options") is not None:
        if isinstance(data["options"], Mapping):
            _fields(data["options"], _V1_OPTIONS, "options", problems)
        else:
            problems.append(f"options must be an object or null in a schema-1 plan (got {_shown(data['options'])})")
        _raise(problems)
    out = upgrade(data)
    if _fields(out, _TOP, "", problems):
        parts_ok = all([_fields(p, _PARTITION, f"partitions[{i}]", problems) for i, p in enumerate(out["partitions"])])
        edges_ok = all([_fields(e, _EDGE, f"edges[{i}]", problems) for i, e in enumerate(out.get("edges", []))])
        if parts_ok and edges_ok:
            _check_ids(out, problems)
        for i, pair in enumerate(out.get("device_usage", [])):
            if len(pair) != 2:
                problems.append(f"device_usage[{i}] must be a [device id, bytes] pair (got {_shown(pair)})")
        _check_devices(out["devices"], problems)
        provenance = out.get("provenance", {})
        if _fields(provenance, _PROVENANCE, "provenance", problems):
            _check_options(provenance.get("options", {}), problems)
    _raise(problems)
    return out


def _check_ids(data: Mapping[str, Any], problems: list[str]) -> None:
    ids = {p["id"] for p in data["partitions"]}
    named = [
        (f"partitions[{i}].{key}", p[key]) for i, p in enumerate(data["partitions"]) for key in ("parents", "children")
    ]
    named += [(f"edges[{i}].{key}", [e[key]]) for i, e in enumerate(data.get("edges", [])) for key in ("src", "dst")]
    named += [("critical_path", data.get("critical_path", []))]
    for where, values in named:
        unknown = sorted(set(values) - ids)
        if unknown:
            problems.append(
                f"{where} names partition {unknown[0]}, which the plan does not have "
                f"(its partition ids are {sorted(ids)[:20]})"
            )


def _check_devices(devices: list[Mapping[str, Any]], problems: list[str]) -> None:
    seen: set[int] = set()
    for i, item in enumerate(devices):
        try:
            device = Device.from_dict(item)
        except DeviceSpecError as exc:
            problems.append(f"devices[{i}]: {exc}")
            continue
        if not isinstance(device.kind, str):
            problems.append(f"devices[{i}].kind must be a string (got {_shown(device.kind)})")
        if device.logical_id in seen:
            problems.append(
                f"devices[{i}].logical_id {device.logical_id} is used by another device; give each device its own id"
            )
        seen.add(device.logical_id)


def _check_options(options: Mapping[str, Any], problems: list[str]) -> None:
    if not _fields(options, _OPTIONS, "provenance.options", problems):
        return
    if options.get("cost_model", "physical") not in COST_MODELS:
        problems.append(
            f"provenance.options.cost_model must be one of {', '.join(COST_MODELS)} "
            f"(got {_shown(options['cost_model'])})"
        )
        return
    try:
        PartitionOptions.from_dict(options)
    except PartitionError as exc:
        problems.append(f"provenance.options: {exc}")


def _raise(problems: list[str]) -> None:
    if problems:
        count = len(problems)
        shown = problems[:12] + ([f"... and {count - 12} more"] if count > 12 else [])
        raise PlanFormatError(
            f"plan JSON breaks the plan schema ({count} problem{'s' if count != 1 else ''}):\n"
            + "\n".join(f"  - {p}" for p in shown)
            + "\nfix the file, or make or export the plan again with partition-explorer"
        )
