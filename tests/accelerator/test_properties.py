"""Hypothesis properties over random DAGs (no torch needed) and oracle checks of the cost model."""

import math

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_problems import (
    MODES,
    brute_force_partition_latency,
    independent_memory,
    list_schedule,
    oracle_latency,
    problems,
)

import partitioner
from partitioner import Device, InfeasibleError, Plan
from partitioner.options import PartitionOptions


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.sampled_from(MODES))
def test_plans_are_valid(problem, mode):
    graph, devices, latency, rate = problem
    try:
        plan = partitioner.partition(
            graph, devices, mode=mode, node_latency=latency, transfer_rate_bytes_per_s=rate, force_partition=True
        )
    except InfeasibleError as exc:
        # Greedy fills can fragment tight memory; the error must still say what to do.
        assert "add a device or memory" in str(exc)
        return
    # Every op node in exactly one partition.
    names = [n for p in plan.partitions for n in p.node_names]
    assert sorted(names) == sorted(graph.op_names)
    # Memory within capacity, recomputed independently.
    for d in devices:
        on_device = [n for p in plan.partitions if d.logical_id in p.device_ids for n in p.node_names]
        assert independent_memory(graph, on_device) <= d.memory_bytes
    for p in plan.partitions:
        assert p.memory_bytes == independent_memory(graph, p.node_names)
    # Acyclic partition DAG, and edges match the node-level data flow.
    dag = nx.DiGraph([(e.src, e.dst) for e in plan.edges])
    assert nx.is_directed_acyclic_graph(dag)
    where = plan.node_to_partition()
    flows = {
        (where[graph.nodes[u].name], where[n])
        for n in graph.op_names
        for u in graph.preds[graph.index[n]]
        if graph.nodes[u].is_op
    } - {(p, p) for p in where.values()}
    assert flows == {(e.src, e.dst) for e in plan.edges}
    assert plan.violations(graph) == []
    # Latency equals the networkx oracle; JSON round trip is exact.
    # The physical model: a device runs one partition at a time, so no two partitions on one
    # device overlap, and the latency is the finish of an independent list schedule.
    times = list_schedule(plan)
    assert math.isclose(plan.latency_s, max(f for _, f in times.values()), rel_tol=1e-9, abs_tol=1e-9)
    schedule = plan.schedule()
    for p in plan.partitions:
        assert math.isclose(schedule[p.id][0], times[p.id][0], rel_tol=1e-9, abs_tol=1e-12)
    for d in {d for p in plan.partitions for d in p.device_ids}:
        spans = sorted(schedule[p.id] for p in plan.partitions if d in p.device_ids)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(spans, spans[1:])), (d, spans)
    # The lower bound holds for every plan, and is the heaviest path of nodes (networkx).
    assert plan.lower_bound_s <= plan.latency_s + 1e-9
    g = nx.DiGraph()
    g.add_nodes_from(range(len(graph)))
    g.add_edges_from((u, v) for v in range(len(graph)) for u in graph.preds[v])
    weight = {graph.index[n]: max(latency[n]) for n in latency}
    heaviest = max(
        (sum(weight.get(v, 0.0) for v in path) for path in [nx.dag_longest_path(g, weight=None)]), default=0.0
    )
    assert plan.lower_bound_s >= heaviest - 1e-9
    # Never faster than the same partitions without the device rule (torch's critical path).
    assert plan.latency_s >= oracle_latency(plan) - 1e-9
    assert Plan.from_json(plan.to_json()) == plan


@settings(max_examples=40, deadline=None)
@given(problems())
def test_partition_latency_matches_brute_force(problem):
    graph, devices, latency, rate = problem
    mapping = {name: i % 2 for i, name in enumerate(graph.op_names)}  # an arbitrary (maybe cyclic) split
    plan = partitioner.evaluate_plan(
        graph, devices, mapping, {0: [0], 1: [1]}, transfer_rate_bytes_per_s=rate, node_latency=latency
    )
    for p in plan.partitions:
        assert math.isclose(
            p.latency_s, brute_force_partition_latency(graph, latency, p.node_names), rel_tol=1e-9, abs_tol=1e-9
        )
    cyclic = not nx.is_directed_acyclic_graph(nx.DiGraph([(e.src, e.dst) for e in plan.edges]))
    assert cyclic == math.isinf(plan.latency_s)
    assert cyclic == any("cycle" in v.message for v in plan.violations(graph))


@settings(max_examples=30, deadline=None)
@given(problems(), st.sampled_from(MODES))
def test_invariant_under_renaming(problem, mode):
    graph, devices, latency, rate = problem
    renamed_nodes = [partitioner.Node(**{**nd.__dict__, "name": "n_" + nd.name}) for nd in graph.nodes]
    renamed = partitioner.Graph(renamed_nodes, name="renamed")
    kw = dict(mode=mode, transfer_rate_bytes_per_s=rate, force_partition=True)
    try:
        a = partitioner.partition(graph, devices, node_latency=latency, **kw)
    except InfeasibleError:
        return
    b = partitioner.partition(renamed, devices, node_latency={"n_" + k: v for k, v in latency.items()}, **kw)
    assert b.latency_s == a.latency_s
    assert [tuple("n_" + n for n in p.node_names) for p in a.partitions] == [p.node_names for p in b.partitions]


