"""The rules that keep a device map runnable by Accelerate (NOTE: [Device maps Accelerate can
run]): which modules must share a device, where each group goes, and the coarsest map keys;
:func:`partitioner.interop.device_map.to_device_map` applies them to a plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Container

from partitioner.graph import Graph
from partitioner.plan.records import Plan

__all__ = [
    "WHY",
    "MovedGroup",
    "Groups",
    "Placement",
    "nearest",
    "parents",
    "constraint_groups",
    "assign",
    "collapse_map",
    "join_mixing",
]


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


WHY = {
    "no_split": "a block Accelerate never splits (_no_split_modules)",
    "tied": "tied weights",
    "shared_input": "an op outside them reads their outputs together",
}


class Groups:
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


def nearest(path: str, table: Container[str]) -> str | None:
    """The longest of ``path`` and its prefixes in ``table``."""
    return next((q for q in parents(path) if q in table), None)


def parents(path: str) -> list[str]:
    """``"a.b.c"`` -> ``["a.b.c", "a.b", "a", ""]``."""
    parts = path.split(".") if path else []
    return [".".join(parts[:i]) for i in range(len(parts), -1, -1)]


class Placement:
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
            self.modules = {q for n in names for q in parents(n)}
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
        return nearest(path, self.modules) or ""


def constraint_groups(place: Placement, graph: Graph) -> Groups:
    groups = Groups()
    no_split = set(graph.model_info.no_split_modules)
    if no_split:
        for path in sorted(place.modules, key=len):  # outermost first: an inner block joins it
            if no_split & set(graph.model_info.module_classes.get(path, ())):
                outer = [q for q in parents(path)[1:] if q in groups.parent]
                groups.union(outer[0] if outer else path, path, "no_split")
    for names in graph.tied_parameters:
        owners = [place.real(n.rpartition(".")[0]) for n in names]
        for other in owners[1:]:
            groups.union(owners[0], other, "tied")
    return groups


def assign(place: Placement, groups: Groups) -> tuple[dict[int, int], dict[str, int], list[MovedGroup]]:
    """Final op and weight devices with every group whole on one device."""
    members = groups.members()
    group_of = {m: root for root, ms in members.items() for m in ms}

    def group(path: str) -> str | None:
        q = nearest(path, group_of)
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
                    f"{', '.join(mods[:4])}{' ...' if len(mods) > 4 else ''} ({'; '.join(WHY[k] for k in kinds)}): "
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


def collapse_map(place: Placement, op_device: dict[int, int], weight_device: dict[str, int]) -> dict[str, int]:
    """The coarsest map keys on one device: every module of the model covered once."""
    devices: dict[str, set[int]] = {}
    weight_of: dict[str, dict[int, int]] = {}
    direct: dict[str, list[str]] = {}  # module -> weights named by parameter (owned directly)
    for v, path in place.op_path.items():
        for q in parents(path):
            devices.setdefault(q, set()).add(op_device[v])
    for name, owner, size, _ in place.weights:
        d = weight_device[name]
        for q in parents(owner):
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


def join_mixing(place: Placement, device_map: dict[str, int], groups: Groups) -> bool:
    """Join the modules whose outputs one op outside every mapped module combines (see NOTE);
    whether any were joined."""
    graph = place.graph
    value: dict[int, tuple[int, str] | None] = {}  # node -> (device, the mapped module it came from)
    joined = False
    for v, node in enumerate(graph.nodes):
        if node.op == "get_attr":
            k = nearest(node.target, device_map) or nearest(node.module_path, device_map)
            value[v] = None if k is None else (device_map[k], k)
        elif v in place.op_path:
            k = nearest(place.op_path[v], device_map)
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
