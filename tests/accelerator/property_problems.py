"""Random problems and oracles for the property tests (no torch)."""

import math

import networkx as nx
from hypothesis import strategies as st

import partitioner
from partitioner import Device
from partitioner.testing.synthetic import synthetic_graph

MODES = ["size_based", "cost_aware", "kl_based"]


@st.composite
def problems(draw):
    n = draw(st.integers(2, 30))
    edges = set()
    for b in range(1, n):
        for a in draw(st.lists(st.integers(max(0, b - 6), b - 1), max_size=3)):
            edges.add((a, b))
    sizes = draw(st.lists(st.integers(1, 64), min_size=n, max_size=n))
    graph = synthetic_graph(sorted(edges), sizes)
    latency = {name: (draw(st.floats(0, 10)), draw(st.floats(0, 10))) for name in graph.op_names}
    k = draw(st.integers(2, 5))
    need = max(partitioner.accelerator._base.node_alone_bytes(graph, v) for v in graph.op_indices)
    memory = max(need, math.ceil(graph.total_size_bytes * draw(st.floats(1.2, 2.0)) / k))
    devices = [Device(f"d{i}", memory, i) for i in range(k)]
    rate = draw(st.sampled_from([None, 1.0, 16.0]))
    return graph, devices, latency, rate


@st.composite
def tiny_graphs(draw, max_ops: int):
    """Torch-free graphs of 2 to ``max_ops`` ops, each fed by at most two earlier ones, outputs of 1
    to 40 bytes: small enough for a brute-force oracle."""
    n = draw(st.integers(2, max_ops))
    edges = sorted({(a, b) for b in range(1, n) for a in draw(st.lists(st.integers(0, b - 1), max_size=2))})
    sizes = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    return synthetic_graph(edges, sizes)


def independent_memory(graph, names):
    inside = {graph.index[n] for n in names}
    outside = {u for v in inside for u in graph.preds[v] if u not in inside}
    return sum(graph.total_bytes[v] for v in inside) + sum(graph.output_bytes[u] for u in outside)


def oracle_latency(plan):
    """Plan latency by networkx (torch's model): each partition an edge weighted by its latency."""
    g = nx.DiGraph()
    for p in plan.partitions:
        g.add_edge(("in", p.id), ("out", p.id), weight=p.latency_s)
    for e in plan.edges:
        g.add_edge(("out", e.src), ("in", e.dst), weight=e.latency_s)
    return nx.dag_longest_path_length(g, weight="weight", default_weight=0)


def list_schedule(plan):
    """Independent simulation of the physical model: partitions in networkx's lexicographic
    topological order; each waits for its inputs and for every one of its devices to be free."""
    g = nx.DiGraph()
    g.add_nodes_from(p.id for p in plan.partitions)
    g.add_edges_from((e.src, e.dst) for e in plan.edges)
    by_id = {p.id: p for p in plan.partitions}
    transfer = {(e.src, e.dst): e.latency_s for e in plan.edges}
    free, times = {}, {}
    for p in nx.lexicographical_topological_sort(g):
        ready = max([times[q][1] + transfer[(q, p)] for q in g.predecessors(p)], default=0.0)
        start = max([ready] + [free.get(d, 0.0) for d in by_id[p].device_ids])
        times[p] = (start, start + by_id[p].latency_s)
        for d in by_id[p].device_ids:
            free[d] = times[p][1]
    return times


def brute_force_partition_latency(graph, latency, names):
    """Longest path inside one partition by enumerating every path (exponential: tiny only)."""
    inside = [graph.index[n] for n in names]
    g = nx.DiGraph()
    g.add_nodes_from(inside)
    g.add_edges_from((u, v) for v in inside for u in graph.preds[v] if u in g)
    cost = {graph.index[n]: max(latency[n]) for n in names}
    best = 0.0
    sources = [v for v in g if g.in_degree(v) == 0]
    sinks = [v for v in g if g.out_degree(v) == 0]
    for s in sources:
        for t in sinks:
            paths = [[s]] if s == t else nx.all_simple_paths(g, s, t)
            for path in paths:
                best = max(best, sum(cost[v] for v in path))
    return best


def check_forward_starts(prob, found):
    """Starts a search may take: every op node placed, within memory, acyclic, no two alike, and
    every partition edge going forward (a node never waits on a later run)."""
    graph = prob.graph
    for i, a in enumerate(found):
        assert prob.fits(a)
        assert all(a.part[v] >= 0 for v in graph.op_indices)
        assert math.isfinite(prob.latency(a))  # acyclic
        assert a not in found[:i]
        assert all(a.part[u] <= a.part[v] for v in graph.op_indices for u in graph.preds[v] if a.part[u] >= 0)
