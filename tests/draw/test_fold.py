"""Repeated blocks folded: a run of identical blocks is one box with the sums of all of them and the
devices it spans; it opens to its first block, any one of them opens by name, at every depth."""

from __future__ import annotations

import pytest

import partitioner
from partitioner.draw.collapse import (
    DOWNSTREAM_COLOUR,
    FOLD,
    UPSTREAM_COLOUR,
    collapse,
    collapsed_to_dot,
    expand_key,
    lineage,
)
from partitioner.graph import Graph, Node
from partitioner.testing.synthetic import blocks_graph


def _covers_once(graph: Graph, cg) -> None:
    assert sorted(v for g in cg.groups for v in g.members) == sorted(graph.op_indices)


def test_identical_blocks_fold_into_one_box_with_their_sums():
    graph = blocks_graph(12)
    devices = partitioner.parse_devices("4x1GiB")

    def part(name: str) -> int:  # blocks 0-2 on device 0, 3-5 on device 1, ...; the head on 3
        return 3 if name == "head" else int(name[1:].split("_")[0]) // 3 if name.startswith("b") else 0

    mapping = {graph.nodes[v].name: part(graph.nodes[v].name) for v in graph.op_indices}
    plan = partitioner.evaluate_plan(graph, devices, mapping, {p: [p] for p in range(4)})
    cg = collapse(graph, plan)
    assert [g.label for g in cg.groups] == ["embed", "blocks.0-11 (x12)", "head"]
    _covers_once(graph, cg)
    fold = cg.groups[1]
    assert fold.key == f"{FOLD}blocks.0-11" and fold.repeat == 12 and fold.expandable
    assert fold.blocks == tuple(f"blocks.{i}" for i in range(12))
    flat = collapse(graph, plan, fold=False)
    blocks = [g for g in flat.groups if g.key.startswith("blocks.")]
    assert len(blocks) == 12
    for field in ("output_bytes", "param_bytes", "flops", "latency_s"):
        assert getattr(fold, field) == pytest.approx(sum(getattr(g, field) for g in blocks))
    assert fold.devices == ((0, 25 * 3), (1, 25 * 3), (2, 25 * 3), (3, 25 * 3))
    assert [p for p in fold.partitions] == sorted({mapping[graph.nodes[v].name] for v in fold.members})
    assert cg.edges == ((0, 1, graph.output_bytes[1]), (1, 2, graph.output_bytes[graph.op_indices[-2]]))
    dot = collapsed_to_dot(cg, plan, title="t")
    assert "blocks.0-11 (x12)" in dot and "peripheries=3" in dot and "4 devices" in dot
    assert "25 in each of 12 identical blocks" in dot and "click to open blocks.0" in dot


def test_a_fold_opens_its_first_block_and_any_block_opens_by_name():
    graph = blocks_graph(6)
    assert expand_key(f"{FOLD}blocks.0-5") == "blocks.0" and expand_key("blocks.3") == "blocks.3"
    first = collapse(graph, expanded={expand_key(f"{FOLD}blocks.0-5")})
    assert [g.label for g in first.groups] == [
        "embed",
        "blocks.0.attn",
        "blocks.0.mlp",
        "b0_add",
        "blocks.1-5 (x5)",
        "head",
    ]
    _covers_once(graph, first)
    middle = collapse(graph, expanded={"blocks.3"})
    labels = [g.label for g in middle.groups]
    assert "blocks.0-2 (x3)" in labels and "blocks.4-5 (x2)" in labels
    assert any(g.key.startswith("blocks.3.") for g in middle.groups)
    _covers_once(graph, middle)
    last = collapse(graph, expanded={"blocks.4"})
    assert "blocks.0-3 (x4)" in [g.label for g in last.groups] and "blocks.5" in [g.key for g in last.groups]


