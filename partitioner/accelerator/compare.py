"""Run several partition modes on one graph and devices, and tabulate their results side by side.

Shared by ``partition-explorer compare`` and the app's comparison view (data here; the text table
is the command line's, in ``cli/report.py``). Each mode is timed with ``time.perf_counter``; a mode
that fails (no plan fits, the model has no embeddings for ``sparse_nn``, ...) gives a result with
its error message instead of stopping the others. The best mode follows the one best-plan rule,
:func:`partitioner.cost.model.best_index`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from partitioner.accelerator.api import partition_with
from partitioner.accelerator.modes import MODES, get_mode
from partitioner.cost.model import best_index
from partitioner.devices import Device
from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.options import PartitionOptions
from partitioner.plan.records import Plan

__all__ = [
    "ModeResult",
    "compare_modes",
    "default_modes",
    "best_mode",
    "gaps",
]

logger = logging.getLogger(__name__)


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
    options: PartitionOptions | None = None,
    **partition_kwargs: Any,
) -> list[ModeResult]:
    """Partition ``graph`` over ``devices`` with each of ``modes`` (default: :func:`default_modes`).

    ``options`` (or the same fields as keyword arguments of :meth:`PartitionOptions.build`:
    ``transfer_rate_bytes_per_s``, ``node_latency``, ``saturate_host``, ``force_partition``, ...)
    apply to every mode. Results come back in the order
    of ``modes``. An unknown mode or keyword raises :class:`PartitionError` before anything runs;
    a mode that fails yields a :class:`ModeResult` holding its error. Cost: the sum of the modes'.
    """
    names = default_modes() if modes is None else list(modes)
    for name in names:
        get_mode(name)
    if options is None:
        try:
            options = PartitionOptions.build(**partition_kwargs)
        except TypeError as exc:
            raise PartitionError(f"compare_modes() got an unknown option: {exc}") from None
    elif partition_kwargs:
        raise PartitionError("compare_modes() takes options= or keyword options, not both")
    results = []
    for name in names:
        start = time.perf_counter()
        try:
            plan = partition_with(graph, devices, name, options)
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
            ModeResult(name, plan.latency_s, len(plan.partitions), plan.memory_utilisation(), seconds, None, plan)
        )
    return results


def best_mode(results: Sequence[ModeResult]) -> str | None:
    """The successful mode the one best-plan rule prefers (:func:`partitioner.cost.model.best_index`:
    the lowest latency, fewer partitions winning near ties); None when every mode failed."""
    ok = [r for r in results if r.ok and r.latency_s is not None and r.partitions is not None]
    best = best_index([(r.latency_s or 0.0, r.partitions or 0) for r in ok])
    return None if best is None else ok[best].mode


def gaps(results: Sequence[ModeResult]) -> dict[str, tuple[float | None, float | None]]:
    """Per successful mode: (how far its latency is above the strongest lower bound any of the
    results proved, how far above the ``optimal`` mode's latency), as fractions; None where there
    is no bound or no optimal result. # NOTE: [Lower bound] Every plan's bound holds for every
    plan of the same graph, devices and options, so the largest one is the best to measure by."""
    ok = [r for r in results if r.ok and r.plan is not None and r.latency_s is not None]
    bound = max(
        (r.plan.lower_bound_s for r in ok if r.plan is not None and r.plan.provenance.forced_cap_bytes is None),
        default=0.0,
    )
    best = next((r.latency_s for r in ok if r.mode == "optimal"), None)
    out: dict[str, tuple[float | None, float | None]] = {}
    for r in ok:
        lat = float(r.latency_s or 0.0)
        to_bound = max(0.0, lat / bound - 1.0) if bound > 0 else None
        to_best = lat / best - 1.0 if best else None
        out[r.mode] = (to_bound, to_best)
    return out
