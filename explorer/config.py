"""The hashable description of one plan request: which model, which devices, which mode.

Frozen dataclasses of tuples, so they key ``st.cache_resource`` / ``st.cache_data`` and fit in
session state; :meth:`PlanConfig.partition_kwargs` turns one into the keyword arguments of
:func:`partitioner.partition`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import partitioner
from partitioner import Device

__all__ = ["ModelChoice", "PlanConfig", "device_key", "devices_from_key", "DEFAULT_MODEL", "PLAN_MODES"]

DEFAULT_MODEL = "transformer"  # the app opens on it: it needs several of its default devices
PLAN_MODES = [m for m in partitioner.MODES if m != "aot_based"]  # aot_based: the Review & edit page

DeviceKey = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class ModelChoice:
    """A sample model with size overrides, or a person's own ``package.module:factory``."""

    name: str  # sample model name, or the factory import path when ``user`` is True
    overrides: tuple[tuple[str, Any], ...] = ()  # sorted (field, value) pairs of the config
    user: bool = False

    @property
    def label(self) -> str:
        if not self.overrides:
            return self.name
        knobs = ", ".join(f"{k}={v}" for k, v in self.overrides)
        return f"{self.name} ({knobs})"


def device_key(device: Device) -> DeviceKey:
    """A device as sorted (field, value) pairs: hashable, and stable across runs."""
    return tuple(sorted(device.to_dict().items()))


def devices_from_key(key: tuple[DeviceKey, ...]) -> list[Device]:
    return [Device(**dict(items)) for items in key]


@dataclass(frozen=True)
class PlanConfig:
    """Everything :func:`partitioner.partition` needs besides the traced graph."""

    model: ModelChoice
    devices: tuple[DeviceKey, ...]
    mode: str = partitioner.DEFAULT_MODE
    transfer_rate_bytes_per_s: float | None = None
    saturate_host: bool = False
    force_partition: bool = False
    search_budget: int | None = None
    node_latency: tuple[tuple[str, float, float], ...] = ()  # (name, memory s, compute s)

    @classmethod
    def build(cls, model: ModelChoice, devices: list[Device], **options: Any) -> "PlanConfig":
        latency = options.pop("node_latency", None) or {}
        rows = tuple(sorted((str(n), float(m), float(c)) for n, (m, c) in dict(latency).items()))
        return cls(model, tuple(device_key(d) for d in devices), node_latency=rows, **options)

    def device_list(self) -> list[Device]:
        return devices_from_key(self.devices)

    def node_latency_map(self) -> dict[str, tuple[float, float]] | None:
        return {n: (m, c) for n, m, c in self.node_latency} or None

    def with_mode(self, mode: str) -> "PlanConfig":
        return replace(self, mode=mode)

    def partition_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`partitioner.partition` (and ``compare_modes``), less the
        graph, the devices and the mode."""
        return {
            "transfer_rate_bytes_per_s": self.transfer_rate_bytes_per_s,
            "node_latency": self.node_latency_map(),
            "saturate_host": self.saturate_host,
            "force_partition": self.force_partition,
            "search_budget": self.search_budget,
        }
