"""The hashable description of one plan request: which model, which devices, which mode.

Frozen dataclasses of tuples, so they key ``st.cache_resource`` / ``st.cache_data`` and fit in
session state; a config carries the library's own :class:`~partitioner.options.PartitionOptions`,
built once from the sidebar's widgets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import partitioner
import sample_models
from partitioner import Device
from partitioner.options import PartitionOptions

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
    generation: int = 0  # bumped by "Reload the model": a new key, so the factory is imported again

    @property
    def label(self) -> str:
        """The name plans record: the same as the command line's (``sample_models.label``)."""
        return sample_models.label(self.name, dict(self.overrides))


def device_key(device: Device) -> DeviceKey:
    """A device as sorted (field, value) pairs: hashable, and stable across runs (a measured
    profile as its JSON text)."""
    data = device.to_dict()
    if "profile" in data:
        data["profile"] = json.dumps(data["profile"], sort_keys=True)
    return tuple(sorted(data.items()))


def devices_from_key(key: tuple[DeviceKey, ...]) -> list[Device]:
    devices = []
    for items in key:
        data = dict(items)
        if "profile" in data:  # a measured profile's JSON, or a preset's name ("h100-80gb@graphs")
            data["profile"] = json.loads(data["profile"])
        devices.append(Device.from_dict(data))
    return devices


@dataclass(frozen=True)
class PlanConfig:
    """Everything :func:`partitioner.partition` needs besides the traced graph."""

    model: ModelChoice
    devices: tuple[DeviceKey, ...]
    mode: str = partitioner.DEFAULT_MODE
    options: PartitionOptions = PartitionOptions()

    @classmethod
    def build(
        cls, model: ModelChoice, devices: list[Device], mode: str = partitioner.DEFAULT_MODE, **options: Any
    ) -> "PlanConfig":
        """``options`` are :meth:`PartitionOptions.build`'s keyword arguments."""
        return cls(model, tuple(device_key(d) for d in devices), mode, PartitionOptions.build(**options))

    @property
    def transfer_rate_bytes_per_s(self) -> float | None:
        return self.options.transfer_rate_bytes_per_s

    def device_list(self) -> list[Device]:
        return devices_from_key(self.devices)

    def node_latency_map(self) -> dict[str, tuple[float, float]] | None:
        return self.options.node_latency_dict

    def with_mode(self, mode: str) -> "PlanConfig":
        return replace(self, mode=mode)
