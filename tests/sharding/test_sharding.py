"""Sharding: autodist's partition lists and DTensor's chunking, checked against torch's own
local-shape function; per-device memory equals the sum of the local shards."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import partitioner
from partitioner import Device, ShardingError, sharding


def test_partition_list_round_trip_and_autodist_rules():
    assert sharding.parse_partition_str("1,4") == [1, 4]
    assert sharding.format_partition_list([1, 4]) == "1,4"
    assert sharding.parse_partition_str(sharding.format_partition_list([3, 1, 1])) == [3, 1, 1]
    assert sharding.validate_partition_list([1, 4], shape=(8, 8)) == [1, 4]
    with pytest.raises(ShardingError, match=r"at most one axis may be split"):
        sharding.validate_partition_list([2, 2], shape=(8, 8))
    with pytest.raises(ShardingError, match=r"fc1.weight of shape \[3, 8\]: 4 shards along axis 0 exceed its 3 rows"):
        sharding.validate_partition_list("4,1", shape=(3, 8), name="fc1.weight")
    with pytest.raises(ShardingError, match=r"has 1 entries but the tensor has 2 axes"):
        sharding.validate_partition_list([2], shape=(8, 8))
    with pytest.raises(ShardingError, match=r">= 1"):
        sharding.parse_partition_str("0,2")
    with pytest.raises(ShardingError, match=r"comma-separated"):
        sharding.parse_partition_str("two")
    assert issubclass(ShardingError, partitioner.PartitionError)


def test_shard_shapes_follow_dtensor_chunking():
    assert sharding.shard_shapes((10, 8), [4, 1]) == [(3, 8), (3, 8), (3, 8), (1, 8)]
    assert sharding.shard_shapes((5, 2), "4,1") == [(2, 2), (2, 2), (1, 2), (0, 2)]
    assert sharding.shard_shapes((6, 4), [1, 1]) == [(6, 4)]


@settings(deadline=None, max_examples=60)
@given(st.integers(1, 40), st.integers(1, 8), st.integers(1, 8), st.integers(0, 1))
def test_shard_shapes_equal_dtensors_own_local_shapes(rows, cols, n, axis):
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset

    shape = (rows, cols)
    if n > shape[axis]:
        return
    counts = [1, 1]
    counts[axis] = n
    ours = sharding.shard_shapes(shape, counts)
    for k in range(n):
        theirs, _ = _compute_local_shape_and_global_offset(shape, (n,), [k], [Shard(axis)])
        assert ours[k] == tuple(theirs)


def test_device_memory_is_the_sum_of_local_shards():
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    graph = partitioner.trace(model, (torch.randn(4, 16),))
    devices = [Device(f"d{i}", 10**9, i) for i in range(4)]
    activations = sum(nd.output_bytes for nd in graph.nodes)
    whole = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sharding.device_memory(graph, devices, {}) == {i: whole + activations for i in range(4)}
    spec = {"0.weight": "4,1", "2.weight": "1,4"}  # column then row, as tensor parallel does
    mem = sharding.device_memory(graph, devices, spec)
    for i in range(4):
        shards = sum(
            math.prod(sharding.shard_shapes(tuple(model.get_parameter(n).shape), c)[i]) * 4 for n, c in spec.items()
        )
        rest = sum(p.numel() * 4 for n, p in model.named_parameters() if n not in spec)
        assert mem[i] == shards + rest + activations
    assert mem[0] < whole + activations
    with pytest.raises(ShardingError, match=r"the spec names parameter\(s\) \['nope'\]"):
        sharding.device_memory(graph, devices, {"nope": "1,4"})
    # With a plan, shards stay within each partition's devices.
    plan = partitioner.partition(graph, devices[:2], force_partition=True)
    by_plan = sharding.device_memory(graph, devices[:2], {}, plan=plan)
    assert sum(by_plan.values()) >= whole
