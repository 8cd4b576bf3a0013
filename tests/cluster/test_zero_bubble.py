"""Zero-bubble pipelines in the planner (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"; torch's
ScheduleInterleavedZeroBubble, which the Pipeline page simulates): the backward split into its
input and weight halves fills the bubble that 1F1B leaves."""

from __future__ import annotations

import pytest
from cluster_helpers import hand_profile

from partitioner import PartitionError, cluster
from partitioner.cluster.run.compose import parse_layout
from partitioner.interop.engines import engine_file
from partitioner.pipeline.simulator import simulate
from partitioner.pipeline.steps import closed_form, step_simulator

C = cluster.Cluster(cluster.Accelerator.custom("x", 2**40, 1e14, 1e12, 1.0), devices_per_node=8)


def test_zero_bubble_fills_the_bubble_1f1b_leaves():
    p = hand_profile(params=1_000_000_000, layers=8)
    w = cluster.Workload(global_batch=8, seq_len=128)
    sim = step_simulator()
    one = cluster.evaluate(p, w, C, cluster.Layout(pp=4, schedule="1f1b"), sim)
    zb = cluster.evaluate(p, w, C, parse_layout("pp4 zero_bubble mb1"), sim)
    assert zb.step_s < one.step_s and zb.parts_s["bubble"] < one.parts_s["bubble"]
    reference = simulate([0.5] * 8, 8, "zero_bubble", backward_s=[1.0] * 8)  # the Pipeline page's simulator
    unit, _, _ = sim("zero_bubble", 4, 8, 2.0)
    assert unit == pytest.approx(reference.step_time_s)
    assert closed_form("zero_bubble", 4, 8, 2.0)[0] >= reference.step_time_s  # beyond the simulator: a bound


def test_zero_bubble_needs_two_chunks_a_rank_and_is_searched_and_exported():
    p = hand_profile(params=1_000_000, layers=4)
    with pytest.raises(
        PartitionError,
        match=r"pp4 x 2 chunks need a layer each \(or the embedding or the head\) and the model has 4 layers",
    ):
        cluster.evaluate(
            p,
            cluster.Workload(global_batch=8, seq_len=1),
            C,
            cluster.Layout(pp=4, schedule="zero_bubble"),
            step_simulator(),
        )
    p = hand_profile(params=4_000_000_000, layers=8)
    found = cluster.search(p, cluster.Workload(global_batch=16, seq_len=512), C, [8])
    assert any(r.layout.schedule == "zero_bubble" for r in found.fitting)
    lay = cluster.Layout(pp=2, schedule="zero_bubble")
    assert (
        'pipeline_parallel_schedule = "InterleavedZeroBubble"'
        in engine_file("torchtitan", lay, cluster.Workload(global_batch=8))[1]
    )
    megatron = engine_file("megatron", lay, cluster.Workload(global_batch=8))[1]
    assert megatron.startswith("# Megatron-LM has no zero-bubble schedule")
