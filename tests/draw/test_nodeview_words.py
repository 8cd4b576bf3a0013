"""The node view's title counts in words: one node, two nodes."""

from __future__ import annotations

import partitioner
from partitioner.draw.nodeview import partition_to_dot
from partitioner.testing.synthetic import synthetic_graph


def test_a_partition_of_one_node_is_titled_in_the_singular():
    graph = synthetic_graph([(0, 1), (1, 2)], [64, 64, 64])
    plan = partitioner.partition(
        graph,
        partitioner.parse_devices("2x1GiB"),
        "aot_based",
        node_to_partition={"op0": 0, "op1": 1, "op2": 1},
        partition_to_devices={0: [0], 1: [1]},
    )
    one, two = sorted(plan.partitions, key=lambda p: len(p.node_names))
    assert ": 1 node" in partition_to_dot(plan, graph, one.id) and ": 1 nodes" not in partition_to_dot(
        plan, graph, one.id
    )
    assert ": 2 nodes" in partition_to_dot(plan, graph, two.id)
