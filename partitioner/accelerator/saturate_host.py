"""``saturate_host``: replicate the plan onto idle devices.

Reference: ``Partitioner.saturate_host`` (torch.fx.experimental.accelerator_partitioner). For each
used device, pick the smallest idle device that can hold everything on it; when every used
device found one, all their partitions gain that replica, and the search repeats while enough
idle devices remain. Unlike the reference it prints nothing. O(D^2) for D devices per round.
"""

from __future__ import annotations

from partitioner.accelerator._base import Assignment, Problem

__all__ = ["saturate"]


def saturate(problem: Problem, a: Assignment) -> Assignment:
    cost = problem.cost
    members: dict[int, list[int]] = {}
    for v, p in enumerate(a.part):
        if p >= 0:
            members.setdefault(p, []).append(v)
    pids = sorted(members)
    used_bytes = cost.device_memory([members[p] for p in pids], [a.devices_of[p] for p in pids])
    by_id = {d.logical_id: d for d in problem.devices}
    used = [d.logical_id for d in problem.devices if d.logical_id in used_bytes]
    replica_of: dict[int, int] = {}
    while len(used) * 2 + len(replica_of) <= len(problem.devices):
        idle = [
            d.logical_id for d in problem.devices if d.logical_id not in used_bytes and d.logical_id not in replica_of
        ]
        round_map: dict[int, int] = {}
        for u in used:
            fits = [i for i in idle if by_id[i].memory_bytes >= used_bytes[u]]
            if not fits:
                break
            new = min(fits, key=lambda i: (by_id[i].memory_bytes, i))
            idle.remove(new)
            round_map[new] = u
        if len(round_map) < len(used):
            break
        replica_of.update(round_map)
    devices_of = [list(ds) for ds in a.devices_of]
    for replica, original in sorted(replica_of.items()):
        for ds in devices_of:
            if original in ds[:1] or (original in ds and replica not in ds):
                ds.append(replica)
    return Assignment(list(a.part), devices_of)
