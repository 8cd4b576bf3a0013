"""Plans and Hugging Face Accelerate ``device_map``s (module path -> device), both ways.

:func:`to_device_map` turns a plan into the ``device_map`` that ``from_pretrained(device_map=...)``
and ``accelerate.dispatch_model`` take, at the coarsest modules whose nodes and parameters all sit
on one device, kept runnable by Accelerate (see NOTE: [Device maps Accelerate can run]). :func:`from_device_map`
reads a device map back as a node-to-partition mapping, and :func:`accelerate_plan` scores the map
Accelerate's ``infer_auto_device_map`` (what ``device_map="auto"`` runs) gives for the same
devices, so the two can be compared on one cost model. Accelerate is imported only there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from partitioner.devices import Device
from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.interop._map_rules import (
    WHY,
    MovedGroup,
    Placement,
    assign,
    collapse_map,
    constraint_groups,
    join_mixing,
    nearest,
    parents,
)
from partitioner.plan.records import Plan
from partitioner.units import format_seconds

if TYPE_CHECKING:  # pragma: no cover
    from partitioner.accelerator.compare import ModeResult

__all__ = ["DeviceMap", "MovedGroup", "to_device_map", "from_device_map", "accelerate_plan", "accelerate_result"]


@dataclass(frozen=True)
class DeviceMap:
    device_map: dict[str, int]  # module path (or parameter name) -> logical device id
    split_modules: tuple[str, ...]  # modules the map places otherwise than the plan (moved or split)
    reasons: tuple[str, ...] = ()  # per split module: which partitions and devices, and why
    moved: tuple[MovedGroup, ...] = ()  # blocks and tied modules moved whole, with their bytes

    notes: tuple[str, ...] = ()  # where the map differs from the plan and why, one line each

    @property
    def moved_bytes(self) -> int:
        return sum(g.moved_bytes for g in self.moved)


def to_device_map(plan: Plan, graph: Graph) -> DeviceMap:
    """The plan as an Accelerate device map Accelerate can run: keys are the model's own module
    paths (or a parameter of a module whose children go to several devices), at the coarsest
    modules on one device; a ``_no_split_modules`` block, a group of tied weights and the modules an
    op outside them combines each go whole to the device holding most of their weight bytes (the
    map is never refused: ``moved`` names each such group, its devices and the weight bytes moved;
    see NOTE: [Device maps Accelerate can run]). ``split_modules`` lists the modules whose nodes
    the map places otherwise than the plan, each with its reason. O(N * depth * R) for R rounds of joining (a few)."""
    place = Placement(plan, graph)
    groups = constraint_groups(place, graph)
    for _ in range(len(place.modules) + 1):  # each round joins two groups at least, or stops
        op_device, weight_device, moved = assign(place, groups)
        device_map = collapse_map(place, op_device, weight_device)
        if not join_mixing(place, device_map, groups):
            break
    kept = {m: g for g in moved for m in g.modules}
    planned: dict[str, set[int]] = {}
    partitions: dict[str, set[int]] = {}
    differs: set[str] = set()  # map entries with an op the plan put on another device
    for v, path in place.op_path.items():
        for q in parents(path):
            planned.setdefault(q, set()).add(place.plan_device[v])
            partitions.setdefault(q, set()).add(place.partition_of[v])
            if q in device_map and device_map[q] != place.plan_device[v]:
                differs.add(q)
    split = sorted({nearest(q, kept) or q for q in differs})
    reasons = tuple(
        f"{name or 'the model'}: its nodes run in partitions {', '.join(map(str, sorted(partitions[name])))} "
        f"on devices {', '.join(map(str, sorted(planned[name])))}, and "
        + (
            f"the map keeps it whole on device {kept[name].device} ({'; '.join(WHY[k] for k in kept[name].kinds)})"
            if name in kept
            else f"a device map puts a module on one device (mapped to {device_map[name]}; "
            "the others read it from there)"
        )
        for name in split
    )
    notes = tuple(g.message for g in moved) + tuple(r for n, r in zip(split, reasons) if n not in kept)
    return DeviceMap(dict(sorted(device_map.items())), tuple(split), reasons, tuple(moved), notes)


def _owners(graph: Graph) -> dict[int, list[str]]:
    """Op node -> the names it stands for: its module path, and the parameters it reads."""
    out: dict[int, list[str]] = {
        v: [graph.nodes[v].module_path] if graph.nodes[v].module_path else [] for v in graph.op_indices
    }
    for u, node in enumerate(graph.nodes):
        if node.op == "get_attr":
            for v in graph.users[u]:
                if v in out:
                    out[v].append(node.target)
                    break  # a parameter goes with its first reader
    for v in graph.op_indices:  # a call_module node owns its module's parameters
        if graph.nodes[v].op == "call_module":
            out[v].append(graph.nodes[v].target)
    return out


def from_device_map(graph: Graph, device_map: Mapping[str, Any]) -> tuple[dict[str, int], dict[int, list[int]]]:
    """A device map as (node -> partition, partition -> devices): each op on the device of the
    longest entry naming its module or a parameter it reads (ops outside every module follow the
    op before them); each run of consecutive ops on one device is a partition, so the partitions
    form a DAG whatever the map (Accelerate may put a shared module, such as a rotary embedding,
    on a later device than its first reader). Raises naming an entry
    Accelerate offloaded to "cpu" or "disk", which plans do not model."""
    offloaded = sorted(k for k, d in device_map.items() if not isinstance(d, int))
    if offloaded:
        raise PartitionError(
            f"the device map offloads {len(offloaded)} module(s) to cpu or disk (e.g. {offloaded[0]!r}); "
            "give the devices more memory (max_memory) so every module sits on an accelerator"
        )

    def lookup(name: str) -> int | None:
        parts = name.split(".") if name else []
        for i in range(len(parts), -1, -1):
            key = ".".join(parts[:i])
            if key in device_map:
                return int(device_map[key])
        return None

    owners = _owners(graph)
    node_to_partition: dict[str, int] = {}
    partition_to_devices: dict[int, list[int]] = {}
    last: int | None = None
    for v in graph.op_indices:  # a new partition wherever the device changes: runs of a
        found = [d for d in (lookup(n) for n in owners[v]) if d is not None]  # topological order
        d = found[0] if found else last if last is not None else int(min(device_map.values(), default=0))
        if d != last:
            partition_to_devices[len(partition_to_devices)] = [d]
        last = d
        node_to_partition[graph.nodes[v].name] = len(partition_to_devices) - 1
    return node_to_partition, partition_to_devices


def accelerate_plan(model: Any, graph: Graph, devices: Sequence[Device], **options: Any) -> Plan:
    """The plan Accelerate's ``infer_auto_device_map`` makes for ``model`` with each device's
    memory as ``max_memory`` (keeping the model's no-split modules whole), scored by our cost model
    (``options``: :func:`partitioner.evaluate_plan`'s). Needs ``accelerate``."""
    from partitioner import optional

    try:  # once, under the optional libraries' lock (NOTE: [Optional imports and threads])
        infer_auto_device_map = optional.load("accelerate", ("infer_auto_device_map",)).infer_auto_device_map
    except ImportError:
        raise PartitionError(
            "comparing with Accelerate needs the accelerate package; pip install 'partition-explorer[hf]'"
        ) from None
    from partitioner.accelerator.api import evaluate_plan

    ids = [d.logical_id for d in devices]
    quiet = logging.getLogger("accelerate.utils.modeling")  # "device N is not available": we plan
    level = quiet.level  # for devices this machine lacks
    quiet.setLevel(logging.ERROR)
    try:
        device_map = infer_auto_device_map(
            model,
            max_memory={i: d.memory_bytes for i, d in zip(ids, devices)},
            no_split_module_classes=list(getattr(model, "_no_split_modules", None) or []),
        )
    finally:
        quiet.setLevel(level)
    node_to_partition, partition_to_devices = from_device_map(graph, device_map)
    return evaluate_plan(
        graph, devices, node_to_partition, partition_to_devices, mode="accelerate", keep_ids=True, **options
    )


def accelerate_result(model: Any, graph: Graph, devices: Sequence[Device], **options: Any) -> "ModeResult":
    """:func:`accelerate_plan` as a row beside the modes' (:func:`partitioner.accelerator.compare.compare_modes`):
    named ``accelerate``; a map that overfills a device by our count (it weighs parameters only)
    keeps its row with the reason and its latency in the message."""
    from partitioner.accelerator.compare import ModeResult

    began = time.perf_counter()
    try:
        plan = accelerate_plan(model, graph, devices, **options)
    except PartitionError as exc:
        return ModeResult("accelerate", None, None, None, time.perf_counter() - began, str(exc), None)
    seconds = time.perf_counter() - began
    problems = plan.violations(graph)
    if problems:
        return ModeResult(
            "accelerate",
            None,
            None,
            None,
            seconds,
            f"its device map does not fit by our count (latency {format_seconds(plan.latency_s)}): "
            f"{problems[0].message}",
            None,
        )
    return ModeResult(
        "accelerate", plan.latency_s, len(plan.partitions), plan.memory_utilisation(), seconds, None, plan
    )
