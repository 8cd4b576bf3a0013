"""What makes the first plan after a trace fast changes no plan: the collector paused during a
plan (NOTE: [Collector paused]), known plans read back (NOTE: [Known plans]), the layer-aligned
start's pruned cuts; and a long run says what it is doing (``progress=``)."""

import gc
import math
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_problems import problems

import partitioner
from partitioner import Device, InfeasibleError
from partitioner.accelerator import _layers, api, cost_aware
from partitioner.accelerator._base import Assignment, Progress
from partitioner.accelerator.api import build_problem
from partitioner.accelerator.modes import MODES
from partitioner.options import PartitionOptions
from partitioner.testing.synthetic import blocks_graph


def _graph_and_devices():
    graph = blocks_graph(6, per_block=25)
    memory = math.ceil(graph.total_size_bytes * 0.4)
    return graph, [Device(f"d{i}", memory, i) for i in range(3)]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_plan_runs_with_the_collector_paused_and_leaves_it_as_found(enabled):
    graph, devices = _graph_and_devices()
    seen = []
    real = MODES["kl_based"]

    def spy(problem):
        seen.append(gc.isenabled())
        return real(problem)

    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        with mock.patch.dict(MODES, {"kl_based": spy}):
            partitioner.partition(graph, devices, mode="kl_based")
        assert seen == [False]
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_the_collector_is_restored_when_a_plan_raises():
    graph, devices = _graph_and_devices()
    assert gc.isenabled()
    with pytest.raises(InfeasibleError):
        partitioner.partition(graph, [Device("tiny", 1, 0)], mode="kl_based")
    assert gc.isenabled()
    partitioner.partition(graph, devices, mode="size_based")
    assert gc.isenabled()


def test_a_plan_leaves_no_cycles_for_the_collector():
    """The premise of pausing it: the collector finds nothing of a plan's to free."""
    graph, devices = _graph_and_devices()
    partitioner.partition(graph, devices, mode="kl_based")
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        for mode in ("size_based", "largest_first", "cost_aware", "kl_based"):
            partitioner.partition(graph, devices, mode=mode)
            assert gc.collect() == 0, mode
    finally:
        if was:
            gc.enable()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.booleans())
def test_known_latencies_equal_full_evaluations(problem, torch_model):
    """Every latency a search recorded for the plan it returns equals a full evaluation, and a
    plan's fit read back equals the fit priced again."""
    graph, devices, latency, rate = problem
    options = PartitionOptions.build(
        transfer_rate_bytes_per_s=rate, node_latency=latency, cost_model="torch" if torch_model else "physical"
    )
    p = build_problem(graph, devices, options)
    try:
        cost_aware.partition(p)
    except InfeasibleError:
        return
    assert p._latencies
    for plan, known in p._latencies.items():
        full = p.cost.evaluate(plan.part, plan.devices_of).latency_s
        assert known == full or (math.isinf(known) and math.isinf(full))
    fresh = build_problem(graph, devices, options)
    for plan, fits in p._fitting.items():
        assert fresh.fits(plan) == fits


def _layer_start_unpruned(problem):
    """layer_start as it was before the cuts were pruned by their bytes."""
    units = _layers.block_units(problem)
    if not units:
        return None
    weight = [sum(problem.cost.total[v] for v in unit) for unit in units]
    devices = problem.devices_by_memory()
    for runs in range(1, min(len(devices), len(units)) + 1):
        cuts = _layers._balanced(weight, runs)
        part = [-1] * len(problem.graph)
        for p, (i, j) in enumerate(zip(cuts, cuts[1:])):
            for unit in units[i:j]:
                for v in unit:
                    part[v] = p
        candidate = Assignment(part, [[devices[p].logical_id] for p in range(runs)])
        if problem.fits(candidate):
            return candidate
    return None


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 12), st.integers(2, 5), st.floats(0.2, 1.2), st.booleans(), st.lists(st.integers(1, 3), max_size=5)
)
def test_pruned_layer_cuts_give_the_same_start(blocks, count, share, torch_model, sizes):
    graph = blocks_graph(blocks, per_block=8)
    memory = max(1, math.ceil(graph.total_size_bytes * share))
    devices = [Device(f"d{i}", memory * (sizes[i] if i < len(sizes) else 1), i) for i in range(count)]
    options = PartitionOptions.build(transfer_rate_bytes_per_s=1e9, cost_model="torch" if torch_model else "physical")
    assert _layers.layer_start(build_problem(graph, devices, options)) == _layer_start_unpruned(
        build_problem(graph, devices, options)
    )


