"""The searches' faster evaluation changes no result: plans scored before and read back
(NOTE: [Scored plans] in partitioner/accelerator/_search.py) and the scan-first topological order
of :class:`IncrementalCost` give exactly what a full evaluation gives."""

import math
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_problems import problems

import partitioner
from partitioner import InfeasibleError
from partitioner.accelerator import _scored, _search
from partitioner.accelerator._base import Assignment
from partitioner.accelerator.api import build_problem
from partitioner.cost.incremental import IncrementalCost
from partitioner.graph import toposort_children
from partitioner.options import PartitionOptions


def _plan(graph, devices, latency, rate, mode):
    try:
        plan = partitioner.partition(graph, devices, mode=mode, node_latency=latency, transfer_rate_bytes_per_s=rate)
    except InfeasibleError as exc:
        return str(exc)
    return (
        plan.latency_s,
        sorted(plan.node_to_partition().items()),
        sorted((p, list(d)) for p, d in plan.partition_to_devices().items()),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.sampled_from(["cost_aware", "kl_based"]))
def test_reading_scored_plans_back_changes_no_plan(problem, mode):
    """Same partitions, devices and latency (to the bit) with the scored plans read back as
    without (nothing stored)."""
    graph, devices, latency, rate = problem
    with mock.patch.object(_scored, "SCORED_REFS", 0):
        without = _plan(graph, devices, latency, rate, mode)
    assert _plan(graph, devices, latency, rate, mode) == without


@settings(max_examples=60, deadline=None)
@given(
    problems(),
    st.integers(1, 6),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.booleans()), max_size=30),
)
def test_every_try_equals_a_full_evaluation(problem, parts, moves):
    """Each try, read back or timed, gives the latency and critical path of a full evaluation of
    the plan it tries, across applied moves in between."""
    graph, devices, latency, rate = problem
    problem_ = build_problem(
        graph, devices, PartitionOptions.build(transfer_rate_bytes_per_s=rate, node_latency=latency)
    )
    cost = problem_.cost
    ops = list(graph.op_indices)
    part = [-1] * len(graph)
    for i, v in enumerate(ops):
        part[v] = i * parts // len(ops)
    s = _search._State(problem_, Assignment(part, [[p % len(devices)] for p in range(parts)]))
    for a, b, keep in moves:
        v, q = ops[a % len(ops)], b % parts
        w, r = ops[b % len(ops)], a % parts
        tried = ((v, q),) if v == w else ((v, q), (w, r))
        for attempt in range(2):  # the second one is read back
            lat = _search._score(s, tried)
            plan = list(s.part)
            for u, p in tried:
                plan[u] = p
            full = cost.evaluate(plan, s.devices_of)
            assert lat == full.latency_s or (math.isinf(lat) and math.isinf(full.latency_s))
            if full.order is not None:
                assert s.path == full.critical_path
        if keep:
            s.apply(tried)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 14), st.lists(st.tuples(st.integers(0, 13), st.integers(0, 13)), max_size=40))
def test_scan_first_order_is_the_lowest_id_first_order(num, edges):
    """:meth:`IncrementalCost._order` equals :func:`toposort_children`, cycles included."""
    children = [set() for _ in range(num)]
    parents = [{} for _ in range(num)]
    for a, b in edges:
        a, b = a % num, b % num
        if a != b:
            children[a].add(b)
            parents[b][a] = 1
    inc = IncrementalCost.__new__(IncrementalCost)
    inc.parents, inc.children = parents, children
    assert inc._order() == toposort_children(children)
