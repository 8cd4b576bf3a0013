"""Plans: the immutable result of partitioning, how it was made, and its JSON round trip.

A :class:`Plan` holds every figure the app, the command line and the exports show (memory,
latency, start and finish times, edges, the critical path); nothing downstream recomputes them.
:mod:`partitioner.plan.build` derives them from the cost model; the rules a plan must keep are
:mod:`partitioner.plan.validate`. JSON carries a ``schema_version``: 2 today, and version-1 files
(written before plans recorded their options as a typed record) still load.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from partitioner.devices import Device
from partitioner.errors import InvalidPlanError
from partitioner.graph import Graph
from partitioner.options import PartitionOptions
from partitioner.plan.schema import PlanFormatError
from partitioner.plan.schema import as_float as _float
from partitioner.plan.schema import as_int as _int
from partitioner.plan.schema import check as _check
from partitioner.plan.validate import Violation, plan_violations
from partitioner.units import format_seconds

__all__ = [
    "SCHEMA_VERSION",
    "Partition",
    "Edge",
    "Plan",
    "Provenance",
    "PlanFormatError",
    "OPTIMALITY_TOLERANCE",
]

SCHEMA_VERSION = 2
# A plan within this fraction of its proven lower bound is called optimal: the solver measures
# time in ticks of 1e-8 of a plan's latency, rounded down, so the bound can fall short by that.
OPTIMALITY_TOLERANCE = 1e-4
_READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class Partition:
    id: int
    node_names: tuple[str, ...]
    device_ids: tuple[int, ...]
    memory_bytes: int
    memory_latency_s: float  # memory part of the partition's critical path
    compute_latency_s: float  # compute part of the partition's critical path
    latency_s: float  # the critical path itself: sum of max(mem, compute) along it
    bfs_level: int  # longest distance from a partition with no parents (-1 if cyclic)
    parents: tuple[int, ...]
    children: tuple[int, ...]
    start_s: float = 0.0  # when it starts in the plan's schedule (inf if cyclic)
    finish_s: float = 0.0  # start_s + latency_s


@dataclass(frozen=True)
class Edge:
    """Data flowing from partition ``src`` to partition ``dst``."""

    src: int
    dst: int
    bytes: int  # outputs of ``src`` nodes read in ``dst``, each node counted once
    latency_s: float  # bytes / transfer rate, or 0 when the destination already holds them


@dataclass(frozen=True)
class Provenance:
    """How a plan was made: the options it was asked for with, and what happened on the way."""

    options: PartitionOptions = field(default_factory=PartitionOptions)
    single_partition: bool = False  # the whole model fit one device, so one partition (torch's rule)
    edited: bool = False  # a person moved nodes or re-placed partitions after ``mode`` made it
    forced_cap_bytes: int | None = None  # force_partition on a model that fits one device: the
    # memory each device was limited to while the mode ran, so it spread the model
    solver: str = ""  # what the optimal mode's solver did (status, search space, time)
    solver_bound: bool = False  # lower_bound_s is the solver's (above the heaviest path of nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "options": self.options.to_dict(),
            "single_partition": self.single_partition,
            "edited": self.edited,
            "forced_cap_bytes": self.forced_cap_bytes,
            "solver": self.solver,
            "solver_bound": self.solver_bound,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Provenance":
        cap = data.get("forced_cap_bytes")
        return cls(
            PartitionOptions.from_dict(dict(data.get("options", {}))),
            bool(data.get("single_partition", False)),
            bool(data.get("edited", False)),
            None if cap is None else int(cap),
            str(data.get("solver", "")),
            bool(data.get("solver_bound", False)),
        )


@dataclass(frozen=True)
class Plan:
    """An immutable partition plan; make one with :func:`partitioner.partition`."""

    mode: str
    partitions: tuple[Partition, ...]
    devices: tuple[Device, ...]
    edges: tuple[Edge, ...]
    latency_s: float  # end-to-end: the latest finish over partitions (inf if cyclic)
    critical_path: tuple[int, ...]  # partition ids along it
    transfer_rate_bytes_per_s: float | None
    device_usage: tuple[tuple[int, int], ...] = ()  # (logical id, bytes held) per used device
    provenance: Provenance = field(default_factory=Provenance)
    model: str = ""
    graph_fingerprint: str = ""
    lower_bound_s: float = 0.0  # no plan of this graph can be faster (NOTE: [Lower bound])
    proven_optimal: bool = False  # latency within OPTIMALITY_TOLERANCE of lower_bound_s
    schema_version: int = SCHEMA_VERSION

    # -- queries ----------------------------------------------------------------------------
    @property
    def options(self) -> PartitionOptions:
        return self.provenance.options

    @property
    def cost_model(self) -> str:
        """``"physical"`` or ``"torch"``: the cost model the figures were computed under."""
        return self.provenance.options.cost_model

    @property
    def gap_to_bound(self) -> float:
        """How far the latency is above the lower bound, as a fraction (0 = provably optimal)."""
        if self.proven_optimal:
            return 0.0
        if not (self.lower_bound_s > 0 and math.isfinite(self.latency_s)):
            return math.inf
        return max(0.0, self.latency_s / self.lower_bound_s - 1.0)

    def bound_summary(self) -> str:
        """One line on how far the plan can be from the best (the app and the command line show
        it): ``optimal ...`` or ``within 12.5% of the best possible ...``, naming the bound's source."""
        source = "proven by CP-SAT" if self.provenance.solver_bound else "the heaviest path of nodes"
        bound = format_seconds(self.lower_bound_s)
        if self.proven_optimal:
            return f"optimal: no plan can beat the lower bound {bound} ({source}) by more than 0.01%"
        gap = self.gap_to_bound
        if gap == math.inf:
            return "no bound (cyclic plan or zero-cost graph)"
        return f"within {gap:.1%} of the best possible (no plan can beat the lower bound {bound}: {source})"

    @property
    def mode_label(self) -> str:
        """``"size_based"``, or ``"size_based, edited"`` once a person changed it."""
        return f"{self.mode}, edited" if self.provenance.edited else self.mode

    def device(self, logical_id: int) -> Device:
        for d in self.devices:
            if d.logical_id == logical_id:
                return d
        raise KeyError(f"no device with logical id {logical_id}")

    def device_memory_bytes(self) -> dict[int, int]:
        """Memory used on each device (0 for idle ones); shared inputs of partitions on one
        device are counted once."""
        used = {d.logical_id: 0 for d in self.devices}
        used.update(dict(self.device_usage))
        return used

    def device_utilisation(self) -> dict[int, float]:
        """Used / capacity per device (inf for a used device of no memory)."""
        used = self.device_memory_bytes()
        return {
            d.logical_id: (
                used[d.logical_id] / d.memory_bytes if d.memory_bytes else (math.inf if used[d.logical_id] else 0.0)
            )
            for d in self.devices
        }

    def memory_utilisation(self) -> float:
        """Peak over devices of used / capacity (0 when no device is used)."""
        return max(self.device_utilisation().values(), default=0.0)

    def over_capacity(self) -> tuple[int, ...]:
        """Logical ids of the devices holding more than their memory (compared in bytes)."""
        used = self.device_memory_bytes()
        return tuple(d.logical_id for d in self.devices if used[d.logical_id] > d.memory_bytes)

    def schedule(self) -> dict[int, tuple[float, float]]:
        """Partition id -> (start s, finish s) in the plan's schedule; the largest finish is
        :attr:`latency_s`. Empty when the partitions form a cycle."""
        if any(math.isinf(p.start_s) for p in self.partitions):
            return {}
        return {p.id: (p.start_s, p.finish_s) for p in self.partitions}

    def node_to_partition(self) -> dict[str, int]:
        return {name: p.id for p in self.partitions for name in p.node_names}

    def partition_to_devices(self) -> dict[int, list[int]]:
        return {p.id: list(p.device_ids) for p in self.partitions}

    # -- validation -------------------------------------------------------------------------
    def violations(
        self,
        graph: Graph | None = None,
        devices: Sequence[Device] | None = None,
        check_fingerprint: bool = True,
        cost_model: str | None = None,
    ) -> list[Violation]:
        """Every broken rule as a typed :class:`~partitioner.plan.validate.Violation`; an empty list
        means the plan is valid. See :func:`partitioner.plan.validate.plan_violations`."""
        return plan_violations(self, graph, devices, check_fingerprint, cost_model)

    def check(self, graph: Graph | None = None) -> "Plan":
        """Raise :class:`InvalidPlanError` listing every violation; return self when valid."""
        problems = self.violations(graph)
        if problems:
            raise InvalidPlanError(problems)
        return self

    # -- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)  # devices' own form keeps a measured profile readable:
        data.update(provenance=self.provenance.to_dict(), devices=[d.to_dict() for d in self.devices])
        return {"schema_version": data.pop("schema_version"), **data}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Plan":
        if not isinstance(data, Mapping):
            raise PlanFormatError(f"a plan must be a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version not in _READABLE_VERSIONS:
            raise PlanFormatError(
                f"plan schema_version must be one of {list(_READABLE_VERSIONS)} (got {version!r}); "
                "re-export the plan with this version of partition-explorer"
            )
        data = _check(data)  # every field's type and range (NOTE: [Plan schema])
        try:
            partitions = tuple(_partition_from_dict(p) for p in data["partitions"])
            devices = tuple(Device.from_dict(d) for d in data["devices"])
            edges = tuple(
                Edge(_int(e["src"]), _int(e["dst"]), _int(e["bytes"]), _float(e["latency_s"]))
                for e in data.get("edges", ())
            )
            rate = data.get("transfer_rate_bytes_per_s")
            plan = cls(
                mode=data["mode"],
                partitions=partitions,
                devices=devices,
                edges=edges,
                latency_s=_float(data["latency_s"]),
                critical_path=tuple(data.get("critical_path", ())),
                transfer_rate_bytes_per_s=None if rate is None else _float(rate),
                device_usage=tuple((d, b) for d, b in data.get("device_usage", ())),
                provenance=Provenance.from_dict(data.get("provenance", {})),
                model=data.get("model", ""),
                graph_fingerprint=data.get("graph_fingerprint", ""),
                lower_bound_s=_float(data.get("lower_bound_s", 0.0)),
                proven_optimal=data.get("proven_optimal", False),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # check() lets none through
            raise PlanFormatError(f"plan JSON has a field of the wrong type or range: {exc}") from None
        return plan

    @classmethod
    def from_json(cls, text: str | bytes) -> "Plan":
        """A plan from its JSON text or bytes (UTF-8, with or without a byte order mark)."""
        try:
            data = json.loads(text.decode("utf-8-sig") if isinstance(text, bytes) else text.removeprefix("\ufeff"))
        except UnicodeDecodeError as exc:
            raise PlanFormatError(f"plan file is not UTF-8 text (byte {exc.start}); export the plan again") from None
        except json.JSONDecodeError as exc:
            raise PlanFormatError(
                f"plan file is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                "make or export the plan again"
            ) from None
        except RecursionError:
            raise PlanFormatError("plan file is nested too deeply to be a plan; export it again") from None
        return cls.from_dict(data)


def _partition_from_dict(p: Mapping[str, Any]) -> Partition:
    return Partition(
        id=_int(p["id"]),
        node_names=tuple(str(n) for n in p["node_names"]),
        device_ids=tuple(_int(d) for d in p["device_ids"]),
        memory_bytes=_int(p["memory_bytes"]),
        memory_latency_s=_float(p["memory_latency_s"]),
        compute_latency_s=_float(p["compute_latency_s"]),
        latency_s=_float(p["latency_s"]),
        bfs_level=_int(p["bfs_level"]),
        parents=tuple(_int(x) for x in p["parents"]),
        children=tuple(_int(x) for x in p["children"]),
        start_s=_float(p.get("start_s", 0.0)),
        finish_s=_float(p.get("finish_s", 0.0)),
    )
