"""No search refuses where a plan exists: the cases the searches refused (the tiny T5 of the
device-map test, a DLRM-like model under torch's cost model, tiny fuzzed graphs), and properties
over random graphs with tight memory, one with a placement planted so that a plan is known."""

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_problems import independent_memory

import partitioner
from partitioner import Device, InfeasibleError
from partitioner.accelerator._base import node_alone_bytes
from partitioner.accelerator._repair import _Tally, repair_fit, runs
from partitioner.accelerator.api import build_problem
from partitioner.options import PartitionOptions
from partitioner.testing.reference import reference_partition
from partitioner.testing.synthetic import synthetic_graph

SEARCHES = ("largest_first", "cost_aware", "kl_based")


def _check_fits(graph, devices, plan):
    """The plan is valid, and each device holds what the union rule (written here) says fits."""
    assert plan.violations(graph) == []
    on = {}
    for p in plan.partitions:
        for d in p.device_ids:
            on.setdefault(d, []).extend(p.node_names)
    for d in devices:
        assert independent_memory(graph, on.get(d.logical_id, [])) <= d.memory_bytes, d.name


def _problem(graph, devices, cost_model):
    return build_problem(graph, devices, PartitionOptions.build(cost_model=cost_model))


def _a_placement_fits(graph, devices, cost_model) -> bool:
    """Exhaustive oracle: some node -> device map, cut into runs, fits every device."""
    problem = _problem(graph, devices, cost_model)
    ops = list(graph.op_indices)
    where = [-1] * len(graph)
    for choice in itertools.product([d.logical_id for d in devices], repeat=len(ops)):
        for v, d in zip(ops, choice):
            where[v] = d
        if problem.fits(runs(problem, where)):
            return True
    return False


@pytest.mark.slow
def test_every_search_places_the_tiny_t5_that_the_exact_solver_places():
    """Two devices of 60 % of the model: the fills put the encoder's embedding on one device and
    the tied output projection, which reads the same 250 KiB weight, on the other, and every
    search refused ("ran out of memory at node 'linear_16'") where `optimal` found a plan."""
    pytest.importorskip("transformers")
    import sample_models

    config = {
        "num_layers": 1,
        "num_decoder_layers": 1,
        "d_model": 64,
        "d_ff": 128,
        "num_heads": 4,
        "d_kv": 16,
        "vocab_size": 1000,
    }
    model, args, kwargs = sample_models.load("hf:t5", config)
    graph = partitioner.trace(model, args, example_kwargs=kwargs)
    for share in (0.6, 0.52):
        devices = partitioner.parse_devices(f"2x{int(graph.total_size_bytes * share)}B")
        with pytest.raises(InfeasibleError):  # torch's fill still refuses: the case is a hard one
            partitioner.partition(graph, devices, mode="size_based")
        for mode in SEARCHES:
            _check_fits(graph, devices, partitioner.partition(graph, devices, mode=mode))


