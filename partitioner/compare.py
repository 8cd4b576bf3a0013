"""Run several partition modes on one graph and devices, and tabulate their results side by side.

Shared by ``partition-explorer compare`` and the app's comparison view. Each mode is timed with
``time.perf_counter``; a mode that fails (no plan fits, the model has no embeddings for
``sparse_nn``, ...) gives a result with its error message instead of stopping the others.
Also holds the small text-table and number formatters the CLI reports share.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .api import partition
from .devices import Device
from .errors import PartitionError
from .graph import Graph
from .modes import MODES, get_mode
from .plan import Plan
from .units import format_seconds

__all__ = [
    "ModeResult",
    "compare_modes",
    "default_modes",
    "best_mode",
    "format_comparison",
    "format_table",
    "format_seconds",
]

logger = logging.getLogger(__name__)

# Keyword arguments of partition() that compare_modes passes through to every mode.
_PASS_THROUGH = tuple(
    name for name in inspect.signature(partition).parameters if name not in ("graph", "devices", "mode")
)


@dataclass(frozen=True)
class ModeResult:
    """One mode's outcome; the numbers are None when the mode failed (``error`` says why)."""

    mode: str
    latency_s: float | None  # end-to-end critical-path latency of the plan
    partitions: int | None  # number of partitions
    peak_memory_utilisation: float | None  # max over devices of used / capacity
    seconds: float  # wall time the mode took, failed or not
    error: str | None  # the failure message, None on success
    plan: Plan | None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self, include_plan: bool = False) -> dict[str, Any]:
        """JSON-ready; ``include_plan`` adds the full plan (``Plan.to_dict``)."""
        data: dict[str, Any] = {
            "mode": self.mode,
            "latency_s": self.latency_s,
            "partitions": self.partitions,
            "peak_memory_utilisation": self.peak_memory_utilisation,
            "seconds": self.seconds,
            "error": self.error,
        }
        if include_plan:
            data["plan"] = None if self.plan is None else self.plan.to_dict()
        return data


def default_modes() -> list[str]:
    """Every registered mode that needs no extra input (all but ``aot_based``), registry order."""
    return [m for m in MODES if m != "aot_based"]


def compare_modes(
    graph: Graph,
    devices: Sequence[Device],
    modes: Iterable[str] | None = None,
    **partition_kwargs: Any,
) -> list[ModeResult]:
    """Partition ``graph`` over ``devices`` with each of ``modes`` (default: :func:`default_modes`).

    ``partition_kwargs`` go to :func:`partitioner.partition` unchanged (``transfer_rate_bytes_per_s``,
    ``node_latency``, ``saturate_host``, ``force_partition``, ...). Results come back in the order
    of ``modes``. An unknown mode or keyword raises :class:`PartitionError` before anything runs;
    a mode that fails yields a :class:`ModeResult` holding its error. Cost: the sum of the modes'.
    """
    names = default_modes() if modes is None else list(modes)
    for name in names:
        get_mode(name)
    unknown = sorted(set(partition_kwargs) - set(_PASS_THROUGH))
    if unknown:
        raise PartitionError(
            f"compare_modes() got unknown option(s) {unknown}; valid options are {list(_PASS_THROUGH)}"
        )
    results = []
    for name in names:
        start = time.perf_counter()
        try:
            plan = partition(graph, devices, mode=name, **partition_kwargs)
        except PartitionError as exc:
            seconds = time.perf_counter() - start
            logger.info("mode %s failed: %s", name, exc)
            results.append(ModeResult(name, None, None, None, seconds, str(exc), None))
            continue
        except Exception as exc:  # a bug in one mode must not hide the others' results
            seconds = time.perf_counter() - start
            logger.warning("mode %s raised %s: %s", name, type(exc).__name__, exc)
            logger.debug("traceback of mode %s", name, exc_info=True)
            message = f"internal error in mode {name!r}: {type(exc).__name__}: {exc} (please report it)"
            results.append(ModeResult(name, None, None, None, seconds, message, None))
            continue
        seconds = time.perf_counter() - start
        results.append(
            ModeResult(name, plan.latency_s, len(plan.partitions), plan.memory_utilisation(),
                       seconds, None, plan)
        )
    return results


# --------------------------------------------------------------------------------------------
# Text formatting


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """Plain-text table with a dashed rule under the headers; columns in ``right`` align right."""
    body = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in body)
    return "\n".join(out)


def best_mode(results: Sequence[ModeResult]) -> str | None:
    """The successful mode with the lowest latency; latencies within a relative 1e-9 of each
    other tie (float noise), and ties go to fewer partitions, then to the earlier result."""
    ok = [r for r in results if r.ok and r.latency_s is not None and math.isfinite(r.latency_s)]
    if not ok:
        return None
    low = min(r.latency_s for r in ok if r.latency_s is not None)
    close = [r for r in ok if r.latency_s is not None and r.latency_s <= low * (1 + 1e-9)]
    return min(close, key=lambda r: r.partitions or 0).mode


def format_comparison(results: Sequence[ModeResult]) -> str:
    """The comparison as a table, the fastest successful mode marked with ``*``; failed modes
    show their error (joined onto one line) in place of the numbers."""
    best = best_mode(results)
    rows = []
    for r in results:
        mark = "*" if r.mode == best else ""
        if r.ok:
            util = r.peak_memory_utilisation
            rows.append([
                r.mode + mark,
                format_seconds(r.latency_s),
                r.partitions,
                "-" if util is None else f"{util:.1%}",
                format_seconds(r.seconds),
                "",
            ])
        else:
            message = " ".join(part.strip() for part in (r.error or "").splitlines())
            rows.append([r.mode, "-", "-", "-", format_seconds(r.seconds), f"failed: {message}"])
    table = format_table(
        ["mode", "latency", "partitions", "peak memory", "time taken", "error"], rows, right=(1, 2, 3, 4)
    )
    note = f"\n* lowest latency: {best}" if best else "\nno mode found a plan"
    return table + note
