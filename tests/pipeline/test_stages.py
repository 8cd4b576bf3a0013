"""pipeline.plan reads a transfer rate as partition() does: an explicit rate wins, None takes the
slowest link the devices give, and no link at all makes transfers free."""

import dataclasses

import pytest

import partitioner
import sample_models
from partitioner import PartitionError, pipeline


@pytest.fixture(scope="module")
def graph():
    model, inputs, _ = sample_models.load("mlp", {})
    return partitioner.trace(model, inputs)


def _transfers(graph, devices, rate):
    pp = pipeline.plan(graph, devices, stages=2, microbatches=2, schedule="gpipe", transfer_rate_bytes_per_s=rate)
    return pp.stage_transfer_s, pp.as_plan(graph, devices, rate)


def test_none_means_what_it_means_in_partition(graph):
    plain = partitioner.parse_devices("2x1GiB")
    slow, fast = 1e9, 4e9
    linked = [dataclasses.replace(d, link_bandwidth_bytes_per_s=r) for d, r in zip(plain, (fast, slow))]
    explicit, _ = _transfers(graph, plain, slow)
    from_links, stage_plan = _transfers(graph, linked, None)
    assert from_links == explicit and explicit[0] > 0  # the slowest link, as partition() resolves it
    assert (
        stage_plan.transfer_rate_bytes_per_s == partitioner.partition(graph, linked).transfer_rate_bytes_per_s == slow
    )
    free, _ = _transfers(graph, plain, None)
    assert free == (0.0,) and partitioner.partition(graph, plain).transfer_rate_bytes_per_s is None
    with pytest.raises(PartitionError, match="transfer_rate_bytes_per_s must be a positive number"):
        _transfers(graph, plain, -1.0)
