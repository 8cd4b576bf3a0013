"""``aot_based``: a node-to-partition and partition-to-devices mapping given ahead of time.

Reference: ``Partitioner.aot_based_partition`` (torch.fx.experimental.accelerator_partitioner),
fed by ``PartitionerConfig.node_to_partition_mapping`` and
``partition_to_logical_device_mapping``. Mappings name nodes by their fx names. O(N).
"""

from __future__ import annotations

from partitioner.accelerator._base import Assignment, Problem
from partitioner.errors import InvalidPlanError, PartitionError

__all__ = ["partition"]


def partition(problem: Problem) -> Assignment:
    graph = problem.graph
    aot = problem.options.aot
    if aot is None or not aot.node_to_partition or not aot.partition_to_devices:
        raise PartitionError(
            "mode 'aot_based' needs node_to_partition ({node name: partition id}) and "
            "partition_to_devices ({partition id: [logical device ids]}); pass both, e.g. from "
            "a saved plan's node_to_partition() and partition_to_devices()"
        )
    node_to_partition = dict(aot.node_to_partition)
    pids = sorted(set(node_to_partition.values()))
    index = {p: i for i, p in enumerate(pids)}
    devices = {k: list(v) for k, v in aot.partition_to_devices}
    problems = []
    unknown = sorted(n for n in node_to_partition if n not in graph.index)
    if unknown:
        problems.append(f"node_to_partition names unknown node(s) {unknown[:10]}")
    missing = [n for n in graph.op_names if n not in node_to_partition]
    if missing:
        problems.append(f"node_to_partition leaves out op node(s) {missing[:10]}")
    no_device = [p for p in pids if p not in devices]
    if no_device:
        problems.append(f"partition_to_devices has no entry for partition(s) {no_device}")
    known = {d.logical_id for d in problem.devices}
    bad = sorted({d for ds in devices.values() for d in ds if d not in known})
    if bad:
        problems.append(f"partition_to_devices uses unknown logical device id(s) {bad} (known: {sorted(known)})")
    if problems:
        raise InvalidPlanError([f"{p}; fix the mapping so it covers every op node of the model once" for p in problems])
    part = [-1] * len(graph)
    for name, p in node_to_partition.items():
        if graph.nodes[graph.index[name]].is_op:
            part[graph.index[name]] = index[p]
    return Assignment(part, [devices[p] for p in pids])
