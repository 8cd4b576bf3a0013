"""HSDP (FSDP2's hybrid sharding, DeepSpeed's ZeRO++ hpZ): ZeRO shards inside a group of ranks
and replicates across groups. Memory as if data parallelism were the group; traffic split into a
reduce-scatter and all-gathers inside the group and an all-reduce of one shard across groups."""

from __future__ import annotations

import pytest
from cluster_helpers import hand_profile

from partitioner import PartitionError, cluster
from partitioner.cluster.layouts import ring_allreduce_s
from partitioner.interop.engines import to_deepspeed, to_megatron
from partitioner.pipeline.steps import step_simulator

INTRA, INTER = cluster.Link("fast", 1e11, 1e-6), cluster.Link("slow", 1e10, 5e-6)
C = cluster.Cluster(
    cluster.Accelerator.custom("x", 2**40, 1e15, 1e12, 1.0), devices_per_node=8, intra=INTRA, inter=INTER
)
W = cluster.Workload(global_batch=64, seq_len=16)


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_states_shard_over_the_group_only(zero):
    p = hand_profile(params=8_000_000_000, layers=4)
    hsdp = cluster.evaluate(p, W, C, cluster.Layout(dp=64, zero=zero, shard=8), step_simulator())
    within = cluster.evaluate(p, W, C, cluster.Layout(dp=8, zero=zero), step_simulator())
    for kind in ("weights", "gradients", "optimizer", "gathered layer"):
        assert hsdp.memory.get(kind, 0.0) == pytest.approx(within.memory.get(kind, 0.0))


def test_only_one_shard_crosses_the_nodes():
    """Each gradient byte is reduce-scattered in the node (8 ranks) and only the rank's 1/8 shard is
    all-reduced across the 8 nodes; ZeRO-3 gathers the weights in the node twice."""
    p = hand_profile(params=8_000_000_000, layers=4)
    lay = cluster.Layout(dp=64, zero=3, shard=8)
    rows = cluster.collectives(p, W, C, lay)
    nbytes = 8_000_000_000 * 2.0
    across = next(r for r in rows if "across replicas" in r.name)
    assert (across.ranks, across.link, across.bytes_each) == (8, "slow", pytest.approx(nbytes / 8))
    assert across.seconds_each == pytest.approx(ring_allreduce_s(nbytes / 8, 8, 1e10, 5e-6))
    inner = [r for r in rows if "shard group" in r.name]
    assert {r.link for r in inner} == {"fast"} and sum(r.count for r in inner) == 3
    flat = cluster.collectives(p, W, C, cluster.Layout(dp=64, zero=3))
    assert sum(r.seconds for r in rows) < sum(r.seconds for r in flat)  # 1/8 of the bytes on the slow link
    r = cluster.evaluate(p, W, C, lay, step_simulator())
    # FSDP: one microbatch's gathers and reductions (3 ring collectives a layer, each n - 1 steps of
    # the node's latency within the shard group of 8) hide under its forward and backward
    both = sum(r.stage_s)
    latency = 3 * p.layers * 7 * C.intra.latency_s
    once = sum(x.seconds for x in rows) / r.microbatches  # the rows count every microbatch's
    expected = r.microbatches * max(0.0, once + latency - both)
    assert r.parts_s["gradient reduction (exposed)"] == pytest.approx(expected)


def test_the_rules_and_the_exports():
    p = hand_profile(params=1_000_000, layers=4)
    with pytest.raises(PartitionError, match="sharding group of 8 .* needs ZeRO 1-3"):
        cluster.evaluate(p, W, C, cluster.Layout(dp=16, shard=8), step_simulator())
    with pytest.raises(PartitionError, match="must divide the data-parallel ranks"):
        cluster.evaluate(p, W, C, cluster.Layout(dp=16, zero=3, shard=6), step_simulator())
    lay = cluster.Layout(dp=64, zero=3, shard=8)
    assert to_deepspeed(lay, W)["zero_optimization"] == {"stage": 3, "zero_hpz_partition_size": 8}
    args = to_megatron(lay, W)
    assert args[args.index("--num-distributed-optimizer-instances") + 1] == "8"
    assert "shard8" in lay.label()


def test_the_search_tries_hsdp_where_data_parallelism_spans_nodes():
    p = hand_profile(params=2_000_000_000, layers=8)
    found = cluster.search(p, W, C, [8, 64])
    hybrid = [r.layout for r in found.fitting if r.layout.shard]
    assert hybrid and all(lay.shard == 8 // lay.tp and lay.zero for lay in hybrid)  # a node's ranks of a tp group
    assert all(r.layout.shard == 0 for r in found.fitting if r.devices == 8)  # one node: nothing to replicate
