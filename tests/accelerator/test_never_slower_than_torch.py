"""Hypothesis property: under ``cost_model="torch"``, cost_aware's plan is never slower than torch's
own cost_aware plan by torch's own latency, on random graphs of the sizes torch's search finishes
in a test's time (NOTE: [Never slower than torch] in partitioner/accelerator/cost_aware.py)."""

import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import partitioner
from examples import reference_latencies
from partitioner import Device, PartitionError
from partitioner.testing.reference import reference_partition
from partitioner.testing.synthetic import random_fx_module


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.integers(3, 16),
    st.integers(2, 4),
    st.floats(0.3, 0.9),
    st.sampled_from([0.5, 2.0, 64.0]),
)
@example(16, 9, 3, 0.46875, 0.5)  # torch's memory rule refuses every fill, yet takes torch's own plan
def test_cost_aware_is_never_slower_than_torchs_cost_aware(seed, n_ops, count, share, rate):
    gm, inputs = random_fx_module(seed, n_ops)
    graph = partitioner.trace(gm, inputs)
    floor = max(partitioner.accelerator._base.node_alone_bytes(graph, v) for v in graph.op_indices)
    devices = [Device(f"dev_{i}", max(floor, int(graph.total_size_bytes * share)), i) for i in range(count)]
    kw = dict(transfer_rate_bytes_per_s=rate, node_latency=reference_latencies(graph), cost_model="torch")
    began = time.perf_counter()
    try:
        ref = reference_partition(graph, devices, "cost_aware", **kw)
    except PartitionError:
        return  # torch finds no plan: nothing to be slower than
    assert time.perf_counter() - began < 20, "torch's search is past this test's sizes"
    if ref.plan.violations(graph):
        return
    ours = partitioner.partition(graph, devices, mode="cost_aware", **kw)
    assert ours.violations(graph) == []
    assert ours.latency_s <= ref.reported_latency_s * (1 + 1e-9), (ours.latency_s, ref.reported_latency_s)
