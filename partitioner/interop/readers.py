"""Reading the files people give both front ends: per-node latency tables (JSON or CSV).

One reader, so a file means the same thing in the app and on the command line. Errors raise
:class:`LatencyFileError` (a :class:`~partitioner.errors.PartitionError`) naming the file, the
line or node, the rule and the fix.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Mapping, Sequence

from partitioner.errors import PartitionError

__all__ = ["LatencyFileError", "read_node_latency_text", "MAX_LATENCY_FILE_BYTES"]

MAX_LATENCY_FILE_BYTES = 64 * 2**20  # a latency table for a 100,000-node graph is a few MiB


class LatencyFileError(PartitionError):
    """A node-latency file could not be read."""


def _pair(name: str, value: Any, where: str) -> tuple[str, tuple[float, float]]:
    if isinstance(value, Mapping):
        value = (value.get("mem_s", value.get("memory_s")), value.get("compute_s"))
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        raise LatencyFileError(f"{where}: node {name!r} needs a pair [memory seconds, compute seconds] (got {value!r})")
    try:
        mem_s, compute_s = float(value[0]), float(value[1])
    except (TypeError, ValueError, OverflowError):
        raise LatencyFileError(f"{where}: node {name!r} has a non-numeric latency {value!r}") from None
    if not (math.isfinite(mem_s) and math.isfinite(compute_s)) or mem_s < 0 or compute_s < 0:
        raise LatencyFileError(
            f"{where}: node {name!r} latencies must be finite and >= 0 seconds (got {value!r}); "
            "measure the node again or leave it out to use the roofline estimate"
        )
    return name, (mem_s, compute_s)


def read_node_latency_text(data: bytes | str, filename: str = "") -> dict[str, tuple[float, float]]:
    """Per-node latencies ``{name: (memory seconds, compute seconds)}`` from a JSON or CSV file.

    JSON: ``{"fc1": [1e-6, 2e-6], ...}``, ``{"fc1": {"mem_s": .., "compute_s": ..}}`` or a list
    of ``{"name": .., "mem_s": .., "compute_s": ..}``. CSV: rows ``name,mem_s,compute_s``, with
    or without that header row (blank lines and ``#`` comments skipped). O(size).
    """
    where = filename or "node-latency file"
    if len(data) > MAX_LATENCY_FILE_BYTES:
        raise LatencyFileError(
            f"{where} is larger than {MAX_LATENCY_FILE_BYTES // 2**20} MiB; "
            "give latencies for the graph's op nodes only"
        )
    text = data.decode("utf-8-sig", errors="replace") if isinstance(data, bytes) else data.removeprefix("\ufeff")
    if not text.strip():
        raise LatencyFileError(f"{where} is empty; give one (memory s, compute s) pair per node name")
    if filename.lower().endswith(".csv") or not text.lstrip().startswith(("{", "[")):
        return _read_csv(text, where)
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LatencyFileError(
            f"{where} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except RecursionError:
        raise LatencyFileError(f"{where} is nested too deeply; write {{name: [mem_s, compute_s]}}") from None
    items: list[tuple[str, Any]]
    if isinstance(loaded, Mapping):
        items = [(str(k), v) for k, v in loaded.items()]
    elif isinstance(loaded, list):
        items = []
        for i, entry in enumerate(loaded):
            if not isinstance(entry, Mapping) or "name" not in entry:
                raise LatencyFileError(f"{where} item {i}: each list item needs name, mem_s and compute_s")
            items.append((str(entry["name"]), entry))
    else:
        raise LatencyFileError(f"{where} must hold an object {{name: [mem_s, compute_s]}} or a list")
    if not items:
        raise LatencyFileError(f"{where} names no node; give one (memory s, compute s) pair per node")
    return dict(_pair(name, value, where) for name, value in items)


def _read_csv(text: str, where: str) -> dict[str, tuple[float, float]]:
    result: dict[str, tuple[float, float]] = {}
    columns = (0, 1, 2)
    first = True
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [c.strip() for c in row]
        if not cells or not "".join(cells) or cells[0].startswith("#"):
            continue
        if first:
            first = False
            lowered = [c.lower() for c in cells]
            if {"name", "mem_s", "compute_s"} <= set(lowered):
                columns = (lowered.index("name"), lowered.index("mem_s"), lowered.index("compute_s"))
                continue
        if len(cells) <= max(columns) or (columns == (0, 1, 2) and len(cells) != 3):
            raise LatencyFileError(
                f"{where} line {lineno}: expected the columns name,mem_s,compute_s "
                f"(got {len(cells)}: {','.join(cells)})"
            )
        name = cells[columns[0]]
        if not name:
            raise LatencyFileError(f"{where} line {lineno}: the name column is empty")
        key, pair = _pair(name, (cells[columns[1]], cells[columns[2]]), f"{where} line {lineno}")
        result[key] = pair
    if not result:
        raise LatencyFileError(f"{where} holds no rows; write name,mem_s,compute_s lines")
    return result
