"""``cost_aware``: merge partitions while the critical-path latency does not grow.

Reference: ``Partitioner.cost_aware_partition`` (torch.fx.experimental.accelerator_partitioner),
which starts from one node per partition and, each round, tries every pair of partitions,
re-mapping devices and re-walking every path for each pair: O(N^2) evaluations per round, each
exponential in the branching. # NOTE: [Cost-aware search]
Here the plan starts from fills and is refined: boundary nodes move between partitions and
devices where that shortens the critical path, with Kernighan-Lin passes to leave plateaus
(:func:`search.improve_by_moves`). The coarse starts are the contiguous fill and a best-fit
packing (see :func:`fills.starts`), the best cut of each time order into one run per device
(:func:`segments.segment_starts`, a dynamic programme over the cuts), on models of repeated
blocks the cut between whole blocks that Accelerate makes (:func:`layers.layer_start`), and, where the budget
affords 200 evaluations a start, best-fit fills of the nodes in time order
(:func:`fills.priority_starts`). Where the budget affords 16 evaluations a node (graphs of
up to about 100 op nodes under the default budget), a fine start is scored too: one node per
partition on the first start's devices (whose latency is the node-level critical path plus the
transfers the devices force: the best any merging can reach), refined, with neighbouring
partitions on the same devices merged whenever the exact latency does not grow, and refined
again; with less, its three phases would each get under two evaluations a node and its plan of
many partitions is rarely the best (at 150 nodes it won on one graph of eight, for 40 % of the
time). The lowest latency wins, fewer partitions winning near ties.
Under ``cost_model="torch"`` torch's own merge sequence (:mod:`._torch_merge`) is one more
candidate wherever it completes within ten times the search's budget of evaluations: there the
plan is never slower than torch's by torch's latency, by construction (NOTE: [Never slower than
torch]). O(budget * (N + E)), plus O(N L deg) for the segmentations (runs of up
to L nodes).
"""

from __future__ import annotations

from partitioner.accelerator._base import Assignment, Problem, compact, pick_best
from partitioner.accelerator._fills import priority_starts, starts
from partitioner.accelerator._layers import layer_start
from partitioner.accelerator._merge import merge_partitions
from partitioner.accelerator._search import default_budget, improve_by_moves
from partitioner.accelerator._segments import affordable, segment_starts, time_orders
from partitioner.accelerator._torch_merge import merge_sequence

__all__ = ["partition", "search", "singletons"]

_EVALS_PER_START = 200  # a budget this large per start affords the priority-ordered starts too


def partition(problem: Problem) -> Assignment:
    return search(problem, problem.options.search_budget or default_budget(problem))


def singletons(problem: Problem, coarse: Assignment) -> Assignment:
    """One node per partition, each on the devices its node has in ``coarse``."""
    part = [-1] * len(problem.graph)
    devices_of: list[list[int]] = []
    for v in problem.graph.op_indices:
        part[v] = len(devices_of)
        devices_of.append(list(coarse.devices_of[coarse.part[v]]))
    return Assignment(part, devices_of)


def search(problem: Problem, budget: int) -> Assignment:
    """The cost-aware search with ``budget`` cost-model evaluations, from :func:`fills.starts`,
    the segmentations and the priority-ordered starts the budget affords."""
    graph = problem.graph
    begin = starts(problem)
    count = budget // _EVALS_PER_START - len(begin)  # the priority fills the budget affords
    orders = time_orders(problem) if count > 0 or affordable(problem) else []
    every = begin + segment_starts(problem, begin, orders)
    layered = layer_start(problem)  # whole blocks per device, as Accelerate cuts a decoder
    if layered is not None and layered not in every:
        every.append(layered)
    every += priority_starts(problem, count, every, orders)
    candidates = [improve_by_moves(problem, a, budget // (2 * len(every)), swaps=False) for a in every]
    if budget >= 16 * len(graph.op_indices):
        # One node per partition on the first start's devices, then move and merge (a plan of
        # many partitions costs many evaluations: once, not per start, and only where each
        # phase affords two evaluations a node).
        share = budget // 8
        fine = compact(improve_by_moves(problem, singletons(problem, begin[0]), share, swaps=False))
        merged = compact(merge_partitions(problem, fine, share))
        candidates.append(improve_by_moves(problem, merged, share, swaps=False))
    if not problem.cost.torch:
        return pick_best(problem, candidates)
    # NOTE: [Never slower than torch] Under torch's cost model, torch's own merge sequence
    # (:func:`merge_sequence`, replayed step for step and scored by the "torch" model, which
    # gives torch's partitions exactly the latency torch reports) is a candidate wherever it
    # completes within ten times the budget, refined by moves that only take strict
    # improvements. The plan is the best candidate, and where the near-tie rule picked one with
    # fewer partitions but a higher latency than torch's (refined) plan, torch's wins: so the
    # result is never slower than torch's plan by torch's latency, for every graph where the
    # sequence completes, by construction rather than by sampling.
    theirs = merge_sequence(problem, max_evaluations=10 * budget)
    if theirs is not None:
        theirs = improve_by_moves(problem, theirs, budget // 4, swaps=False)
        candidates.append(theirs)
    # The moves check torch's memory rule with the partitions in their search order, the plan
    # numbers them by first node, and the rule depends on the order: the starts, in first-node
    # order already, stay candidates so that some candidate fits as numbered.
    best = pick_best(problem, candidates + every)
    if theirs is not None and problem.fits(theirs) and problem.latency(theirs) < problem.latency(best):
        return theirs
    return best
