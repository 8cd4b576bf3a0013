"""The time-ordered segmentation DP (partitioner.accelerator._segments): valid starts, the least
estimate over every cut, and the cut a user would make by hand on a chain."""

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from property_problems import check_forward_starts, problems

from partitioner import Device
from partitioner.accelerator._segments import segment_starts, segmentation, time_orders
from partitioner.accelerator.api import build_problem
from partitioner.options import PartitionOptions
from partitioner.testing.synthetic import synthetic_graph


def _prob(graph, devices, latency=None, rate=None):
    return build_problem(graph, devices, PartitionOptions.build(transfer_rate_bytes_per_s=rate, node_latency=latency))


def _estimate(prob, order, bounds):
    """The DP's objective written plainly: for each run, its critical path plus the bytes of
    earlier op nodes it reads over the rate; None when a run does not fit its device (the k-th
    run on the k-th largest device)."""
    cost = prob.cost
    devices = prob.devices_by_memory()
    total = 0.0
    for k, (i, j) in enumerate(bounds):
        run = order[i:j]
        inside, before = set(run), set(order[:i])
        outside = {u for v in run for u in cost.preds[v] if u not in inside}
        if sum(cost.total[v] for v in run) + sum(cost.out[u] for u in outside) > devices[k].memory_bytes:
            return None
        longest = {}
        for v in run:
            longest[v] = max((longest[u] for u in cost.preds[v] if u in inside), default=0.0) + cost.node_s[v]
        entering = sum(cost.out[u] for u in outside if u in before and cost.is_op[u])
        total += max(longest.values()) + (entering / cost.rate if cost.rate else 0.0)
    return total


@settings(max_examples=60, deadline=None)
@given(problems())
def test_segment_starts_are_valid_forward_runs(problem):
    """Every op node in exactly one run, within memory, at most one run per device, and every
    partition edge forward (acyclic: the orders are topological)."""
    graph, devices, latency, rate = problem
    prob = _prob(graph, devices, latency, rate)
    found = segment_starts(prob)
    check_forward_starts(prob, found)
    for a in found:
        assert len({d for ds in a.devices_of for d in ds}) == len(a.devices_of) <= len(devices)


@settings(max_examples=80, deadline=None)
@given(
    problems().filter(lambda p: len(p[0].op_indices) <= 9),
    st.integers(0, 2),
    st.lists(st.floats(0.3, 1.0), min_size=5, max_size=5),
)
def test_segmentation_is_the_least_estimate_over_every_cut(problem, which, scale):
    """Brute force over every way to cut the order into at most one run per device (devices of
    unequal memory): the DP's cut has the least estimate, and none is found exactly when no cut
    fits."""
    graph, devices, latency, rate = problem
    devices = [Device(d.name, int(d.memory_bytes * f), d.logical_id) for d, f in zip(devices, scale)]
    prob = _prob(graph, devices, latency, rate)
    order = time_orders(prob)[which]
    n = len(order)
    best = math.inf
    for runs in range(1, len(devices) + 1):
        for cuts in itertools.combinations(range(1, n), runs - 1):
            edges = (0, *cuts, n)
            value = _estimate(prob, order, list(zip(edges, edges[1:])))
            if value is not None:
                best = min(best, value)
    found = segmentation(prob, order)
    if found is None:
        assert best == math.inf
        return
    runs = max(found.part) + 1
    bounds = []
    for p in range(runs):
        at = [i for i, v in enumerate(order) if found.part[v] == p]
        assert at == list(range(at[0], at[-1] + 1))  # contiguous in the order
        bounds.append((at[0], at[-1] + 1))
    assert math.isclose(_estimate(prob, order, bounds), best, rel_tol=1e-9, abs_tol=1e-12)


def test_a_chain_is_cut_where_the_least_data_crosses():
    """Six nodes in a chain, two devices that each hold five but not six: the cut could go after
    op1, op2, op3 or op4 (where both sides fit); op3's output is the smallest, so the cut goes
    there."""
    sizes = [10, 10, 10, 1, 10, 10]
    graph = synthetic_graph([(i, i + 1) for i in range(5)], sizes)
    need = max(graph.total_bytes[v] + sum(graph.output_bytes[u] for u in graph.preds[v]) for v in graph.op_indices)
    memory = 54  # op0..op4 and the input they read take 45, all six 55
    assert memory >= need
    devices = [Device("a", memory, 0), Device("b", memory, 1)]
    prob = _prob(graph, devices, {name: (1.0, 1.0) for name in graph.op_names}, rate=1.0)
    found = segmentation(prob, time_orders(prob)[0])
    first = [v for v in graph.op_indices if found.part[v] == 0]
    assert [graph.nodes[v].name for v in first] == ["op0", "op1", "op2", "op3"]
    assert prob.latency(found) == 6.0 + 1.0  # six nodes in turn, then one byte at rate 1
