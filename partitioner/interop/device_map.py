"""Plans and Hugging Face Accelerate ``device_map``s (module path -> device), both ways.

:func:`to_device_map` turns a plan into the ``device_map`` that ``from_pretrained(device_map=...)``
and ``accelerate.dispatch_model`` take, at the coarsest modules whose nodes and parameters all sit
on one device; a module split between devices cannot be expressed and is listed. :func:`from_device_map`
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
from partitioner.plan.records import Plan
from partitioner.units import format_seconds

if TYPE_CHECKING:  # pragma: no cover
    from partitioner.accelerator.compare import ModeResult

__all__ = ["DeviceMap", "to_device_map", "from_device_map", "accelerate_plan", "accelerate_result"]


@dataclass(frozen=True)
class DeviceMap:
    device_map: dict[str, int]  # module path (or parameter name) -> logical device id
    split_modules: tuple[str, ...]  # modules whose nodes the plan puts on several devices
    reasons: tuple[str, ...] = ()  # per split module: which partitions and devices, and why


def _owners(graph: Graph) -> dict[int, list[str]]:
    """Op node -> the names it stands for: its module path, and the parameters it reads."""
    out: dict[int, list[str]] = {v: [graph.nodes[v].module_path] if graph.nodes[v].module_path else []
                                 for v in graph.op_indices}
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


def to_device_map(plan: Plan, graph: Graph) -> DeviceMap:
    """The plan as an Accelerate device map: every module or parameter name the graph reads,
    merged up to the coarsest module on one device. O(N * depth)."""
    where = plan.node_to_partition()
    device_of = {p.id: p.device_ids[0] for p in plan.partitions}
    devices: dict[str, set[int]] = {}  # every prefix of every name -> devices under it
    partitions: dict[str, set[int]] = {}
    children: dict[str, set[str]] = {}
    for v, names in _owners(graph).items():
        pid = where[graph.nodes[v].name]
        d = device_of[pid]
        for name in names:
            parts = name.split(".")
            for i in range(len(parts) + 1):
                prefix = ".".join(parts[:i])
                devices.setdefault(prefix, set()).add(d)
                partitions.setdefault(prefix, set()).add(pid)
                if i < len(parts):
                    children.setdefault(prefix, set()).add(".".join(parts[:i + 1]))
    device_map: dict[str, int] = {}
    split: list[str] = []

    def visit(prefix: str) -> None:
        on = devices.get(prefix, set())
        if len(on) == 1 or not children.get(prefix):
            if len(on) > 1:
                split.append(prefix)
            device_map[prefix] = min(on)
            return
        for child in sorted(children[prefix]):
            visit(child)

    visit("")
    reasons = tuple(
        f"{name or 'the model'}: its nodes run in partitions {', '.join(map(str, sorted(partitions[name])))} "
        f"on devices {', '.join(map(str, sorted(devices[name])))}, and a device map puts a module on one "
        f"device (mapped to {device_map[name]}; the others read it from there)"
        for name in sorted(split))
    return DeviceMap(device_map, tuple(sorted(split)), reasons)


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
    try:
        from accelerate import infer_auto_device_map
    except ImportError:
        raise PartitionError("comparing with Accelerate needs the accelerate package; "
                             "pip install 'partition-explorer[hf]'") from None
    from partitioner.accelerator.api import evaluate_plan

    ids = [d.logical_id for d in devices]
    quiet = logging.getLogger("accelerate.utils.modeling")  # "device N is not available": we plan
    level = quiet.level                                       # for devices this machine lacks
    quiet.setLevel(logging.ERROR)
    try:
        device_map = infer_auto_device_map(
            model, max_memory={i: d.memory_bytes for i, d in zip(ids, devices)},
            no_split_module_classes=list(getattr(model, "_no_split_modules", None) or []))
    finally:
        quiet.setLevel(level)
    node_to_partition, partition_to_devices = from_device_map(graph, device_map)
    return evaluate_plan(graph, devices, node_to_partition, partition_to_devices, mode="accelerate",
                         keep_ids=True, **options)


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
        return ModeResult("accelerate", None, None, None, seconds,
                          f"its device map does not fit by our count (latency {format_seconds(plan.latency_s)}): "
                          f"{problems[0].message}", None)
    return ModeResult("accelerate", plan.latency_s, len(plan.partitions), plan.memory_utilisation(), seconds, None, plan)
