"""An Accelerate ``device_map`` (the JSON of ``from_pretrained(device_map=...)`` or
``dispatch_model``) reviewed with its model: each device's bytes against its memory, the forward's
latency as the map runs it (one device after another, as Accelerate's hooks move the activations),
and the accelerator partitioner's plan on the same devices as the change, exported as a device map
Accelerate can run (:func:`partitioner.interop.device_map.to_device_map`)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from partitioner.accelerator.api import evaluate_plan, partition
from partitioner.devices import Device
from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.interop.device_map import from_device_map, to_device_map
from partitioner.plan import Plan
from partitioner.review.deepspeed import TOP_LEVEL
from partitioner.review.job import JobError

__all__ = [
    "MapReview",
    "read_device_map",
    "is_device_map",
    "review_device_map",
    "CHANGE_MODE",
    "MIN_GAIN",
    "PLAN_SHARES",
]

CHANGE_MODE = "cost_aware"  # the partitioner's mode that weighs latency (torch.fx's size_based only fills)
# NOTE: [A plan Accelerate can run]
# A device map keeps tied weights and the modules one op reads together on one device, so the map
# of a plan that fills a device to the brim can overfill it. The plan is made again on devices of
# a smaller share of their memory until its map fits the real ones.
PLAN_SHARES = (1.0, 0.85, 0.7, 0.55, 0.4)
MIN_GAIN = 0.02  # a plan this much faster is a change worth making; less is within the cost model's noise


def is_device_map(data: Any) -> bool:
    """Whether parsed JSON is a device map: ``{"device_map": {...}}`` (this project's export) or a
    flat object of module paths to a device id, "cpu" or "disk" (none of them a DeepSpeed setting)."""
    if isinstance(data, dict) and isinstance(data.get("device_map"), dict):
        return True
    if isinstance(data, dict) and set(data) & set(TOP_LEVEL):  # a DeepSpeed config of whole numbers
        return False
    return (
        isinstance(data, dict)
        and bool(data)
        and all(
            (isinstance(v, int) and not isinstance(v, bool))
            or v in ("cpu", "disk")
            or (isinstance(v, str) and v.startswith("cuda:"))
            for v in data.values()
        )
    )


def read_device_map(text: str, where: str = "device_map.json") -> dict[str, Any]:
    """The map of a device-map JSON: module path -> device id ("cuda:1" read as 1; "cpu" and
    "disk" kept, for the message that names them)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JobError(f"{where} is not JSON: {exc.msg} at line {exc.lineno}; fix it there") from None
    if not is_device_map(data):
        raise JobError(
            f'{where}: a device map is an object of module paths to device ids, e.g. {{"model.layers.0": 0}}'
        )
    found = data["device_map"] if isinstance(data.get("device_map"), dict) else data
    out: dict[str, Any] = {}
    for key, value in found.items():
        if isinstance(value, str) and value.startswith("cuda:"):
            if not value[5:].isdigit():
                raise JobError(f'{where}: {key!r} maps to {value!r}; write a device id such as 0 or "cuda:0"')
            value = int(value[5:])
        if isinstance(value, int) and value < 0:
            raise JobError(f"{where}: {key!r} maps to device {value}; device ids start at 0")
        out[str(key)] = value
    return out


@dataclass(frozen=True)
class MapReview:
    plan: Plan  # the map as a plan on the devices
    # the partitioner's plan on the same devices as the device map Accelerate runs (priced as such),
    # when it fits and is faster or the job's map does not fit
    better: Plan | None
    better_map: dict[str, int] | None  # that plan as a device map Accelerate can run

    @property
    def fits(self) -> bool:
        return not self.plan.over_capacity()

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "latency_s": self.plan.latency_s,
            "device_memory_bytes": self.plan.device_memory_bytes(),
            "over_capacity": list(self.plan.over_capacity()),
            "better": None
            if self.better is None
            else {"mode": self.better.mode, "latency_s": self.better.latency_s, "device_map": self.better_map},
        }


def review_device_map(graph: Graph, device_map: Mapping[str, Any], devices: Sequence[Device]) -> MapReview:
    """The map on ``devices`` (logical ids 0..n-1, as the map names them), and the default mode's
    plan on the same devices when it is faster or the map overfills a device."""
    used = {int(v) for v in device_map.values() if isinstance(v, int)}
    if used and max(used) >= len(devices):
        raise JobError(
            f"the device map uses device {max(used)} and {len(devices)} device(s) are given; give --devices {max(used) + 1}"
        )
    try:
        node_to_partition, partition_to_devices = from_device_map(graph, device_map)
    except PartitionError as exc:
        raise JobError(str(exc)) from None
    plan = evaluate_plan(graph, devices, node_to_partition, partition_to_devices, mode="accelerate", keep_ids=True)
    for share in PLAN_SHARES:  # NOTE: [A plan Accelerate can run]
        smaller = [dataclasses.replace(d, memory_bytes=int(d.memory_bytes * share)) for d in devices]
        try:
            other = partition(graph, smaller, mode=CHANGE_MODE)
        except PartitionError:
            break
        offered = to_device_map(other, graph).device_map
        n2p, p2d = from_device_map(graph, offered)
        runs = evaluate_plan(graph, devices, n2p, p2d, mode=f"{CHANGE_MODE} as a device map", keep_ids=True)
        if not runs.over_capacity():
            if plan.over_capacity() or runs.latency_s < (1 - MIN_GAIN) * plan.latency_s:
                return MapReview(plan, runs, offered)
            break
    return MapReview(plan, None, None)
