"""Layer-aligned starts: the cut between whole repeated blocks that Accelerate's device maps make."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import partitioner
from partitioner import Device
from partitioner.accelerator._layers import _balanced, block_units, layer_start
from partitioner.accelerator.api import build_problem
from partitioner.cost.model import NEAR_TIE
from partitioner.graph import Graph, Node
from partitioner.options import PartitionOptions
from partitioner.testing.synthetic import blocks_graph, synthetic_graph


def _problem(graph, count, share, rate=1e9):
    memory = math.ceil(graph.total_size_bytes * share)
    devices = [Device(f"d{i}", memory, i) for i in range(count)]
    return build_problem(graph, devices, PartitionOptions.build(transfer_rate_bytes_per_s=rate)), devices


def _block(graph, v):
    path = graph.nodes[v].module_path
    return int(path.split(".")[1]) if path.startswith("blocks.") else None


def test_blocks_are_units_with_the_embedding_first_and_the_head_last():
    graph = blocks_graph(6, per_block=25)
    problem, _ = _problem(graph, 3, 0.4)
    units = block_units(problem)
    assert len(units) == 6
    assert [v for unit in units for v in unit] == list(graph.op_indices)
    assert graph.nodes[units[0][0]].name == "embed" and graph.nodes[units[-1][-1]].name == "head"
    for i, unit in enumerate(units):
        assert {_block(graph, v) for v in unit} - {None} == {i}


def test_the_layer_aligned_start_cuts_only_between_blocks_with_the_fewest_runs_that_fit():
    graph = blocks_graph(6, per_block=25)
    problem, _ = _problem(graph, 4, 0.4)
    start = layer_start(problem)
    assert start is not None and problem.fits(start)
    runs = {start.part[v] for v in graph.op_indices}
    assert len(runs) == 3  # two runs hold at most 80 % of the model: three are the fewest that fit
    for b in range(6):  # every block whole on one partition
        assert len({start.part[v] for v in graph.op_indices if _block(graph, v) == b}) == 1
    ones = [sum(1 for v in graph.op_indices if start.part[v] == p) for p in sorted(runs)]
    assert max(ones) - min(ones) <= 25 + 2  # balanced within a block (plus the embedding or head)


def test_graphs_without_repeated_blocks_get_no_layer_start():
    graph = synthetic_graph([(0, 1), (1, 2)], [8, 8, 8])
    problem, _ = _problem(graph, 2, 0.6)
    assert block_units(problem) == [] and layer_start(problem) is None


def test_the_searches_are_never_slower_than_the_cut_accelerate_makes():
    """On a decoder-shaped graph where transfers cost, kl_based and cost_aware start from the
    layer-aligned cut among the others, so they end no slower than it (the near-tie rule aside)."""
    graph = blocks_graph(12, per_block=25)
    for count, share in ((2, 0.6), (3, 0.4), (4, 0.3)):
        problem, devices = _problem(graph, count, share, rate=1e6)
        start = layer_start(problem)
        assert start is not None
        for mode in ("cost_aware", "kl_based"):
            plan = partitioner.partition(graph, devices, mode=mode, transfer_rate_bytes_per_s=1e6)
            assert plan.violations(graph) == []
            assert plan.latency_s <= problem.latency(start) * (1 + NEAR_TIE), (mode, count)


@pytest.mark.slow
def test_kl_based_ends_no_slower_than_the_layer_aligned_cut_on_a_tiny_decoder():
    """A 10-layer Llama on 4 devices at 30 % of the model each: the greedy fills cut inside
    blocks, and without the layer-aligned start kl_based ended 0.46 % slower than that cut."""
    pytest.importorskip("transformers")
    import sample_models

    config = {
        "num_hidden_layers": 10,
        "hidden_size": 64,
        "intermediate_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 64,
    }
    model, args, kwargs = sample_models.load("hf:llama", config)
    graph = partitioner.trace(model, args, example_kwargs=kwargs)
    devices = partitioner.parse_devices(f"4x{int(graph.total_size_bytes * 0.3)}B")
    problem = build_problem(graph, devices, PartitionOptions())
    start = layer_start(problem)
    assert start is not None and len(block_units(problem)) == 10
    plan = partitioner.partition(graph, devices, mode="kl_based")
    assert plan.violations(graph) == []
    assert plan.latency_s <= problem.latency(start) * (1 + 1e-9)


def _textbook_cuts(weight, runs):
    """The O(B^2 runs) dynamic programme the bisection replaced (the earliest best cut per
    state): the cuts must be the same to the index."""
    n = len(weight)
    prefix = [0]
    for w in weight:
        prefix.append(prefix[-1] + w)
    best = [[math.inf] * (n + 1) for _ in range(runs + 1)]
    cut = [[0] * (n + 1) for _ in range(runs + 1)]
    best[0][0] = 0
    for k in range(1, runs + 1):
        for j in range(k, n + 1):
            for i in range(k - 1, j):
                value = max(best[k - 1][i], prefix[j] - prefix[i])
                if value < best[k][j]:
                    best[k][j], cut[k][j] = value, i
    cuts = [n]
    for k in range(runs, 0, -1):
        cuts.append(cut[k][cuts[-1]])
    return cuts[::-1]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 3), st.integers(0, 1000)), min_size=1, max_size=9), st.data())
def test_balanced_cuts_are_the_best_min_max_split(weight, data):
    """Against every way to cut the blocks into ``runs`` non-empty runs: the largest run is the
    smallest possible, and the cuts are those of the textbook dynamic programme."""
    runs = data.draw(st.integers(1, len(weight)))
    cuts = _balanced(weight, runs)
    assert cuts[0] == 0 and cuts[-1] == len(weight) and len(cuts) == runs + 1
    assert all(a < b for a, b in zip(cuts, cuts[1:]))
    largest = max(sum(weight[a:b]) for a, b in zip(cuts, cuts[1:]))
    brute = min(
        max(sum(weight[a:b]) for a, b in zip((0, *inner), (*inner, len(weight))))
        for inner in itertools.combinations(range(1, len(weight)), runs - 1)
    )
    assert largest == brute
    assert cuts == _textbook_cuts(weight, runs)


def _residual_chain(layers):
    """A torch-free residual chain x + fc(x), each layer a block ``layers.<i>``."""
    nodes = [Node("x", "placeholder", "x", output_bytes=256)]
    prev = 0
    for i in range(layers):
        nodes.append(
            Node(
                f"fc{i}",
                "call_module",
                f"layers.{i}.fc",
                (prev,),
                f"layers.{i}.fc",
                output_bytes=256,
                param_bytes=1088,
                flops=2048,
            )
        )
        nodes.append(Node(f"add{i}", "call_function", "add", (prev, len(nodes) - 1), f"layers.{i}", output_bytes=256))
        prev = len(nodes) - 1
    nodes.append(Node("output", "output", "output", (prev,)))
    return Graph(nodes, name="residual_chain")


def test_a_residual_chain_of_10000_nodes_is_partitioned_by_every_mode():
    """Each of its 5,000 layers is a block: the layer-aligned start's quadratic cut made
    cost_aware take 16 s here (and 5 s of its 5.3 s on a traced one of 8,000 nodes). Every mode
    plans it validly; their time is the benchmark's (bench/bench_modes.py table 4 times residual
    chains of 10,000 and 50,000 nodes against 1 s and 2 s), not a test's."""
    graph = _residual_chain(5000)
    assert len(graph) > 10_000
    devices = [Device(f"d{i}", int(graph.total_size_bytes / 4 * 1.3), i) for i in range(4)]
    problem, _ = _problem(graph, 4, 0.325)
    assert len(block_units(problem)) == 5000
    for mode in ("size_based", "largest_first", "cost_aware", "kl_based"):
        plan = partitioner.partition(graph, devices, mode=mode, transfer_rate_bytes_per_s=1e9)
        assert plan.violations(graph) == [], mode
