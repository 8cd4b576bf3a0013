"""Torch's own partitioner test models, partitioned by torch and by us under ``cost_model="torch"``:
``size_based`` gives torch's plan (node sets and device ids), every plan's memory per partition
and latency equal what torch's own functions compute on the same partitions, and ``cost_aware``
is never slower than torch's by torch's own latency."""

import pytest
from test_differential import _torch_figures
from torch_test_models import cases, size_latency

import partitioner
from partitioner import InfeasibleError, PartitionError
from partitioner.testing.reference import reference_partition

CASES = {case.name: case for case in cases()}


def _setup(case):
    graph = partitioner.trace(case.model, case.inputs)
    # Torch's figures need every node's latency: tests without latencies get torch's size rule.
    latency = (case.latency or size_latency(lambda total: 2.0 * total))(graph)
    kw = dict(transfer_rate_bytes_per_s=case.rate, node_latency=latency, saturate_host=case.saturate_host)
    return graph, latency, kw


def _shape(plan):
    return [(sorted(p.node_names), list(p.device_ids)) for p in plan.partitions]


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("mode", ["size_based", "cost_aware", "kl_based"])
def test_torch_test_models(name, mode):
    case = CASES[name]
    graph, latency, kw = _setup(case)
    try:
        ref = reference_partition(graph, case.devices, mode, cost_model="torch", **kw)
    except PartitionError:
        ref = None
    if case.fails and mode == "size_based":
        assert ref is None, "torch's test expects its size_based to fail here"
        with pytest.raises(InfeasibleError, match="largest_first|add (a )?devices? or memory|add memory to a device"):
            partitioner.partition(graph, case.devices, mode=mode, cost_model="torch", **kw)
        return
    try:
        ours = partitioner.partition(graph, case.devices, mode=mode, cost_model="torch", **kw)
    except InfeasibleError:
        assert ref is None or ref.plan.violations(graph), "torch found a valid plan where we found none"
        return
    assert ours.cost_model == "torch" and ours.violations(graph) == []
    rate = case.rate or float("inf")
    memory, latency_s = _torch_figures(ours, graph, latency, rate)
    assert [p.memory_bytes for p in ours.partitions] == memory
    assert ours.latency_s == pytest.approx(latency_s, rel=1e-9, abs=1e-12)
    assert ref is not None or case.fails
    if ref is not None and mode == "size_based":
        assert _shape(ours) == _shape(ref.plan)
    if ref is not None and mode == "cost_aware":
        assert ours.latency_s <= ref.reported_latency_s * (1 + 1e-9)


def test_device_mapping_as_torch_and_largest_first():
    """Torch's device-mapping test: three partitions on devices [0], [1], [0]; the largest-first
    fill needs two."""
    case = CASES["device_mapping"]
    graph, _, kw = _setup(case)
    plan = partitioner.partition(graph, case.devices, mode="size_based", **kw)
    assert [list(p.device_ids) for p in plan.partitions] == [[0], [1], [0]]
    ours = partitioner.partition(graph, case.devices, mode="largest_first", **kw)
    assert len(ours.partitions) == 2 and ours.violations(graph) == []


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer", "moe", "unet"])
def test_sample_models_size_based_is_torchs(name):
    """On the sample models, with devices a third of the model each: torch's node sets and device
    ids, and torch's own memory per partition under ``cost_model="torch"``."""
    import sample_models
    from partitioner import Device

    module, inputs, _ = sample_models.load(name)
    graph = partitioner.trace(module, inputs)
    memory = max(
        graph.total_size_bytes // 3,
        max(partitioner.accelerator._base.node_alone_bytes(graph, v) for v in graph.op_indices),
    )
    devices = [Device(f"dev_{i}", memory, i) for i in range(4)]
    ref = reference_partition(graph, devices, "size_based", cost_model="torch")
    ours = partitioner.partition(graph, devices, mode="size_based", cost_model="torch")
    assert _shape(ours) == _shape(ref.plan)
    latency = {graph.nodes[v].name: (0.0, 1.0) for v in graph.op_indices}
    memory_by_torch, _ = _torch_figures(ours, graph, latency, float("inf"))
    assert [p.memory_bytes for p in ours.partitions] == memory_by_torch