class _Recommender(torch.nn.Module):
    """DLRM-like: a bottom MLP, six EmbeddingBag tables of unequal height, each looked up with its
    own ids picked just before it (so each lookup is a stretch of its own), a top MLP."""

    def __init__(self, rows):
        super().__init__()
        self.bottom = torch.nn.Sequential(torch.nn.Linear(13, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
        self.tables = torch.nn.ModuleList(torch.nn.EmbeddingBag(r, 32, mode="sum") for r in rows)
        self.top = torch.nn.Sequential(
            torch.nn.Linear(32 * (len(rows) + 1), 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
        )

    def forward(self, x, ids, offsets):
        pooled = [self.bottom(x)] + [table(ids[i], offsets[i]) for i, table in enumerate(self.tables)]
        return torch.sigmoid(self.top(torch.cat(pooled, 1)))


@pytest.mark.parametrize("cost_model", ["torch", "physical"])
def test_sparse_nn_places_a_dlrm_like_model_where_torchs_sparse_nn_does(cost_model):
    """Four devices of 1.2x a quarter of the model: the tables spread stretch by stretch left no
    device for the last large table ("the most room left on a device is 1.02 MiB"); torch's own
    sparse_nn packs them in node order and places the model."""
    rows = [7500, 15000, 12989, 10185, 5700, 15000]
    torch.manual_seed(0)
    inputs = (torch.randn(32, 13), torch.randint(0, min(rows), (6, 128)), torch.arange(0, 128, 4).repeat(6, 1))
    graph = partitioner.trace(_Recommender(rows).eval(), inputs)
    memory = int(graph.total_size_bytes / 4 * 1.2)
    devices = [Device(f"d{i}", memory, i) for i in range(4)]
    ref = reference_partition(graph, devices, "sparse_nn", cost_model=cost_model)
    assert ref.plan.violations(graph) == []
    ours = partitioner.partition(graph, devices, mode="sparse_nn", cost_model=cost_model)
    assert ours.violations(graph) == []
    assert ours.latency_s <= ref.plan.latency_s * (1 + 1e-9)
    tables = {n for p in ours.partitions for n in p.node_names if n.startswith("tables_")}
    assert len(tables) == 6 and all(
        len(p.device_ids) == 1 for p in ours.partitions if any(n.startswith("tables_") for n in p.node_names)
    )
    for mode in SEARCHES:  # where sparse_nn places it, the searches do too (none refused it)
        plan = partitioner.partition(graph, devices, mode=mode, cost_model=cost_model)
        assert plan.violations(graph) == [], mode


# Tiny graphs (edges between op indices, output bytes, device memories, transfer rate) on which
# every search refused under torch's cost model although a placement fits (found by a fuzz of
# 3,000 instances; none left after the fix in 3,000 more).
FUZZED = [
    ([(0, 1), (0, 2), (1, 3), (0, 4), (2, 5), (4, 5)], [13, 64, 64, 64, 64, 31], [159, 181], 1.0),
    (
        [(0, 1), (1, 2), (0, 3), (1, 3), (0, 4), (3, 4), (0, 5), (2, 5), (1, 6), (3, 6), (4, 6)],
        [7, 22, 64, 64, 64, 48, 1],
        [151, 164],
        16.0,
    ),
    (
        [(0, 1), (1, 2), (0, 3), (1, 3), (0, 4), (3, 4), (1, 5), (2, 5), (1, 6), (3, 6), (5, 6)],
        [3, 23, 44, 44, 37, 60, 64],
        [214, 80, 210],
        1.0,
    ),
    ([(0, 1), (0, 2), (0, 3), (2, 3), (0, 4), (3, 4)], [35, 64, 64, 33, 4], [132, 49, 150], None),
    ([(0, 1), (0, 2), (0, 3), (0, 4), (1, 4), (2, 4)], [5, 9, 1, 1, 6], [21, 15, 16], None),
    ([(0, 1), (0, 2), (0, 3), (2, 3), (2, 5)], [47, 64, 64, 64, 64, 64], [175, 272, 91], 16.0),
    ([(0, 1), (0, 3)], [64, 64, 5, 11, 64], [128, 73, 105], 1.0),
    ([(0, 2), (0, 3), (1, 3), (1, 4), (3, 4), (2, 5), (2, 6)], [58, 64, 64, 64, 8, 3, 11], [186, 237, 232], None),
    ([(0, 2), (2, 3), (2, 4), (2, 5), (3, 5)], [5, 64, 28, 43, 64, 8], [149, 146], 16.0),
]


@pytest.mark.parametrize("edges,sizes,memory,rate", FUZZED)
def test_every_search_places_the_fuzzed_graphs_they_refused(edges, sizes, memory, rate):
    graph = synthetic_graph(edges, sizes)
    devices = [Device(f"d{i}", m, i) for i, m in enumerate(memory)]
    assert _a_placement_fits(graph, devices, "torch")
    for mode in SEARCHES:
        plan = partitioner.partition(graph, devices, mode=mode, cost_model="torch", transfer_rate_bytes_per_s=rate)
        assert plan.violations(graph) == [], mode


@st.composite
def tight_problems(draw, max_ops=7):
    n = draw(st.integers(2, max_ops))
    edges = sorted({(a, b) for b in range(1, n) for a in draw(st.lists(st.integers(max(0, b - 5), b - 1), max_size=3))})
    sizes = draw(st.lists(st.one_of(st.integers(1, 8), st.integers(1, 64), st.just(64)), min_size=n, max_size=n))
    graph = synthetic_graph(edges, sizes)
    need = max(node_alone_bytes(graph, v) for v in graph.op_indices)
    shares = draw(st.lists(st.floats(0.2, 0.9), min_size=2, max_size=3))
    devices = [
        Device(f"d{i}", max(need if i == 0 else 1, int(graph.total_size_bytes * s)), i) for i, s in enumerate(shares)
    ]
    return graph, devices


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tight_problems(), st.sampled_from(["physical", "torch"]), st.sampled_from([None, 1.0, 16.0]))
def test_no_search_refuses_where_a_placement_fits_or_any_mode_finds_a_plan(problem, cost_model, rate):
    """Unequal devices of 20 to 90 % of the model: wherever some node -> device map fits (every
    map, cut into runs, is a plan) or any mode finds a plan, every search finds one."""
    graph, devices = problem
    found = {}
    for mode in ("size_based", *SEARCHES):
        try:
            found[mode] = partitioner.partition(
                graph, devices, mode=mode, cost_model=cost_model, transfer_rate_bytes_per_s=rate
            )
        except InfeasibleError:
            continue
        assert found[mode].violations(graph) == [], mode
    if found or _a_placement_fits(graph, devices, cost_model):
        assert set(SEARCHES) <= set(found), (sorted(found), cost_model)


@st.composite
def planted_problems(draw):
    """Graphs of 13 to 30 ops (beyond the exhaustive search's 12) with a random node -> device map
    planted: each device gets the memory the map needs there, times 1 to 1.05."""
    n = draw(st.integers(13, 30))
    edges = sorted({(a, b) for b in range(1, n) for a in draw(st.lists(st.integers(max(0, b - 8), b - 1), max_size=3))})
    sizes = draw(st.lists(st.one_of(st.integers(1, 8), st.integers(1, 64), st.just(200)), min_size=n, max_size=n))
    graph = synthetic_graph(edges, sizes)
    k = draw(st.integers(2, 4))
    cost_model = draw(st.sampled_from(["physical", "torch"]))
    where = [-1] * len(graph)
    for v in graph.op_indices:
        where[v] = draw(st.integers(0, k - 1))
    roomy = _problem(graph, [Device(f"d{i}", 2**40, i) for i in range(k)], cost_model)
    planted = runs(roomy, where)
    members = [[v for v in graph.op_indices if planted.part[v] == p] for p in range(len(planted.devices_of))]
    used = roomy.cost.device_memory(members, planted.devices_of)
    slack = draw(st.floats(1.0, 1.05))
    return graph, [Device(f"d{i}", max(1, int(used.get(i, 0) * slack)), i) for i in range(k)], cost_model


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planted_problems())
def test_every_search_finds_a_plan_where_one_is_planted(problem):
    """The searches start from the fills of ``largest_first`` (:func:`_fills.starts`), so where
    it finds a plan they do too; they are run under the physical model (under torch's, whose
    searches evaluate every try in full, the fill alone)."""
    graph, devices, cost_model = problem
    for mode in SEARCHES if cost_model == "physical" else SEARCHES[:1]:
        plan = partitioner.partition(graph, devices, mode=mode, cost_model=cost_model)
        assert plan.violations(graph) == [], mode


@settings(max_examples=60, deadline=None)
@given(tight_problems(max_ops=12), st.sampled_from(["physical", "torch"]), st.data())
def test_the_repair_tally_counts_as_the_plans_memory_rule(problem, cost_model, data):
    """For any map cut into runs, the repair's tally gives each device what the cost model's
    ``device_memory`` gives under the physical model; under torch's, its two passes bracket it
    (placeholders and attributes once per device below, once per reader above)."""
    graph, devices = problem
    prob = _problem(graph, devices, cost_model)
    ids = [d.logical_id for d in devices]
    where = [-1] * len(graph)
    low, high = _Tally(prob), _Tally(prob, inputs_per_reader=True)
    for v in graph.op_indices:
        where[v] = data.draw(st.sampled_from(ids))
        low.place(v, where[v], 1)
        high.place(v, where[v], 1)
    a = runs(prob, where)
    members = [[v for v in graph.op_indices if a.part[v] == p] for p in range(len(a.devices_of))]
    used = prob.cost.device_memory(members, a.devices_of)
    for d in ids:
        if cost_model == "physical":
            assert low.bytes[d] == used.get(d, 0)
        else:
            assert low.bytes[d] <= used.get(d, 0) <= high.bytes[d]


def test_the_repair_gathers_the_readers_of_a_shared_weight():
    """The first and the last of 14 ops read one 100-byte weight (an attribute, as a tied
    embedding is): two devices of 140 bytes hold the model only with both readers on one device,
    and the contiguous fill, which fills the first device and opens the second, splits them."""
    from partitioner.accelerator._fills import fill_in_order
    from partitioner.graph import Graph, Node

    nodes = [Node("x", "placeholder", "x", output_bytes=4), Node("w", "get_attr", "w", output_bytes=100)]
    nodes.append(Node("embed", "call_function", "f", (0, 1), output_bytes=10))
    for i in range(12):
        nodes.append(Node(f"mid{i}", "call_function", "f", (len(nodes) - 1,), output_bytes=10))
    nodes.append(Node("head", "call_function", "f", (len(nodes) - 1, 1), output_bytes=10))
    nodes.append(Node("out", "output", "output", (len(nodes) - 1,)))
    graph = Graph(nodes)
    devices = [Device("a", 140, 0), Device("b", 140, 1)]
    with pytest.raises(InfeasibleError, match="ran out of memory at node 'head'"):
        fill_in_order(_problem(graph, devices, "physical"), graph.op_indices)
    found = repair_fit(_problem(graph, devices, "physical"))
    assert found is not None
    assert found.devices_of[found.part[graph.index["embed"]]] == found.devices_of[found.part[graph.index["head"]]]
    for mode in SEARCHES:
        _check_fits(graph, devices, partitioner.partition(graph, devices, mode=mode))
