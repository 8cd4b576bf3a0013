"""``size_based``: torch's greedy fill, node for node.

Reference: ``Partitioner.size_based_partition`` in ``torch.fx.experimental.accelerator_partitioner``,
reproduced step by step so the plan has the same node sets and device ids as torch's wherever torch
succeeds: the next partition opens on the first device in list order that holds the node alone;
memory is counted as torch counts it (``get_extra_size_of``, an input read from outside charged
to every node that reads it); once every device has a partition, each remaining node becomes a
partition of its own, mapped best-fit onto the device with the least memory left that still holds it
(``get_device_to_partitions_mapping``). Where torch's fill fails, the error names
``largest_first`` (:mod:`.fills`), which opens partitions on the largest device first and packs
the leftovers. O(N + E) for the fill, O(L * D * (N + E)) for L leftover nodes on D devices.
"""

from __future__ import annotations

from typing import Sequence

from partitioner.accelerator._base import Assignment, Problem
from partitioner.cost.model import CostModel
from partitioner.errors import InfeasibleError
from partitioner.units import format_bytes

__all__ = ["partition", "torch_fill", "torch_singletons", "map_onto_devices"]

_BETTER = "mode 'largest_first' (the largest device first, leftovers packed) may still find a plan"


def partition(problem: Problem) -> Assignment:
    found = torch_fill(problem)
    if not problem.fits(found):
        raise InfeasibleError(
            f"torch's size_based plan does not fit under the {problem.cost.cost_model} cost model's "
            f"memory rule; {_BETTER}"
        )
    return found


def torch_fill(problem: Problem) -> Assignment:
    """Torch's ``size_based_partition`` over the index graph; raises where torch raises."""
    fill = _TorchFill(problem)
    p = fill.open_partition()
    for v in problem.graph.op_indices:
        p = fill.place(p, v)
    if not _map(problem, fill.held, fill.used, fill.devices_of):
        held, devices_of = fill.held, fill.devices_of
        name = problem.graph.nodes[max(held[next(q for q, devs in enumerate(devices_of) if not devs)])].name
        raise InfeasibleError(
            f"torch's size_based cannot map the partition of node {name!r} onto a device (\"Cannot "
            f'Get a Valid Partition to Logical Device Mapping"); {_BETTER}, or add a device or memory'
        )
    return _assignment(len(problem.graph), fill.members, fill.devices_of)


_ALONE = "every device has a partition: it gets one of its own, given a device at the end"


class _TorchFill:
    """Torch's partitions while ``size_based_partition`` fills them, node by node."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.devices = list(problem.devices)
        self.members: list[list[int]] = []  # op nodes of each partition, in order
        self.held: list[set[int]] = []  # torch's Partition.nodes: ops plus the inputs and attributes they read
        self.used: list[int] = []  # torch's used_mem_bytes (recalculate_mem_size), kept incrementally
        self.devices_of: list[list[int]] = []
        self.occupied: set[int] = set()
        self.left: dict[int, int] = {}  # torch's partition_to_left_mem_bytes

    def open_partition(self) -> int:
        self.members.append([])
        self.held.append(set())
        self.used.append(0)
        self.devices_of.append([])
        return len(self.members) - 1

    def place(self, p: int, v: int) -> int:
        """Node ``v`` into partition ``p``, a new one on the next free device, or one of its own
        once every device has a partition, as torch's loop does; the partition filled next."""
        extra, record, held, left = self.problem.cost.torch_extra, self.problem.record, self.held, self.left
        if len(self.members) > len(self.devices):  # every device has a partition: one partition per node
            self.add(q := self.open_partition(), v)
            self.placed(q, v, _ALONE)
            return p
        need = extra(v, held[p])
        why = (
            "" if record is None else f"it needs {format_bytes(need)} and P{p} has {format_bytes(left.get(p, 0))} left"
        )
        if self.used[p] == 0:
            self.give_device(p, self.device_for(v))
            why = "" if record is None else f"P{p} opens on the first free device that holds it ({format_bytes(need)})"
        elif left[p] < need:
            if len(self.members) == len(self.devices):
                self.add(q := self.open_partition(), v)
                self.placed(q, v, "" if record is None else f"P{p} is full ({format_bytes(left[p])} left); " + _ALONE)
                return p
            d = self.device_for(v)
            full = (
                ""
                if record is None
                else f"P{p} is full ({format_bytes(left[p])} left, it needs {format_bytes(need)}); "
            )
            p = self.open_partition()
            need = extra(v, held[p])
            self.give_device(p, d)
            why = full + f"P{p} opens on the next free device"
        self.add(p, v)
        left[p] -= need
        self.placed(p, v, why)
        return p

    def add(self, p: int, v: int) -> None:  # Partition.add_node
        graph, held = self.problem.graph, self.held[p]
        fresh = [u for u in graph.preds[v] if not graph.nodes[u].is_op and u not in held]
        held.update(fresh)
        held.add(v)
        self.members[p].append(v)
        self.used[p] += sum(graph.total_bytes[u] for u in fresh) + self.problem.cost.torch_extra(v, held)

    def give_device(self, p: int, d: int) -> None:
        self.left[p] = self.problem.capacity[d]
        self.devices_of[p].append(d)

    def device_for(self, v: int) -> int:  # find_device_based_on_size
        need = self.problem.cost.torch_extra(v, set())
        for d in self.devices:
            if d.logical_id not in self.occupied and d.memory_bytes >= need:
                self.occupied.add(d.logical_id)
                return d.logical_id
        raise InfeasibleError(
            f"torch's size_based finds no free device for node {self.problem.graph.nodes[v].name!r} "
            f"({format_bytes(need)} with its inputs); {_BETTER}, or add a device or memory"
        )

    def placed(self, q: int, v: int, why: str) -> None:
        record, devices = self.problem.record, self.devices_of[q]
        if record is not None:
            name = self.problem.graph.nodes[v].name
            record("place", f"{name} -> P{q}: {why}", [(v, q)], [(q, devices)] if devices else [])


