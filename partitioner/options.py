"""How a plan is asked for: :class:`PartitionOptions`, one frozen, typed record passed down the
call chain (torch's ``PartitionerConfig`` plays this part in the reference partitioner).

The app, the command line and :func:`partitioner.accelerator.compare.compare_modes` build one with
:meth:`PartitionOptions.build`, so the same inputs mean the same plan everywhere; a
:class:`~partitioner.plan.Plan` records the options it was made with in its provenance.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from partitioner.errors import PartitionError

__all__ = ["PartitionOptions", "AotMapping", "COST_MODELS", "NodeLatencyTable", "check_latency_pair"]

MAX_TIME_LIMIT_S = 86_400.0  # a solver's time limit: one day (the CLI's --time-limit caps it alike)

COST_MODELS = ("physical", "torch")

# Given node latencies: ((node name, (memory seconds, compute seconds)), ...), sorted by name.
NodeLatencyTable = tuple[tuple[str, tuple[float, float]], ...]


@dataclass(frozen=True)
class AotMapping:
    """``aot_based``'s input: which partition each node is in, and which devices each partition
    runs on (the reference's ``node_to_partition_mapping`` and
    ``partition_to_logical_device_mapping``)."""

    node_to_partition: tuple[tuple[str, int], ...]
    partition_to_devices: tuple[tuple[int, tuple[int, ...]], ...]

    @classmethod
    def build(
        cls, node_to_partition: Mapping[str, int], partition_to_devices: Mapping[int, Sequence[int]]
    ) -> "AotMapping":
        try:
            nodes = tuple(sorted((str(k), int(v)) for k, v in node_to_partition.items()))
            parts = tuple(sorted((int(k), tuple(int(d) for d in v)) for k, v in partition_to_devices.items()))
        except (TypeError, ValueError, AttributeError) as exc:
            raise PartitionError(
                "aot_based needs node_to_partition as {node name: partition id} and "
                f"partition_to_devices as {{partition id: [logical device ids]}} ({exc})"
            ) from None
        return cls(nodes, parts)


def check_latency_pair(name: str, pair: Any) -> tuple[float, float]:
    try:
        mem_s, compute_s = (float(v) for v in pair)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a whole number beyond a float
        raise PartitionError(
            f"node_latency[{name!r}] must be a pair (memory seconds, compute seconds), got {pair!r}"
        ) from None
    if not (math.isfinite(mem_s) and math.isfinite(compute_s)):
        raise PartitionError(
            f"node_latency[{name!r}] must be finite seconds, got {pair!r}; measure the node again "
            "or leave it out to use the roofline estimate"
        )
    if mem_s < 0 or compute_s < 0:
        raise PartitionError(f"node_latency[{name!r}] must be non-negative, got {pair!r}")
    return mem_s, compute_s


@dataclass(frozen=True)
class PartitionOptions:
    """Everything besides the graph, the devices and the mode that decides a plan."""

    transfer_rate_bytes_per_s: float | None = None  # None: each device's link bandwidth (or free)
    node_latency: NodeLatencyTable | None = None  # given latencies; others use the roofline
    saturate_host: bool = False  # replicate the plan onto idle devices
    force_partition: bool = False  # partition even when the model fits one device
    search_budget: int | None = None  # cost-model evaluations for cost_aware / kl_based
    aot: AotMapping | None = None  # aot_based's mapping (not stored in plans: partitions are it)
    cost_model: str = "physical"  # "physical" or "torch"
    time_limit_s: float | None = None  # the optimal mode's solver time limit

    def __post_init__(self) -> None:
        rate = self.transfer_rate_bytes_per_s
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0 or math.isnan(rate)
        ):
            raise PartitionError(
                f"transfer_rate_bytes_per_s must be a positive number (got {rate!r}); "
                "e.g. 25e9 for 25 GB/s, or None to use the devices' link bandwidth"
            )
        if self.search_budget is not None and (
            isinstance(self.search_budget, bool) or not isinstance(self.search_budget, int) or self.search_budget < 1
        ):
            raise PartitionError(f"search_budget must be a positive integer (got {self.search_budget!r})")
        if self.cost_model not in COST_MODELS:
            raise PartitionError(f"unknown cost model {self.cost_model!r}; choose one of {', '.join(COST_MODELS)}")
        if self.time_limit_s is not None and not 0 < self.time_limit_s <= MAX_TIME_LIMIT_S:
            raise PartitionError(
                f"time_limit_s must be seconds in (0, {MAX_TIME_LIMIT_S:g}] (one day; got "
                f"{self.time_limit_s!r}); the solver keeps its best plan when the limit passes"
            )

    @classmethod
    def build(
        cls,
        transfer_rate_bytes_per_s: float | None = None,
        node_latency: Mapping[str, Sequence[float]] | None = None,
        saturate_host: bool = False,
        force_partition: bool = False,
        search_budget: int | None = None,
        node_to_partition: Mapping[str, int] | None = None,
        partition_to_devices: Mapping[int, Sequence[int]] | None = None,
        cost_model: str = "physical",
        time_limit_s: float | None = None,
    ) -> "PartitionOptions":
        """From the keyword arguments of :func:`partitioner.partition` (checked here, once)."""
        table: NodeLatencyTable | None = None
        if node_latency:
            if not isinstance(node_latency, Mapping):
                raise PartitionError("node_latency must map node names to (memory s, compute s) pairs")
            table = tuple(sorted((str(k), check_latency_pair(str(k), v)) for k, v in node_latency.items()))
        aot = None
        if node_to_partition is not None or partition_to_devices is not None:
            aot = AotMapping.build(node_to_partition or {}, partition_to_devices or {})
        return cls(
            transfer_rate_bytes_per_s=None if transfer_rate_bytes_per_s is None else float(transfer_rate_bytes_per_s),
            node_latency=table,
            saturate_host=bool(saturate_host),
            force_partition=bool(force_partition),
            search_budget=None if search_budget is None else int(search_budget),
            aot=aot,
            cost_model=cost_model,
            time_limit_s=None if time_limit_s is None else float(time_limit_s),
        )

    @property
    def node_latency_dict(self) -> dict[str, tuple[float, float]] | None:
        return None if self.node_latency is None else dict(self.node_latency)

    def replace(self, **changes: Any) -> "PartitionOptions":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON form, without ``aot`` (a plan's partitions are its mapping) and without defaults."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "aot" or value == f.default:
                continue
            out[f.name] = {k: list(v) for k, v in value} if f.name == "node_latency" else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PartitionOptions":
        known = {f.name for f in dataclasses.fields(cls)} - {"aot"}
        values = {k: v for k, v in data.items() if k in known}
        latency = values.pop("node_latency", None)
        if isinstance(latency, Mapping):
            values["node_latency"] = tuple(sorted((str(k), check_latency_pair(str(k), v)) for k, v in latency.items()))
        return cls(**values)
