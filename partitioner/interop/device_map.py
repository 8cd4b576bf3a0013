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
from typing import TYPE_CHECKING, Any, Container, Mapping, Sequence

from partitioner.devices import Device
from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.plan.records import Plan
from partitioner.units import format_seconds

if TYPE_CHECKING:  # pragma: no cover
    from partitioner.accelerator.compare import ModeResult

__all__ = ["DeviceMap", "MovedGroup", "to_device_map", "from_device_map", "accelerate_plan", "accelerate_result"]


@dataclass(frozen=True)
class MovedGroup:
    """Modules Accelerate must keep on one device that the plan had put on several: the map moves
    them whole to ``device`` (the one holding most of their weight bytes)."""

    kinds: tuple[str, ...]  # why they go together: "no_split" (a _no_split_modules block), "tied"
    #                         (tied weights), "shared_input" (an op outside them reads all of them)
    modules: tuple[str, ...]  # the module paths kept together, sorted
    device: int  # where the device map puts them
    from_devices: tuple[int, ...]  # the other devices the plan had put parts of them on
    moved_bytes: int  # weight bytes the plan had on those other devices
    message: str


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


# NOTE: [Device maps Accelerate can run]
# Accelerate (``dispatch_model``) hooks each module the map names: the hook moves the module's
# inputs to its device, and its outputs stay there. An op in a parent's own forward (a residual
# add in a ``GPT2Block``, GPT-2's ``wte(ids) + wpe(pos)``) runs wherever its inputs are, so two
# inputs from modules on different devices fail. Hence three rules, each making modules go
# together on one device: a block of the model's ``_no_split_modules`` is never split (its
# forward mixes its children's outputs), tied parameters sit on one device (one tensor), and the
# modules whose outputs an op outside every mapped module combines share a device (found by
# following the graph's values through the map; repeated until none mixes). A group goes whole
# to the device holding most of its weight bytes (then most ops; then the lowest id), and the
# map says so (``DeviceMap.moved``): the map is never refused, and it differs from the plan only
# there. Keys are the model's own module paths (``graph.model_info.module_classes``; the names
# torch.export invents, such as ``submod_1`` or ``_guards_fn``, are not modules of the model).


_WHY = {
    "no_split": "a block Accelerate never splits (_no_split_modules)",
    "tied": "tied weights",
    "shared_input": "an op outside them reads their outputs together",
}