def torch_singletons(problem: Problem) -> Assignment:
    """One node per partition, mapped onto devices as torch's ``cost_aware`` starts: a start
    that fits under torch's memory rule where the contiguous fills do not."""
    members = [[v] for v in problem.graph.op_indices]
    devices_of = map_onto_devices(problem, members)
    if devices_of is None:
        raise InfeasibleError(
            "torch's device mapping finds no device for some one-node partition; add a device or memory"
        )
    return _assignment(len(problem.graph), members, devices_of)


def map_onto_devices(problem: Problem, members: Sequence[Sequence[int]]) -> list[list[int]] | None:
    """Torch's ``get_device_to_partitions_mapping`` for partitions without devices (``members``:
    each partition's op nodes): their devices, or None where torch's mapping fails."""
    cost = problem.cost
    held = [cost.torch_held(m) for m in members]
    used = [sum(cost.torch_extra(v, h) for v in h) for h in held]
    devices_of: list[list[int]] = [[] for _ in held]
    return devices_of if _map(problem, held, used, devices_of) else None


def _map(problem: Problem, held: list[set[int]], used: list[int], devices_of: list[list[int]]) -> bool:
    """Each partition without a device goes, in order, to the device with the least memory left
    (ties in the previous order) whose room exceeds what the partition adds there; False when one
    finds none (its devices stay empty)."""
    cost = problem.cost
    order = [d.logical_id for d in problem.devices]
    left = {d.logical_id: d.memory_bytes for d in problem.devices}
    on: dict[int, set[int]] = {d: set() for d in order}
    for q, devs in enumerate(devices_of):
        for d in devs:
            on[d] |= held[q]
            left[d] -= used[q]
    for q, devs in enumerate(devices_of):
        if devs:
            continue
        order.sort(key=lambda d: left[d])
        for d in order:
            need = used[q] if not on[d] else _adds(cost, held[q], on[d])
            if need < left[d]:
                if problem.record is not None:
                    name = next(x.name for x in problem.devices if x.logical_id == d)
                    problem.record(
                        "map",
                        f"P{q} -> {name}: the device with the least memory left ({format_bytes(left[d])}) "
                        f"that holds what it adds ({format_bytes(need)})",
                        [],
                        [(q, [d])],
                    )
                devs.append(d)
                on[d] |= held[q]
                left[d] -= need
                break
        else:
            return False
    return True


def _adds(cost: CostModel, held: set[int], on: set[int]) -> int:
    """What a partition adds on a device already holding ``on``: torch's ``get_extra_size_of`` of
    each of its nodes against the union, without building the union (O(its nodes' inputs))."""
    return sum(cost.total[v] + sum(cost.out[u] for u in cost.preds[v] if u not in held and u not in on) for v in held)


def _assignment(n: int, members: Sequence[Sequence[int]], devices_of: list[list[int]]) -> Assignment:
    part = [-1] * n
    for q, vs in enumerate(members):
        for v in vs:
            part[v] = q
    return Assignment(part, devices_of)