@settings(max_examples=40, deadline=None)
@given(problems(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=25))
def test_incremental_device_memory_equals_full_recompute(problem, moves):
    """The local search tallies device memory move by move; after any sequence of moves (and
    of tentative checks, which must leave no trace and agree with a full recompute) it equals a
    full recompute. Devices are tight here, so both answers of a check occur."""
    from partitioner.accelerator._base import Assignment
    from partitioner.accelerator._search import _State
    from partitioner.accelerator.api import build_problem

    graph, devices, latency, rate = problem
    devices = [Device(d.name, max(1, d.memory_bytes * 2 // 3), d.logical_id) for d in devices]
    ops = list(graph.op_indices)
    k = len(devices)
    part = [-1] * len(graph)
    for i, v in enumerate(ops):
        part[v] = i % k
    state = _State(
        build_problem(graph, devices, PartitionOptions.build(transfer_rate_bytes_per_s=rate, node_latency=latency)),
        Assignment(part, [[d] for d in range(k)]),
    )
    for a, b in moves:
        v, q = ops[a % len(ops)], b % k
        if q == state.part[v]:
            continue
        w = ops[b % len(ops)]
        swap = [(v, q), (w, state.part[v])] if state.part[w] == q and w != v else [(v, q)]
        for tried in ([(v, q)], swap):  # a tentative check agrees with a recompute and undoes itself
            moved = dict(tried)
            members = [[u for u in range(len(graph)) if moved.get(u, state.part[u]) == p] for p in range(k)]
            used = state.cost.device_memory(members, state.devices_of)
            touched = {d for u, p in tried for d in (*state.devices_of[p], *state.devices_of[state.part[u]])}
            assert state.fits(tried) == all(used.get(d, 0) <= state.capacity[d] for d in touched)
        old, new = state.devices_of[state.part[v]], state.devices_of[q]
        for d in set(old) ^ set(new):  # a single move is priced device by device, without applying it
            change = state.memory.added(v, d) if d in new else -state.memory.removed(v, d)
            moved = [[u for u in range(len(graph)) if (q if u == v else state.part[u]) == p] for p in range(k)]
            assert state.memory.bytes[d] + change == state.cost.device_memory(moved, state.devices_of).get(d, 0)
        state.apply([(v, q)])
        members = [[w for w in range(len(graph)) if state.part[w] == p] for p in range(k)]
        expected = state.cost.device_memory(members, state.devices_of)
        assert {d: b for d, b in state.memory.bytes.items() if b} == {d: b for d, b in expected.items() if b}


@settings(max_examples=60, deadline=None)
@given(
    problems(),
    st.integers(1, 6),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.booleans()), max_size=30),
)
def test_incremental_evaluation_equals_full_re_evaluation_after_every_move(problem, parts, moves):
    """The searches' incremental cost model (a move updates two partitions and the edges at the
    node) gives the latency, critical path, edges and each partition's latency of a full
    evaluation after every move, every undone trial and every device change."""
    from partitioner.accelerator.api import build_problem
    from partitioner.cost.incremental import IncrementalCost

    graph, devices, latency, rate = problem
    cost = build_problem(
        graph, devices, PartitionOptions.build(transfer_rate_bytes_per_s=rate, node_latency=latency)
    ).cost
    ops = list(graph.op_indices)
    part = [-1] * len(graph)
    for i, v in enumerate(ops):
        part[v] = i * parts // len(ops)
    # Every third partition copied onto two devices (a transfer is free only onto a device
    # that holds a copy of the source).
    devices_of = [
        [p % len(devices)] if p % 3 else sorted({p % len(devices), (p + 1) % len(devices)}) for p in range(parts)
    ]
    inc = IncrementalCost(cost, part, devices_of)
    for a, b, trial in moves:
        v, q = ops[a % len(ops)], b % parts
        if b % 7 == 0:  # a partition placed on another device, or copied onto two
            devices_of[q] = [a % len(devices)] if a % 2 else sorted({a % len(devices), b % len(devices)})
        elif trial:  # a tried swap leaves nothing behind and scores as if applied
            before = list(part)
            swap = [(v, q), (ops[b % len(ops)], a % parts)]
            tried = inc.trial(swap)
            assert part == before
            inc.apply(swap)
            assert cost.evaluate(part, devices_of).latency_s == tried[0] or math.isinf(tried[0])
            inc.apply([(w, p) for w, p in enumerate(before) if p >= 0 and part[w] != p])
        else:
            inc.move(v, q)
            if a % 3:  # a move not scheduled before the next one
                continue
        full = cost.evaluate(part, devices_of)
        total, path = inc.schedule()
        assert total == full.latency_s or (math.isinf(total) and math.isinf(full.latency_s))
        assert inc.edges == full.edges
        if full.order is not None:
            assert path == full.critical_path
            assert inc.inner == [t for t, _, _ in full.latency]


@settings(max_examples=40, deadline=None)
@given(problems())
def test_moves_off_the_critical_path_never_shorten_it(problem):
    """The search skips moves that touch no partition on the critical path; check that no such
    move could have lowered the latency."""
    from partitioner.accelerator._base import Assignment
    from partitioner.accelerator._search import _State
    from partitioner.accelerator.api import build_problem

    graph, devices, latency, rate = problem
    k = len(devices)
    part = [-1] * len(graph)
    for i, v in enumerate(graph.op_indices):
        part[v] = (i * 7 // 3) % k
    state = _State(
        build_problem(graph, devices, PartitionOptions.build(transfer_rate_bytes_per_s=rate, node_latency=latency)),
        Assignment(part, [[d] for d in range(k)]),
    )
    if not math.isfinite(state.latency):
        return
    for v in graph.op_indices:
        for q in range(k):
            if q != state.part[v] and not state.touches_critical([(v, q)]):
                p = state.part[v]
                state.part[v] = q
                assert state.cost.evaluate(state.part, state.devices_of).latency_s >= state.latency - 1e-9
                state.part[v] = p
