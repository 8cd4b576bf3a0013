"""Plans: the immutable result of partitioning, its cost model, validation and JSON round trip.

The cost model is the reference's (``torch.fx.experimental.partitioner_utils``): a node costs
max(memory latency, compute latency); a partition costs the critical path through its nodes; the
plan costs the critical path over the partition DAG, where an edge between partitions on
different devices adds bytes crossing / transfer rate. # NOTE: [One pass, not every path]
The reference walks every path with a DFS, which revisits shared sub-paths and grows
exponentially with branching; here both critical paths are one pass over a topological order,
O(N + E) for the whole plan.

Memory of a partition is every node's output and parameters plus the outputs of outside nodes it
reads, each counted once; a device holds the union of the partitions placed on it (a tensor two
of them read is stored there once, as in the reference's device mapping).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .devices import Device, format_bytes
from .errors import InvalidPlanError, PartitionError
from .graph import Graph

__all__ = [
    "SCHEMA_VERSION",
    "Partition",
    "Edge",
    "Plan",
    "CostModel",
    "Evaluation",
    "build_plan",
    "PlanFormatError",
]

SCHEMA_VERSION = 1


class PlanFormatError(PartitionError):
    """A plan file is not valid plan JSON (syntax, schema version, or a missing field)."""


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


@dataclass(frozen=True)
class Edge:
    """Data flowing from partition ``src`` to partition ``dst``."""

    src: int
    dst: int
    bytes: int  # outputs of ``src`` nodes read in ``dst``, each node counted once
    latency_s: float  # bytes / transfer rate, or 0 when both sit on the same devices


# --------------------------------------------------------------------------------------------
# Cost model


@dataclass
class Evaluation:
    """Everything the cost model derives from one assignment (mutable scratch, not a result)."""

    members: list[list[int]]  # node indices per partition, topological order
    memory_bytes: list[int]
    latency: list[tuple[float, float, float]]  # (overall, mem, compute) per partition
    edges: dict[tuple[int, int], int]  # (src, dst) -> bytes
    order: list[int] | None  # topological order of partitions; None if cyclic
    finish_s: list[float]
    latency_s: float
    critical_path: list[int]
    bfs_level: list[int]


class CostModel:
    """The reference cost model over a :class:`Graph`, evaluated in O(N + E) per assignment."""

    def __init__(
        self,
        graph: Graph,
        latencies: Sequence[tuple[float, float]],
        transfer_rate_bytes_per_s: float | None,
    ) -> None:
        self.graph = graph
        self.n = len(graph)
        self.mem_s = [float(m) for m, _ in latencies]
        self.compute_s = [float(c) for _, c in latencies]
        self.node_s = [max(m, c) for m, c in zip(self.mem_s, self.compute_s)]
        self.rate = transfer_rate_bytes_per_s
        self.out = graph.output_bytes
        self.total = graph.total_bytes
        self.preds = graph.preds
        is_op = [nd.is_op for nd in graph.nodes]
        self.is_op = is_op
        self.op_preds = tuple(tuple(j for j in ps if is_op[j]) for ps in graph.preds)
        self.op_users = tuple(tuple(j for j in us if is_op[j]) for us in graph.users)

    def comm_s(self, nbytes: int, src_devices: Sequence[int], dst_devices: Sequence[int]) -> float:
        """Transfer time of an edge: free when every device of the destination already holds a
        copy of the source (the reference frees only identical device lists, which charges a
        replicated partition for feeding a partition on one of its own devices)."""
        if src_devices and set(dst_devices) <= set(src_devices):
            return 0.0
        if not self.rate or math.isinf(self.rate):
            return 0.0
        return nbytes / self.rate

    def memory_of(self, members: Sequence[int]) -> int:
        inside = set(members)
        outside: set[int] = set()
        total = 0
        for v in members:
            total += self.total[v]
            for u in self.preds[v]:
                if u not in inside:
                    outside.add(u)
        return total + sum(self.out[u] for u in outside)

    def device_memory(
        self, members: Sequence[Sequence[int]], devices_of: Sequence[Sequence[int]]
    ) -> dict[int, int]:
        """Memory each device holds: the union of its partitions' nodes, so a tensor read by
        two partitions on one device is stored once there (as the reference counts it)."""
        on_device: dict[int, list[int]] = {}
        for nodes, devs in zip(members, devices_of):
            for d in devs:
                on_device.setdefault(d, []).extend(nodes)
        return {d: self.memory_of(nodes) for d, nodes in sorted(on_device.items())}

    def evaluate(self, part: Sequence[int], devices_of: Sequence[Sequence[int]]) -> Evaluation:
        """Evaluate ``part`` (node index -> partition id, -1 for non-op nodes)."""
        num = len(devices_of)
        members: list[list[int]] = [[] for _ in range(num)]
        for v in range(self.n):
            p = part[v]
            if p >= 0:
                members[p].append(v)
        memory = [self.memory_of(m) for m in members]
        # Critical path inside each partition: best (overall, mem, compute) path ending at v.
        best: dict[int, tuple[float, float, float]] = {}
        latency = [(0.0, 0.0, 0.0)] * num
        edges: dict[tuple[int, int], int] = {}
        counted: set[tuple[int, int]] = set()
        for v in range(self.n):
            p = part[v]
            if p < 0:
                continue
            top = (0.0, 0.0, 0.0)
            for u in self.op_preds[v]:
                q = part[u]
                if q == p:
                    if best[u][0] > top[0]:
                        top = best[u]
                elif (u, p) not in counted:
                    counted.add((u, p))
                    edges[(q, p)] = edges.get((q, p), 0) + self.out[u]
            cur = (top[0] + self.node_s[v], top[1] + self.mem_s[v], top[2] + self.compute_s[v])
            best[v] = cur
            if cur[0] > latency[p][0]:
                latency[p] = cur
        order = _toposort(num, edges)
        finish = [math.inf] * num
        levels = [-1] * num
        path: list[int] = []
        total = math.inf
        if order is not None:
            parents: list[list[int]] = [[] for _ in range(num)]
            for (a, b) in edges:
                parents[b].append(a)
            came_from = [-1] * num
            for p in order:
                start, level = 0.0, 0
                for q in parents[p]:
                    t = finish[q] + self.comm_s(edges[(q, p)], devices_of[q], devices_of[p])
                    if t > start or came_from[p] < 0 and t >= start:
                        start, came_from[p] = t, q
                    level = max(level, levels[q] + 1)
                finish[p] = start + latency[p][0]
                levels[p] = level
            total = max(finish) if finish else 0.0
            if num:
                p = max(range(num), key=lambda i: (finish[i], -i))
                while p >= 0:
                    path.append(p)
                    p = came_from[p]
                path.reverse()
        return Evaluation(members, memory, latency, edges, order, finish, total, path, levels)


def _toposort(num: int, edges: Iterable[tuple[int, int]]) -> list[int] | None:
    """Kahn's algorithm; lowest id first among ready partitions, None when there is a cycle."""
    import heapq

    indeg = [0] * num
    children: list[list[int]] = [[] for _ in range(num)]
    for (a, b) in edges:
        children[a].append(b)
        indeg[b] += 1
    ready = [p for p in range(num) if indeg[p] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        p = heapq.heappop(ready)
        order.append(p)
        for c in children[p]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, c)
    return order if len(order) == num else None


