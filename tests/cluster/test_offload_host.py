"""ZeRO-Offload's host memory: the bytes a node's host holds for the layout's offloaded optimizer,
against DeepSpeed's own estimators' CPU figure, and a layout over the node's host memory refused by
name (NOTE: [Host memory under ZeRO-Offload] in partitioner.cluster.memory)."""

from __future__ import annotations

import dataclasses

import pytest
from cluster_helpers import hand_profile

from cli.cluster_report import print_answers
from partitioner import cluster
from partitioner.cluster.bands import host_memory_line
from partitioner.cluster.hardware import HOST_MEMORY_BYTES
from partitioner.cluster.memory import host_bytes
from partitioner.errors import PartitionError
from partitioner.pipeline.steps import step_simulator

ACC80 = cluster.Accelerator.custom("a100-80gb-like", 80 * 10**9, 312e12, 2.0e12, 1.0)
NODE8 = cluster.Cluster(ACC80, devices_per_node=8, headroom_bytes=0)
PARAMS = 2_000_000_000


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_zero3_host_bytes_are_deepspeeds_cpu_figure(nodes):
    """``estimate_zero3_model_states_mem_needs(cpu_offload=True, cpu_offload_params=False,
    zero_init=True)``: 16 x params / nodes a node (its 1.5 margin left out: factor 1)."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    p = hand_profile(params=PARAMS, layers=8)
    lay = cluster.Layout(dp=8 * nodes, zero=3, offload=True)
    cpu, _, _ = estimate_zero3_model_states_mem_needs(
        PARAMS, PARAMS // 8, 8, nodes, cpu_offload=True, cpu_offload_params=False, additional_buffer_factor=1.0
    )
    assert cpu == 16 * PARAMS // nodes
    r = cluster.evaluate(p, cluster.Workload(global_batch=8 * nodes, seq_len=1), NODE8, lay, step_simulator())
    assert r.host_bytes == pytest.approx(cpu, rel=1e-9)
    assert r.host_memory_bytes == HOST_MEMORY_BYTES == 2 * 2**40


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_zero2_host_bytes_are_deepspeeds_cpu_figure(gpus):
    """``estimate_zero2_model_states_mem_needs(cpu_offload=True)`` on one node: max(4 x GPUs, 16) x
    params, 16 x params up to 4 GPUs (beyond, its 4 x GPUs is every process loading the fp32 model
    at start-up, which the planner does not count). A layout of 4 devices on a node of 8 holds its
    4 ranks' shards."""
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    p = hand_profile(params=PARAMS, layers=8)
    cpu, _ = estimate_zero2_model_states_mem_needs(PARAMS, gpus, 1, cpu_offload=True, additional_buffer_factor=1.0)
    lay = cluster.Layout(dp=gpus, zero=2, offload=True)
    assert host_bytes(p, cluster.Workload(global_batch=gpus), NODE8, lay) == pytest.approx(cpu, rel=1e-9)


def test_host_bytes_follow_the_shard_and_the_node():
    """Two nodes of 8 under HSDP shard 8: each rank holds 1/8 of the states, a node 8 of them; tensor
    parallelism halves each rank's parameters; inference and layouts without offload need none."""
    p = hand_profile(params=PARAMS, layers=8)
    w = cluster.Workload(global_batch=16)
    assert host_bytes(p, w, NODE8, cluster.Layout(dp=16, zero=3, shard=8, offload=True)) == pytest.approx(16 * PARAMS)
    assert host_bytes(p, w, NODE8, cluster.Layout(dp=8, tp=2, zero=2, offload=True)) == pytest.approx(8 * PARAMS)
    assert host_bytes(p, w, NODE8, cluster.Layout(dp=8, zero=2)) == 0.0
    assert host_bytes(p, cluster.Workload("inference", 1), NODE8, cluster.Layout(dp=8, zero=2, offload=True)) == 0.0


def test_a_layout_over_the_hosts_memory_does_not_fit():
    p = hand_profile(params=PARAMS, layers=8)
    w = cluster.Workload(global_batch=4, seq_len=16)
    lay = cluster.Layout(dp=4, zero=2, offload=True)
    roomy = cluster.evaluate(p, w, NODE8, lay, step_simulator())
    assert roomy.fits and roomy.host_bytes == pytest.approx(16 * PARAMS)
    small = dataclasses.replace(NODE8, host_memory_bytes=16 * PARAMS - 2**20)
    tight = cluster.evaluate(p, w, small, lay, step_simulator())
    assert not tight.fits and tight.limit == "host memory"
    assert tight.memory == roomy.memory and tight.host_memory_bytes == 16 * PARAMS - 2**20
    assert not cluster.evaluate(p, w, small, lay, step_simulator(), time_unfit=False).fits
    data = tight.to_dict()
    assert data["host_bytes_per_node"] == pytest.approx(16 * PARAMS)
    assert data["host_memory_bytes_per_node"] == 16 * PARAMS - 2**20
    plain = cluster.evaluate(p, w, small, dataclasses.replace(lay, offload=False), step_simulator())
    assert plain.host_bytes == 0.0 and "host_bytes_per_node" not in plain.to_dict() and not host_memory_line(plain)
    assert host_memory_line(tight) == "host memory: 29.8 GiB of 29.8 GiB a node (over: does not fit)"


def test_the_search_keeps_no_offload_layout_over_the_host(capsys):
    """40 B parameters on 8 devices need ZeRO-Offload (the states are over the devices): 640 GB of
    host a node fits a DGX H100's 2 TiB, not a node of 512 GiB."""
    p = hand_profile(params=40_000_000_000, layers=8)
    c = cluster.Cluster(ACC80, devices_per_node=8, headroom_bytes=4 * 2**30)
    w = cluster.Workload(global_batch=8, seq_len=256)
    found = cluster.search(p, w, c, [8])
    offloaded = [r for r in found.fitting if r.layout.offload]
    assert offloaded and all(0 < r.host_bytes <= c.host_memory_bytes for r in offloaded)
    assert found.fewest_devices is not None and found.fewest_devices.layout.offload
    assert host_memory_line(found.fewest_devices) == "host memory: 596 GiB of 2 TiB a node"
    print_answers(w, found)
    assert "; host memory: 596 GiB of 2 TiB a node" in capsys.readouterr().out
    small = dataclasses.replace(c, host_memory_bytes=512 * 2**30)
    assert not [r for r in cluster.search(p, w, small, [8]).fitting if r.layout.offload]


def test_the_host_memory_is_checked_and_set():
    with pytest.raises(PartitionError, match="host_memory_bytes must be > 0"):
        cluster.Cluster(ACC80, host_memory_bytes=0)
    assert cluster.cluster("h100-80gb", host_memory_bytes=2**40).host_memory_bytes == 2**40