def test_progress_names_each_phase_of_the_optimal_mode_and_its_time_limit():
    pytest.importorskip("ortools")
    graph, devices = _graph_and_devices()
    told: list[Progress] = []
    plan = partitioner.partition(graph, devices, mode="optimal", time_limit_s=2, progress=told.append)
    assert plan.violations(graph) == []
    phases = [p.phase for p in told]
    assert phases[0] == "heuristics" and phases[-1] == "done"
    assert "cp-sat" in phases or "branch and bound" in phases
    bounded = [p for p in told if p.phase in ("cp-sat", "branch and bound")]
    assert all(p.at_most_s is not None and 0 < p.at_most_s <= 2 for p in bounded)
    assert all(f"{p.at_most_s:.1f} s" in p.message for p in bounded)
    assert told[-1].message == plan.provenance.solver


def test_progress_is_exported_by_the_front_door():
    assert api.Progress is Progress


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.integers(1, 5), st.booleans())
def test_boundary_read_per_edge_equals_the_per_node_scan(problem, parts, leave_out):
    from partitioner.accelerator._search import _State

    graph, devices, latency, rate = problem
    p = build_problem(graph, devices, PartitionOptions.build(transfer_rate_bytes_per_s=rate, node_latency=latency))
    ops = list(graph.op_indices)
    part = [-1] * len(graph)
    for i, v in enumerate(ops):
        part[v] = i * parts // len(ops)
    s = _State(p, Assignment(part, [[q % len(devices)] for q in range(parts)]))
    if leave_out:  # an op not placed (yet) is a neighbour in partition -1
        s.part[ops[len(ops) // 2]] = -1
    scan = set()
    for v, q in enumerate(s.part):
        if q >= 0:
            scan.update((v, s.part[w]) for w in p.cost.op_preds[v] + p.cost.op_users[v] if s.part[w] != q)
    assert s.boundary() == sorted(scan)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.booleans())
def test_a_fills_tally_equals_one_built_from_its_plan(problem, pack):
    from partitioner.accelerator._fills import fill_in_order
    from partitioner.cost.incremental import DeviceMemory

    graph, devices, latency, rate = problem
    p = build_problem(graph, devices, PartitionOptions.build(transfer_rate_bytes_per_s=rate, node_latency=latency))
    try:
        a = fill_in_order(p, graph.op_indices, pack=pack)
    except InfeasibleError:
        return
    kept = p.take_tally(a)
    fresh = DeviceMemory(p.cost, a.part, a.devices_of, p.capacity)
    assert kept.bytes == fresh.bytes
    assert {d: {v: n for v, n in c.items() if n} for d, c in kept.count.items()} == {
        d: {v: n for v, n in c.items() if n} for d, c in fresh.count.items()
    }
    assert {d: {v: n for v, n in r.items() if n} for d, r in kept.readers.items()} == {
        d: {v: n for v, n in r.items() if n} for d, r in fresh.readers.items()
    }
    assert p.take_tally(a) is None  # given once


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.sampled_from(["cost_aware", "kl_based"]), st.booleans())
def test_starting_from_a_kept_tally_or_search_state_changes_no_plan(problem, mode, torch_model):
    """Same partitions, devices and latency (to the bit) as searches that build every start
    afresh (nothing handed on)."""
    from partitioner.accelerator._base import Problem

    graph, devices, latency, rate = problem
    kw = dict(node_latency=latency, transfer_rate_bytes_per_s=rate, cost_model="torch" if torch_model else "physical")

    def plan():
        try:
            found = partitioner.partition(graph, devices, mode=mode, **kw)
        except InfeasibleError as exc:
            return str(exc)
        return found.latency_s, sorted(found.node_to_partition().items()), sorted(found.partition_to_devices().items())

    with mock.patch.object(Problem, "take_tally", lambda self, a: None):
        fresh = plan()
    assert plan() == fresh