def _find_cycle(num: int, edges: Mapping[tuple[int, int], int]) -> list[int]:
    """One cycle of partition ids (for error messages), or [] when the DAG is acyclic."""
    children: list[list[int]] = [[] for _ in range(num)]
    for (a, b) in sorted(edges):
        children[a].append(b)
    state = [0] * num  # 0 new, 1 on stack, 2 done
    stack: list[int] = []
    for root in range(num):
        if state[root]:
            continue
        work = [(root, iter(children[root]))]
        state[root] = 1
        stack.append(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                stack.pop()
                state[node] = 2
            elif state[nxt] == 1:
                return stack[stack.index(nxt):] + [nxt]
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append(nxt)
                work.append((nxt, iter(children[nxt])))
    return []


# --------------------------------------------------------------------------------------------
# Plan


def _json_normalise(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


@dataclass(frozen=True)
class Plan:
    """An immutable partition plan; build one with :func:`partitioner.partition` or :func:`build_plan`."""

    mode: str
    partitions: tuple[Partition, ...]
    devices: tuple[Device, ...]
    edges: tuple[Edge, ...]
    latency_s: float  # end-to-end critical path over the partition DAG (inf if cyclic)
    critical_path: tuple[int, ...]  # partition ids along it
    transfer_rate_bytes_per_s: float | None
    device_usage: tuple[tuple[int, int], ...] = ()  # (logical id, bytes held) per used device
    options: tuple[tuple[str, Any], ...] = ()
    model: str = ""
    graph_fingerprint: str = ""
    schema_version: int = SCHEMA_VERSION

    # -- queries ----------------------------------------------------------------------------
    @property
    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)

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

    def memory_utilisation(self) -> float:
        """Peak over devices of used / capacity (0 when no device is used)."""
        util = 0.0
        used = self.device_memory_bytes()
        for d in self.devices:
            if used.get(d.logical_id):
                util = max(util, used[d.logical_id] / d.memory_bytes if d.memory_bytes else math.inf)
        return util

    def schedule(self) -> dict[int, tuple[float, float]]:
        """Partition id -> (start s, finish s) on the partition DAG's longest-path schedule:
        start = max over parents of (parent finish + edge latency), finish = start + latency,
        so the largest finish is :attr:`latency_s`. Empty when the partitions form a cycle.
        O(P + E)."""
        num = len(self.partitions)
        if sorted(p.id for p in self.partitions) != list(range(num)):
            return {}
        edges = {(e.src, e.dst): e.latency_s for e in self.edges}
        order = _toposort(num, edges)
        if order is None:
            return {}
        latency = {p.id: p.latency_s for p in self.partitions}
        incoming: dict[int, list[tuple[int, float]]] = {p: [] for p in range(num)}
        for (a, b), lat in edges.items():
            incoming[b].append((a, lat))
        times: dict[int, tuple[float, float]] = {}
        for p in order:
            start = max((times[q][1] + lat for q, lat in incoming[p]), default=0.0)
            times[p] = (start, start + latency[p])
        return times

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
    ) -> list[str]:
        """Every broken rule, in words; an empty list means the plan is valid.

        With ``graph``, membership, memory and data flow are recomputed from it (over the nodes
        it knows). ``devices`` checks the plan against other devices than its own (a ``check``
        in CI against today's hardware). ``check_fingerprint`` reports a plan made for a
        different version of the model.
        """
        problems: list[str] = []
        ids = [p.id for p in self.partitions]
        ids_ok = sorted(ids) == list(range(len(ids)))
        if not ids_ok:
            problems.append(f"partition ids must be 0..{len(ids) - 1} without gaps (got {sorted(ids)})")
        seen: dict[str, int] = {}
        for p in self.partitions:
            if not p.node_names:
                problems.append(f"partition {p.id} holds no node; remove it")
            for name in p.node_names:
                if name in seen:
                    problems.append(
                        f"node {name!r} is in partition {seen[name]} and partition {p.id}; "
                        "keep it in one"
                    )
                else:
                    seen[name] = p.id
        known = {d.logical_id: d for d in (self.devices if devices is None else devices)}
        for p in self.partitions:
            if not p.device_ids:
                problems.append(f"partition {p.id} has no device; assign one of {sorted(known)}")
            for did in p.device_ids:
                if did not in known:
                    problems.append(
                        f"partition {p.id} is placed on unknown device {did}; "
                        f"known logical ids are {sorted(known)}"
                    )
        used = dict(self.device_usage)
        edges = {(e.src, e.dst): e.bytes for e in self.edges}
        if graph is not None:
            if check_fingerprint and self.graph_fingerprint and self.graph_fingerprint != graph.fingerprint():
                problems.append(
                    f"plan was made for a different graph (fingerprint {self.graph_fingerprint}, "
                    f"model now {graph.fingerprint()}); re-plan or check the model version"
                )
            op_names = set(graph.op_names)
            for what, names in (
                ("do not exist in the model", sorted(n for n in seen if n not in graph.index)),
                ("are not op nodes of the model", sorted(n for n in seen if n in graph.index and n not in op_names)),
            ):
                if names:
                    shown = ", ".join(f"{n!r} (partition {seen[n]})" for n in names[:10])
                    more = f" and {len(names) - 10} more" if len(names) > 10 else ""
                    problems.append(f"{len(names)} node(s) in the plan {what}: {shown}{more}; remove them")
            missing = [n for n in graph.op_names if n not in seen]
            if missing:
                shown = ", ".join(repr(n) for n in missing[:10]) + (" ..." if len(missing) > 10 else "")
                problems.append(
                    f"{len(missing)} node(s) of the model are in no partition: {shown}; "
                    "assign each to a partition"
                )
            if ids_ok:
                # Recompute memory and data flow over the nodes the graph knows (first placement
                # of a duplicated node wins), so figures are today's, not the plan's record.
                part = [-1] * len(graph)
                for name, pid in seen.items():
                    if name in op_names:
                        part[graph.index[name]] = pid
                model = CostModel(graph, [(0.0, 0.0)] * len(graph), None)
                devs = [p.device_ids for p in sorted(self.partitions, key=lambda q: q.id)]
                ev = model.evaluate(part, devs)
                used = model.device_memory(ev.members, devs)
                edges = ev.edges
        holders: dict[int, list[int]] = {}
        for p in self.partitions:
            for did in p.device_ids:
                holders.setdefault(did, []).append(p.id)
        for did in sorted(used):
            dev = known.get(did)
            if dev is not None and used[did] > dev.memory_bytes:
                problems.append(
                    f"device {dev.name} (id {did}) holds partition(s) {holders[did]} using "
                    f"{format_bytes(used[did])} ({used[did]} B) of its {format_bytes(dev.memory_bytes)} "
                    f"({dev.memory_bytes} B); move nodes to another device or add memory"
                )
        cycle = _find_cycle(len(self.partitions), edges) if ids_ok else []
        if cycle:
            problems.append(
                "partitions depend on each other in a cycle "
                + " -> ".join(str(c) for c in cycle)
                + "; move nodes so data flows one way between them"
            )
        return problems

    def validate(self, graph: Graph | None = None, devices: Sequence[Device] | None = None) -> list[str]:
        """Alias of :meth:`violations`: an empty list means the plan is valid."""
        return self.violations(graph, devices)

    def check(self, graph: Graph | None = None) -> "Plan":
        """Raise :class:`InvalidPlanError` listing every violation; return self when valid."""
        problems = self.violations(graph)
        if problems:
            raise InvalidPlanError(problems)
        return self

    # -- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["options"] = dict(self.options)
        return {"schema_version": data.pop("schema_version"), **data}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Plan":
        if not isinstance(data, Mapping):
            raise PlanFormatError(f"a plan must be a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise PlanFormatError(
                f"plan schema_version must be {SCHEMA_VERSION} (got {version!r}); "
                "re-export the plan with this version of partition-explorer"
            )
        try:
            partitions = tuple(
                Partition(
                    id=int(p["id"]),
                    node_names=tuple(str(n) for n in p["node_names"]),
                    device_ids=tuple(int(d) for d in p["device_ids"]),
                    memory_bytes=int(p["memory_bytes"]),
                    memory_latency_s=float(p["memory_latency_s"]),
                    compute_latency_s=float(p["compute_latency_s"]),
                    latency_s=float(p["latency_s"]),
                    bfs_level=int(p["bfs_level"]),
                    parents=tuple(int(x) for x in p["parents"]),
                    children=tuple(int(x) for x in p["children"]),
                )
                for p in data["partitions"]
            )
            devices = tuple(Device.from_dict(d) for d in data["devices"])
            edges = tuple(
                Edge(int(e["src"]), int(e["dst"]), int(e["bytes"]), float(e["latency_s"]))
                for e in data.get("edges", ())
            )
            rate = data.get("transfer_rate_bytes_per_s")
            return cls(
                mode=str(data["mode"]),
                partitions=partitions,
                devices=devices,
                edges=edges,
                latency_s=float(data["latency_s"]),
                critical_path=tuple(int(x) for x in data.get("critical_path", ())),
                transfer_rate_bytes_per_s=None if rate is None else float(rate),
                device_usage=tuple((int(d), int(b)) for d, b in data.get("device_usage", ())),
                options=tuple(sorted(_json_normalise(dict(data.get("options", {}))).items())),
                model=str(data.get("model", "")),
                graph_fingerprint=str(data.get("graph_fingerprint", "")),
            )
        except KeyError as exc:
            raise PlanFormatError(f"plan JSON lacks the field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, PartitionError):
                raise PlanFormatError(f"plan JSON has a bad device: {exc}") from None
            raise PlanFormatError(f"plan JSON has a field of the wrong type: {exc}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> "Plan":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanFormatError(
                f"plan file is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                "export it again from the app or `partition-explorer plan`"
            ) from None
        return cls.from_dict(data)


def build_plan(
    graph: Graph,
    cost: CostModel,
    part: Sequence[int],
    devices_of: Sequence[Sequence[int]],
    devices: Sequence[Device],
    mode: str,
    options: Mapping[str, Any] | None = None,
) -> Plan:
    """Turn an assignment into a :class:`Plan`.

    Partitions are renumbered by their first node in topological order, so equal assignments
    give equal plans whatever ids the mode used. Never raises for an invalid layout: the plan
    records what it is, and :meth:`Plan.violations` says what is wrong.
    """
    num = len(devices_of)
    first = [len(part)] * num
    for v, p in enumerate(part):
        if p >= 0 and v < first[p]:
            first[p] = v
    used = [p for p in range(num) if first[p] < len(part)]
    used.sort(key=lambda p: first[p])
    renumber = {old: new for new, old in enumerate(used)}
    new_part = [renumber[p] if p >= 0 else -1 for p in part]
    new_devices = [tuple(sorted(set(int(d) for d in devices_of[old]))) for old in used]
    ev = cost.evaluate(new_part, new_devices)
    names = [nd.name for nd in graph.nodes]
    parents: list[set[int]] = [set() for _ in used]
    children: list[set[int]] = [set() for _ in used]
    for (a, b) in ev.edges:
        children[a].add(b)
        parents[b].add(a)
    partitions = tuple(
        Partition(
            id=p,
            node_names=tuple(names[v] for v in ev.members[p]),
            device_ids=new_devices[p],
            memory_bytes=ev.memory_bytes[p],
            memory_latency_s=ev.latency[p][1],
            compute_latency_s=ev.latency[p][2],
            latency_s=ev.latency[p][0],
            bfs_level=ev.bfs_level[p],
            parents=tuple(sorted(parents[p])),
            children=tuple(sorted(children[p])),
        )
        for p in range(len(used))
    )
    edges = tuple(
        Edge(a, b, nbytes, cost.comm_s(nbytes, new_devices[a], new_devices[b]))
        for (a, b), nbytes in sorted(ev.edges.items())
    )
    return Plan(
        mode=mode,
        partitions=partitions,
        devices=tuple(devices),
        edges=edges,
        latency_s=ev.latency_s,
        critical_path=tuple(ev.critical_path),
        transfer_rate_bytes_per_s=cost.rate,
        device_usage=tuple(cost.device_memory(ev.members, new_devices).items()),
        options=tuple(sorted(_json_normalise(dict(options or {})).items())),
        model=graph.name,
        graph_fingerprint=graph.fingerprint(),
    )