def test_a_block_of_another_structure_breaks_the_run():
    graph = blocks_graph(5)
    nodes = list(graph.nodes)
    i = graph.index["b2_mlp0"]
    nodes[i] = Node(
        nodes[i].name,
        "call_function",
        "relu",
        nodes[i].inputs,
        nodes[i].module_path,
        output_bytes=nodes[i].output_bytes,
    )  # block 2 runs another op
    changed = Graph(nodes, name="changed")
    labels = [g.label for g in collapse(changed).groups]
    assert labels == ["embed", "blocks.0-1 (x2)", "blocks.2", "blocks.3-4 (x2)", "head"]


def _nested(blocks: int, heads: int) -> Graph:
    """blocks.<b>.heads.<h>: a projection per head, then a sum per block (two levels of repeats)."""
    nodes = [Node("x", "placeholder", "x", output_bytes=64)]
    prev = 0
    for b in range(blocks):
        outs = []
        for h in range(heads):
            nodes.append(
                Node(
                    f"b{b}h{h}", "call_function", "linear", (prev,), f"blocks.{b}.heads.{h}", output_bytes=16, flops=100
                )
            )
            outs.append(len(nodes) - 1)
        nodes.append(Node(f"b{b}sum", "call_function", "cat", tuple(outs), f"blocks.{b}", output_bytes=64, flops=1))
        prev = len(nodes) - 1
    nodes.append(Node("output", "output", "output", (prev,)))
    return Graph(nodes, name="nested")


def test_folds_nest_inside_an_opened_block():
    graph = _nested(3, 4)
    top = collapse(graph)
    assert [g.label for g in top.groups] == ["blocks.0-2 (x3)"]
    opened = collapse(graph, expanded={"blocks.0"})
    labels = [g.label for g in opened.groups]
    assert labels[0] == "blocks.0.heads.0-3 (x4)" and "blocks.1-2 (x2)" in labels
    _covers_once(graph, opened)
    head = collapse(graph, expanded={"blocks.0", "blocks.0.heads.2"})
    assert {"blocks.0.heads.0-1 (x2)", "b0h2", "blocks.0.heads.3"} <= {g.label for g in head.groups}


def test_one_partitions_nodes_fold_alone():
    graph = blocks_graph(8)
    only = [
        v
        for v in graph.op_indices
        if graph.nodes[v].module_path.startswith(("blocks.2.", "blocks.3.", "blocks.4.", "embed"))
        or graph.nodes[v].module_path in ("blocks.2", "blocks.3", "blocks.4")
    ]
    cg = collapse(graph, only=only)
    assert [g.label for g in cg.groups] == ["embed", "blocks.2-4 (x3)"]
    assert sorted(v for g in cg.groups for v in g.members) == sorted(only)


@pytest.mark.slow
def test_an_hf_llama_folds_its_layers_with_the_models_own_weight_count():
    import sample_models

    config = {
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 256,
    }
    module, inputs, kwargs = sample_models.load("hf:llama", config)
    graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
    cg = collapse(graph)
    fold = next(g for g in cg.groups if g.blocks)
    assert fold.label == "model.layers.0-3 (x4)"
    layers = module.model.layers
    assert fold.param_bytes == sum(p.numel() * p.element_size() for p in layers.parameters())
    assert len(cg.groups) < 10


def test_upstream_and_downstream_of_a_box_follow_the_edges():
    graph = blocks_graph(6)
    cg = collapse(graph, expanded={"blocks.2"})
    keys = [g.key for g in cg.groups]
    middle = keys.index("blocks.2.attn")
    up, down = lineage(cg, middle)
    assert {cg.groups[b].label for b in up} == {"embed", "blocks.0-1 (x2)"}
    assert {"head", "blocks.3-5 (x3)", "blocks.2.mlp"} <= {cg.groups[b].label for b in down}
    assert not up & down and middle not in up | down
    dot = collapsed_to_dot(cg, upstream=up, downstream=down)
    assert dot.count(UPSTREAM_COLOUR) == len(up) and dot.count(DOWNSTREAM_COLOUR) == len(down)
