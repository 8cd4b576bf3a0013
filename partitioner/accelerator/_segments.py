"""Time-ordered segmentations: the best cut of one node order into contiguous runs, one device
each, found by dynamic programming. Where the searches (:mod:`.cost_aware`, :mod:`.kl_based`)
start, beside the greedy fills of :mod:`.fills`.

NOTE: [Segmentation DP] A device runs one partition at a time and a partition costs its own
critical path, so a plan whose partitions each hold one stretch of time (the nodes in order of
their earliest or latest start) runs them one after another at little more than the node-level
critical path, plus the transfers at the cuts. Where to cut is what the greedy fills get wrong:
they cut where a device is full, not where little data crosses. This programme tries every cut:
``F[k][j]`` is the least estimated finish of the first ``j`` nodes of the order in ``k`` runs,
the k-th run on the k-th largest device, and a run ``order[i:j]`` costs its critical path plus
the bytes entering it from earlier nodes over the transfer rate (as if they arrived after the
run before it ended, which over-counts parallel arrivals: the exact cost model then scores the
result). A run longer than the largest device holds is never extended, so the work is
O(N L deg) for runs of at most L nodes; above :data:`MAX_STEPS` steps it gives up (large
graphs start from the fills alone). The recursion is a shortest path over the DAG of (runs used,
cut position) pairs, which networkx's shortest paths would find too, but building that DAG's
O(N L D) edges as Python objects costs more than running the recursion, so it is written out.
"""

from __future__ import annotations

import math
from typing import Sequence

from partitioner.accelerator._base import Assignment, Problem
from partitioner.devices import Device

__all__ = ["time_orders", "segmentation", "segment_starts", "affordable", "MAX_STEPS"]

MAX_STEPS = 60_000  # node visits of one segmentation: three cost about what a search's budget does


def affordable(problem: Problem) -> bool:
    """Whether a segmentation's runs (as many nodes as the largest device holds, judged by the
    average node) keep its work under :data:`MAX_STEPS`. O(N)."""
    n = len(problem.graph.op_indices)
    held = sum(problem.cost.total[v] for v in problem.graph.op_indices) or 1
    room = max(d.memory_bytes for d in problem.devices)
    return n * min(n, math.ceil(n * room / held)) <= MAX_STEPS


def time_orders(problem: Problem) -> list[list[int]]:
    """The op nodes ordered by earliest start, by latest start that keeps the node-level critical
    path, and by the middle of the two (index breaking ties). Each is topological: an edge
    u -> v gives earliest[u] <= earliest[v] and latest[u] <= latest[v]. O(N log N + E)."""
    graph, node_s = problem.graph, problem.cost.node_s
    n = len(graph)
    earliest = [0.0] * n
    for v in range(n):  # node indices are a topological order
        for u in graph.preds[v]:
            earliest[v] = max(earliest[v], earliest[u] + node_s[u])
    tail = [0.0] * n  # the longest path from v to the end, v included
    for v in reversed(range(n)):
        tail[v] = node_s[v] + max((tail[w] for w in graph.users[v]), default=0.0)
    span = max((earliest[v] + tail[v] for v in range(n)), default=0.0)
    latest = [span - t for t in tail]
    ops = graph.op_indices
    return [
        sorted(ops, key=lambda v: (earliest[v], v)),
        sorted(ops, key=lambda v: (latest[v], v)),
        sorted(ops, key=lambda v: (earliest[v] + latest[v], v)),
    ]


def segmentation(problem: Problem, order: Sequence[int]) -> Assignment | None:
    """The cut of topological ``order`` into runs on distinct devices with the least estimated
    latency (NOTE: [Segmentation DP]); fewer runs win ties. None when no cut fits the devices
    or the work would pass :data:`MAX_STEPS`."""
    if not affordable(problem):
        return None
    devices = problem.devices_by_memory()
    table = _table(problem, order, [d.memory_bytes for d in devices])
    if table is None:
        return None
    finish, cut = table
    n = len(order)
    runs = min(range(1, len(devices) + 1), key=lambda k: (finish[k][n], k))
    if finish[runs][n] == math.inf:
        return None
    return _runs(problem, order, cut, runs, devices)


def _table(problem: Problem, order: Sequence[int], room: list[int]) -> tuple[list[list[float]], list[list[int]]] | None:
    """The programme of NOTE: [Segmentation DP]: ``finish[k][j]``, the least estimated finish of
    ``order[:j]`` in ``k`` runs on the ``k`` largest devices (``room``: their memory, largest
    first), and ``cut[k][j]``, where its last run starts; None past :data:`MAX_STEPS`."""
    cost = problem.cost
    out, total, preds, node_s, is_op = cost.out, cost.total, cost.preds, cost.node_s, cost.is_op
    per_byte = 0.0 if not cost.rate or math.isinf(cost.rate) else 1.0 / cost.rate
    kmax, n = len(room), len(order)
    pos = [-1] * cost.n
    for i, v in enumerate(order):
        pos[v] = i
    inf = math.inf
    finish = [[inf] * (n + 1) for _ in range(kmax + 1)]  # finish[k][j]: order[:j] in k runs
    cut = [[-1] * (n + 1) for _ in range(kmax + 1)]
    finish[0][0] = 0.0
    longest = [0.0] * cost.n  # the longest path ending at each node, within the run
    counted = [-1] * cost.n  # the run start that counted this outside input already
    steps = 0
    for i in range(n):
        reached = [k for k in range(kmax) if finish[k][i] < inf]
        if not reached:
            continue
        path = 0.0
        held = entering = 0
        for j in range(i, n):
            v = order[j]
            held += total[v]
            top = 0.0
            for u in preds[v]:
                if pos[u] >= i:
                    if longest[u] > top:
                        top = longest[u]
                elif counted[u] != i:
                    counted[u] = i
                    held += out[u]
                    if is_op[u]:
                        entering += out[u]
            longest[v] = top + node_s[v]
            if longest[v] > path:
                path = longest[v]
            steps += 1
            if held > room[0] or steps > MAX_STEPS:
                break
            run = path + entering * per_byte
            for k in reached:
                if held > room[k]:
                    break
                end = finish[k][i] + run
                if end < finish[k + 1][j + 1]:
                    finish[k + 1][j + 1], cut[k + 1][j + 1] = end, i
        if steps > MAX_STEPS:
            return None
    return finish, cut


def _runs(
    problem: Problem, order: Sequence[int], cut: list[list[int]], runs: int, devices: Sequence[Device]
) -> Assignment:
    """The ``runs`` runs the cuts give, the k-th on the k-th largest device."""
    bounds = []
    j = len(order)
    for k in range(runs, 0, -1):
        bounds.append((cut[k][j], j))
        j = cut[k][j]
    bounds.reverse()
    part = [-1] * problem.cost.n
    for p, (i, j) in enumerate(bounds):
        for v in order[i:j]:
            part[v] = p
    return Assignment(part, [[devices[k].logical_id] for k in range(runs)])


def segment_starts(
    problem: Problem, taken: Sequence[Assignment] = (), orders: Sequence[Sequence[int]] | None = None
) -> list[Assignment]:
    """:func:`segmentation` of each of ``orders`` (default :func:`time_orders`) that fits,
    duplicates (of each other and of ``taken``) left out."""
    found: list[Assignment] = []
    if not affordable(problem):
        return found
    for order in time_orders(problem) if orders is None else orders:
        candidate = segmentation(problem, order)
        if candidate is not None and candidate not in found and candidate not in taken and problem.fits(candidate):
            found.append(candidate)
    return found
