"""Layer-aligned starts: cuts between the repeated blocks of a model (``model.layers.<i>``,
``blocks.<i>``), the cut Hugging Face Accelerate's device maps make, among the searches' starts.

NOTE: [Layer-aligned cut] A decoder is a chain of identical blocks; the tensor between two
blocks is the hidden state, the least data crossing anywhere in the block, and a device map
from Accelerate (``infer_auto_device_map``) cuts only there, since it never splits a block of
``_no_split_modules``. The greedy fills cut where a device is full, often inside a block where
several tensors cross (a residual and an attention input), and the moves of the searches, one
boundary node at a time, do not walk a cut across a whole block: on 2,100-op decoders that left
kl_based up to 1.1 % slower than Accelerate's map. This start cuts the op nodes, in their
topological order, into runs of whole blocks (ops outside the blocks join their neighbours),
with the fewest runs that fit the devices and the bytes balanced between them (a min-max
partition of the blocks' bytes by dynamic programming). O(N + E + B D^2) for B blocks on D
devices. The block key is the first numbered component of an op's module path that most ops
share; graphs without two or more such blocks get no start here.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from typing import Sequence

from partitioner.accelerator._base import Assignment, Problem

__all__ = ["block_units", "layer_start"]


def block_units(problem: Problem) -> list[list[int]]:
    """The op nodes in index order, cut where the repeated block they run in changes (ops in
    no block stay with the run before them, or the first). Empty when the graph has fewer than
    two blocks. O(N)."""
    graph = problem.graph
    keys: list[tuple[str, int] | None] = []
    prefixes: Counter[str] = Counter()
    seen: dict[str, tuple[str, int] | None] = {}  # a path's key: a block's ops share a few paths
    for v in graph.op_indices:
        path = graph.nodes[v].module_path
        if path in seen:
            key = seen[path]
        else:
            parts = path.split(".")
            key = seen[path] = next(((".".join(parts[:i]), int(p)) for i, p in enumerate(parts) if p.isdigit()), None)
        keys.append(key)
        if key is not None:
            prefixes[key[0]] += 1
    if not prefixes:
        return []
    prefix = prefixes.most_common(1)[0][0]
    units: list[list[int]] = []
    last: int | None = None
    for v, key in zip(graph.op_indices, keys):
        block = key[1] if key is not None and key[0] == prefix else None
        if block is not None and block != last and units and last is not None:
            units.append([])
        if not units:
            units.append([])
        if block is not None:
            last = block
        units[-1].append(v)
    return units if len(units) >= 2 else []


def layer_start(problem: Problem) -> Assignment | None:
    """The fewest runs of whole blocks that fit the devices (largest first), balanced by bytes
    (NOTE: [Layer-aligned cut]); None when the graph has no repeated blocks or no such cut fits."""
    units = block_units(problem)
    if not units:
        return None
    total = problem.cost.total
    weight = [sum(total[v] for v in unit) for unit in units]
    devices = problem.devices_by_memory()
    room = [d.memory_bytes for d in devices]
    for runs in range(1, min(len(devices), len(units)) + 1):
        # A device holds at least its run's own bytes (under either cost model), so a count of
        # runs whose devices together hold less than the blocks, or a cut with a run over its
        # device, cannot fit: skipped without building and pricing the plan (at 16,000 blocks
        # that was a tenth of a second a count).
        if sum(weight) > sum(room[:runs]):
            continue
        cuts = _balanced(weight, runs)
        if any(sum(weight[i:j]) > room[p] for p, (i, j) in enumerate(zip(cuts, cuts[1:]))):
            continue
        part = [-1] * len(problem.graph)
        for p, (i, j) in enumerate(zip(cuts, cuts[1:])):
            for unit in units[i:j]:
                for v in unit:
                    part[v] = p
        candidate = Assignment(part, [[devices[p].logical_id] for p in range(runs)])
        if problem.fits(candidate):
            return candidate
    return None


def _balanced(weight: Sequence[int], runs: int) -> list[int]:
    """Cut positions 0 = c0 < c1 < ... < c_runs = len(weight) minimising the largest run's sum
    (the linear partition problem), the earliest cut winning ties. O(B runs) for B blocks (and
    a bisection per tie): NOTE: [Balanced cuts at the crossing]."""
    # NOTE: [Balanced cuts at the crossing] The textbook DP tries every previous cut i for
    # every j: best[k][j] = min over i of max(best[k-1][i], prefix[j] - prefix[i]), O(B^2 runs),
    # which took 5 s of cost_aware's 5.3 s on a residual chain of 2,000 blocks (each layer a
    # block). With weights >= 0, best[k-1][i] never falls as i grows and prefix[j] - prefix[i]
    # never rises, so the first i where the first reaches the second, or the i just before it,
    # holds the minimum; that crossing never moves left as j grows, so one pointer finds it for
    # every j. Among equal values the earliest i is taken, as the full scan with a strict "<"
    # takes it, so the cuts are the same to the index.
    n = len(weight)
    prefix = [0]
    for w in weight:
        prefix.append(prefix[-1] + w)
    inf = float("inf")
    best: list[list[float]] = [[inf] * (n + 1) for _ in range(runs + 1)]
    cut = [[0] * (n + 1) for _ in range(runs + 1)]
    best[0][0] = 0
    for k in range(1, runs + 1):
        previous, row, cuts_k = best[k - 1], best[k], cut[k]
        lo = k - 1  # the first i in [k-1, j) with previous[i] >= total - prefix[i], else j
        for j in range(k, n + 1):
            total = prefix[j]
            while lo < j and previous[lo] < total - prefix[lo]:
                lo += 1
            value, at = inf, j
            if lo > k - 1:  # before the crossing the run's sum rules; its earliest minimum
                value = total - prefix[lo - 1]
                at = max(k - 1, bisect_left(prefix, prefix[lo - 1]))
            if lo < j and previous[lo] < value:
                value, at = previous[lo], lo
            row[j], cuts_k[j] = value, at
    cuts = [n]
    for k in range(runs, 0, -1):
        cuts.append(cut[k][cuts[-1]])
    return cuts[::-1]