class _Groups:
    """Union-find over module paths, each group with the reasons it was formed."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.kinds: dict[str, set[str]] = {}

    def find(self, a: str) -> str:
        while self.parent.setdefault(a, a) != a:
            a = self.parent[a]
        return a

    def union(self, a: str, b: str, kind: str) -> bool:
        ra, rb = self.find(a), self.find(b)
        self.kinds.setdefault(ra, set()).add(kind)
        if ra == rb:
            return False
        ra, rb = sorted((ra, rb))
        self.parent[rb] = ra
        self.kinds.setdefault(ra, set()).update(self.kinds.pop(rb, set()) | {kind})
        return True

    def members(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for a in sorted(self.parent):
            out.setdefault(self.find(a), []).append(a)
        return {root: ms for root, ms in out.items() if len(ms) > 1 or self.kinds.get(root)}


def _nearest(path: str, table: Container[str]) -> str | None:
    """The longest of ``path`` and its prefixes in ``table``."""
    return next((q for q in _parents(path) if q in table), None)


def _parents(path: str) -> list[str]:
    """``"a.b.c"`` -> ``["a.b.c", "a.b", "a", ""]``."""
    parts = path.split(".") if path else []
    return [".".join(parts[:i]) for i in range(len(parts), -1, -1)]


class _Placement:
    """Each op and weight of the graph with its module (the nearest real one) and device."""

    def __init__(self, plan: Plan, graph: Graph) -> None:
        self.graph = graph
        classes = graph.model_info.module_classes
        where = plan.node_to_partition()
        device_of = {p.id: p.device_ids[0] for p in plan.partitions}
        self.partition_of = {v: where[graph.nodes[v].name] for v in graph.op_indices}
        self.plan_device = {v: device_of[self.partition_of[v]] for v in graph.op_indices}
        if classes:
            self.modules = set(classes)
        else:  # a graph without the model's own record: every prefix of every name is a module
            names = [graph.nodes[v].module_path for v in graph.op_indices]
            names += [graph.nodes[v].target for v in graph.op_indices if graph.nodes[v].op == "call_module"]
            self.modules = {q for n in names for q in _parents(n)}
        self.modules.add("")
        self.op_path = {v: self.real(graph.nodes[v].module_path) for v in graph.op_indices}
        # Weights: (name, owner module, bytes, first reading op); a call_module owns its module's.
        self.weights: list[tuple[str, str, int, int]] = []
        for u, node in enumerate(graph.nodes):
            readers = [v for v in graph.users[u] if v in self.plan_device]
            if node.op == "get_attr" and readers:
                owner = self.real(node.module_path or node.target.rpartition(".")[0])
                name = node.target if node.target.rpartition(".")[0] == owner else owner
                self.weights.append((name, owner, node.output_bytes, readers[0]))
            elif node.op == "call_module" and node.target in self.modules:
                self.weights.append((node.target, node.target, node.param_bytes, u))

    def real(self, path: str) -> str:
        return _nearest(path, self.modules) or ""


def _constraint_groups(place: _Placement, graph: Graph) -> _Groups:
    groups = _Groups()
    no_split = set(graph.model_info.no_split_modules)
    if no_split:
        for path in sorted(place.modules, key=len):  # outermost first: an inner block joins it
            if no_split & set(graph.model_info.module_classes.get(path, ())):
                outer = [q for q in _parents(path)[1:] if q in groups.parent]
                groups.union(outer[0] if outer else path, path, "no_split")
    for names in graph.tied_parameters:
        owners = [place.real(n.rpartition(".")[0]) for n in names]
        for other in owners[1:]:
            groups.union(owners[0], other, "tied")
    return groups


def _assign(place: _Placement, groups: _Groups) -> tuple[dict[int, int], dict[str, int], list[MovedGroup]]:
    """Final op and weight devices with every group whole on one device."""
    members = groups.members()
    group_of = {m: root for root, ms in members.items() for m in ms}

    def group(path: str) -> str | None:
        q = _nearest(path, group_of)
        return None if q is None else group_of[q]

    bytes_on: dict[str, dict[int, int]] = {}
    ops_on: dict[str, dict[int, int]] = {}
    for name, owner, size, reader in place.weights:
        if (g := group(owner)) is not None:
            bytes_on.setdefault(g, {})[place.plan_device[reader]] = (
                bytes_on.get(g, {}).get(place.plan_device[reader], 0) + size
            )
    for v, path in place.op_path.items():
        if (g := group(path)) is not None:
            ops_on.setdefault(g, {})[place.plan_device[v]] = ops_on.get(g, {}).get(place.plan_device[v], 0) + 1
    chosen: dict[str, int] = {}
    moved: list[MovedGroup] = []
    for g in members:
        on = set(bytes_on.get(g, {})) | set(ops_on.get(g, {}))
        if not on:
            continue
        best = min(on, key=lambda d: (-bytes_on.get(g, {}).get(d, 0), -ops_on.get(g, {}).get(d, 0), d))
        chosen[g] = best
        others = tuple(sorted(on - {best}))
        if others:
            size = sum(b for d, b in bytes_on.get(g, {}).items() if d != best)
            mods = tuple(sorted(members[g]))
            kinds = tuple(sorted(groups.kinds.get(g, ())))
            moved.append(
                MovedGroup(
                    kinds,
                    mods,
                    best,
                    others,
                    size,
                    f"{', '.join(mods[:4])}{' ...' if len(mods) > 4 else ''} ({'; '.join(_WHY[k] for k in kinds)}): "
                    f"the plan put parts on devices {', '.join(map(str, sorted(on)))}; the map puts "
                    f"all on device {best}, moving {size:,} weight bytes from device(s) "
                    f"{', '.join(map(str, others))}",
                )
            )
    op_device = {v: chosen.get(group(place.op_path[v]) or "\0", place.plan_device[v]) for v in place.op_path}
    weight_device = {
        name: chosen.get(group(owner) or "\0", place.plan_device[reader]) for name, owner, _, reader in place.weights
    }
    return op_device, weight_device, moved


def _collapse(place: _Placement, op_device: dict[int, int], weight_device: dict[str, int]) -> dict[str, int]:
    """The coarsest map keys on one device: every module of the model covered once."""
    devices: dict[str, set[int]] = {}
    weight_of: dict[str, dict[int, int]] = {}
    direct: dict[str, list[str]] = {}  # module -> weights named by parameter (owned directly)
    for v, path in place.op_path.items():
        for q in _parents(path):
            devices.setdefault(q, set()).add(op_device[v])
    for name, owner, size, _ in place.weights:
        d = weight_device[name]
        for q in _parents(owner):
            devices.setdefault(q, set()).add(d)
            weight_of.setdefault(q, {})[d] = weight_of.setdefault(q, {}).get(d, 0) + size
        if name != owner:
            direct.setdefault(owner, []).append(name)
    children: dict[str, list[str]] = {}
    for m in sorted(place.modules - {""}):
        children.setdefault(m.rpartition(".")[0], []).append(m)
    device_map: dict[str, int] = {}

    def visit(prefix: str, fallback: int) -> None:
        on = devices.get(prefix, set())
        if len(on) > 1 and (children.get(prefix) or direct.get(prefix)):
            for child in children.get(prefix, []):
                visit(child, min(devices.get(child, on)))
            for name in direct.get(prefix, []):
                device_map[name] = weight_device[name]
            return
        bytes_on = weight_of.get(prefix, {})
        device_map[prefix] = min(on, key=lambda d: (-bytes_on.get(d, 0), d)) if on else fallback

    visit("", min(op_device.values(), default=0))
    return device_map


def _mixing(place: _Placement, device_map: dict[str, int], groups: _Groups) -> bool:
    """Join the modules whose outputs one op outside every mapped module combines (see NOTE);
    whether any were joined."""
    graph = place.graph
    value: dict[int, tuple[int, str] | None] = {}  # node -> (device, the mapped module it came from)
    joined = False
    for v, node in enumerate(graph.nodes):
        if node.op == "get_attr":
            k = _nearest(node.target, device_map) or _nearest(node.module_path, device_map)
            value[v] = None if k is None else (device_map[k], k)
        elif v in place.op_path:
            k = _nearest(place.op_path[v], device_map)
            if k is not None:  # runs in a mapped module: its hook moved the inputs there
                value[v] = (device_map[k], k)
                continue
            ins = [x for u in graph.preds[v] if (x := value.get(u)) is not None]
            seen = {d for d, _ in ins}
            if len(seen) > 1:
                sources = sorted({m for _, m in ins})
                for other in sources[1:]:
                    joined |= groups.union(sources[0], other, "shared_input")
            value[v] = ins[0] if ins else None
    return joined


def to_device_map(plan: Plan, graph: Graph) -> DeviceMap:
    """The plan as an Accelerate device map Accelerate can run: keys are the model's own module
    paths (or a parameter of a module whose children go to several devices), at the coarsest
    modules on one device; a ``_no_split_modules`` block, a group of tied weights and the modules an
    op outside them combines each go whole to the device holding most of their weight bytes (the
    map is never refused: ``moved`` names each such group, its devices and the weight bytes moved;
    see NOTE: [Device maps Accelerate can run]). ``split_modules`` lists the modules whose nodes
    the map places otherwise than the plan, each with its reason. O(N * depth * R) for R rounds of joining (a few)."""
    place = _Placement(plan, graph)
    groups = _constraint_groups(place, graph)
    for _ in range(len(place.modules) + 1):  # each round joins two groups at least, or stops
        op_device, weight_device, moved = _assign(place, groups)
        device_map = _collapse(place, op_device, weight_device)
        if not _mixing(place, device_map, groups):
            break
    kept = {m: g for g in moved for m in g.modules}
    planned: dict[str, set[int]] = {}
    partitions: dict[str, set[int]] = {}
    differs: set[str] = set()  # map entries with an op the plan put on another device
    for v, path in place.op_path.items():
        for q in _parents(path):
            planned.setdefault(q, set()).add(place.plan_device[v])
            partitions.setdefault(q, set()).add(place.partition_of[v])
            if q in device_map and device_map[q] != place.plan_device[v]:
                differs.add(q)
    split = sorted({_nearest(q, kept) or q for q in differs})
    reasons = tuple(
        f"{name or 'the model'}: its nodes run in partitions {', '.join(map(str, sorted(partitions[name])))} "
        f"on devices {', '.join(map(str, sorted(planned[name])))}, and "
        + (
            f"the map keeps it whole on device {kept[name].device} ({'; '.join(_WHY[k] for k in kept[name].kinds)})"
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
