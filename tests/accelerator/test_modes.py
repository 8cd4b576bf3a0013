"""Tiny exact cases per mode, the front door's rules, and split equality."""

import pytest
import torch

import partitioner
import sample_models
from examples import reference_latencies
from partitioner import Device, InfeasibleError, PartitionError
from partitioner.testing.synthetic import random_fx_module


def devices(n, memory):
    return [Device(f"dev_{i}", memory, i) for i in range(n)]


def test_worked_example_latencies(worked_example):
    graph, _ = worked_example
    lat = reference_latencies(graph)
    plans = {
        mode: partitioner.partition(graph, devices(4, 125), mode=mode, transfer_rate_bytes_per_s=2.0, node_latency=lat)
        for mode in ("size_based", "cost_aware", "kl_based")
    }
    # size_based fills dev_0 with add, add_1 (80 B); linear needs 112 B with its input; the rest.
    assert [p.node_names for p in plans["size_based"].partitions] == [
        ("add", "add_1"),
        ("linear",),
        ("add_2", "add_3", "add_4"),
    ]
    assert plans["size_based"].latency_s == 176.0
    # Both cost-aware searches reach the reference cost_aware figure of torch's own test: 160.
    assert plans["cost_aware"].latency_s == 160.0
    assert plans["kl_based"].latency_s <= 176.0
    for plan in plans.values():
        assert plan.violations(graph) == []


def test_partition_latency_is_critical_path_inside(worked_example):
    graph, _ = worked_example
    lat = reference_latencies(graph)
    plan = partitioner.partition(
        graph, devices(4, 125), mode="size_based", transfer_rate_bytes_per_s=2.0, node_latency=lat
    )
    last = plan.partitions[2]  # add_2 -> add_4 and add_3 -> add_4: paths of two adds, (16, 1) each
    assert (last.latency_s, last.memory_latency_s, last.compute_latency_s) == (32.0, 32.0, 2.0)
    # linear costs max(96, 16); each crossing moves one 16 B tensor at 2 B/s: 32 + 8 + 96 + 8 + 32
    assert plan.partitions[1].parents == (0,) and plan.partitions[2].parents == (0, 1)
    assert [e.latency_s for e in plan.edges] == [8.0, 8.0, 8.0]
    assert [p.bfs_level for p in plan.partitions] == [0, 1, 2]
    assert plan.critical_path == (0, 1, 2)


def test_single_partition_when_model_fits_one_device(worked_example):
    graph, a = worked_example
    plan = partitioner.partition(graph, devices(2, 10_000), mode="cost_aware")
    assert len(plan.partitions) == 1 and plan.provenance.single_partition is True
    assert plan.partitions[0].memory_bytes == graph.total_size_bytes
    forced = partitioner.partition(graph, devices(2, 10_000), mode="size_based", force_partition=True)
    assert forced.provenance.single_partition is False


def test_model_larger_than_all_devices(worked_example):
    graph, _ = worked_example
    with pytest.raises(InfeasibleError, match=r"needs 240 B .* all 2 devices together have 200 B"):
        partitioner.partition(graph, devices(2, 100), mode="size_based")


def test_node_that_fits_no_device_is_named(worked_example):
    graph, _ = worked_example
    with pytest.raises(InfeasibleError, match=r"node 'linear' .* needs 112 B .* largest device has 100 B"):
        partitioner.partition(graph, devices(3, 100), mode="size_based")


def test_unknown_mode_lists_valid_ones(worked_example):
    graph, _ = worked_example
    with pytest.raises(
        PartitionError, match="unknown partition mode 'fastest'; valid modes are size_based, largest_first, sparse_nn"
    ):
        partitioner.partition(graph, devices(4, 125), mode="fastest")


def test_unknown_node_latency_name(worked_example):
    graph, _ = worked_example
    with pytest.raises(PartitionError, match="not op nodes of the graph: addd"):
        partitioner.partition(graph, devices(4, 125), node_latency={"addd": (1.0, 1.0)})


def test_partition_needs_a_traced_graph():
    with pytest.raises(PartitionError, match=r"call partitioner.trace\(model, example_inputs\) first"):
        partitioner.partition(torch.nn.ReLU(), devices(2, 100))


def test_aot_based_reproduces_a_plan(worked_example):
    graph, _ = worked_example
    lat = reference_latencies(graph)
    kw = dict(transfer_rate_bytes_per_s=2.0, node_latency=lat)
    plan = partitioner.partition(graph, devices(4, 125), mode="cost_aware", **kw)
    again = partitioner.partition(
        graph,
        devices(4, 125),
        mode="aot_based",
        **kw,
        node_to_partition=plan.node_to_partition(),
        partition_to_devices=plan.partition_to_devices(),
    )
    assert again.partitions == plan.partitions and again.latency_s == plan.latency_s


def test_aot_based_incomplete_mapping(worked_example):
    graph, _ = worked_example
    with pytest.raises(PartitionError, match=r"leaves out op node\(s\) \['add_1'"):
        partitioner.partition(
            graph, devices(4, 125), mode="aot_based", node_to_partition={"add": 0}, partition_to_devices={0: [0]}
        )


def test_aot_based_over_capacity_lists_violation(worked_example):
    graph, _ = worked_example
    mapping = {name: 0 for name in graph.op_names}
    with pytest.raises(
        partitioner.InvalidPlanError, match=r"device dev_0 \(id 0\) .* using 240 B of its 125 B \(115 B over\)"
    ):
        partitioner.partition(
            graph, devices(4, 125), mode="aot_based", node_to_partition=mapping, partition_to_devices={0: [0]}
        )


def test_saturate_host_replicates_onto_idle_devices(worked_example):
    graph, _ = worked_example
    plan = partitioner.partition(graph, devices(8, 125), mode="size_based", saturate_host=True)
    used = {p.device_ids[0] for p in plan.partitions}
    assert all(len(p.device_ids) == 2 for p in plan.partitions)
    replicas = {p.device_ids[1] for p in plan.partitions}
    assert not used & replicas and len(replicas) == len(used)
    assert plan.violations(graph) == []


class Sparse(torch.nn.Module):
    def __init__(self, rows=(400, 300, 200, 100)):
        super().__init__()
        self.tables = torch.nn.ModuleList(torch.nn.EmbeddingBag(r, 8, mode="sum") for r in rows)
        self.bottom = torch.nn.Linear(4, 8)
        self.top = torch.nn.Linear(8 * (len(rows) + 1), 1)

    def forward(self, dense, idx, offsets):
        parts = [self.bottom(dense)] + [t(idx, offsets) for t in self.tables]
        return self.top(torch.cat(parts, dim=1))


def sparse_inputs():
    torch.manual_seed(0)
    return torch.randn(2, 4), torch.randint(0, 100, (6,)), torch.tensor([0, 3])


def test_sparse_nn_spreads_tables_and_replicates_dense():
    model, inputs = Sparse(), sparse_inputs()
    graph = partitioner.trace(model, inputs)
    devs = [Device("big", 16_000, 0), Device("small", 12_000, 1), Device("mid", 14_000, 2)]
    plan = partitioner.partition(graph, devs, mode="sparse_nn")
    assert plan.violations(graph) == []
    emb = [p for p in plan.partitions if all(graph.node(n).is_embedding for n in p.node_names)]
    dense = [p for p in plan.partitions if p not in emb]
    assert {d for p in emb for d in p.device_ids} == {0, 1, 2}  # tables spread over all devices
    assert all(p.device_ids == (0, 1, 2) for p in dense)  # dense part on every device
    assert "tables_0" in next(p for p in emb if 0 in p.device_ids).node_names  # largest on largest
    torch.testing.assert_close(partitioner.split(plan, graph)(*inputs), model(*inputs))


def test_sparse_nn_without_embeddings_says_which_mode(worked_example):
    graph, _ = worked_example
    with pytest.raises(InfeasibleError, match="needs embedding nodes .* use mode 'size_based'"):
        partitioner.partition(graph, devices(4, 125), mode="sparse_nn")


@pytest.mark.parametrize("mode", ["size_based", "cost_aware", "kl_based"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_split_outputs_equal_model(mode, seed):
    gm, inputs = random_fx_module(seed, n_ops=25)
    graph = partitioner.trace(gm, inputs)
    memory = max(graph.total_size_bytes // 3, 200)
    plan = partitioner.partition(graph, devices(6, memory), mode=mode, transfer_rate_bytes_per_s=1e3)
    assert plan.violations(graph) == [] and len(plan.partitions) > 1
    split = partitioner.split(plan, graph)
    assert len([n for n, _ in split.named_children()]) == len(plan.partitions)
    torch.testing.assert_close(split(*inputs), gm(*inputs))


@pytest.mark.parametrize("mode", ["size_based", "cost_aware", "kl_based"])
def test_force_partition_spreads_a_model_that_fits_one_device(mode):
    module, inputs, _ = sample_models.load("mlp")
    graph = partitioner.trace(module, inputs)
    devices = partitioner.parse_devices("4x64MiB")
    assert graph.total_size_bytes < devices[0].memory_bytes
    assert len(partitioner.partition(graph, devices, mode=mode).partitions) == 1
    plan = partitioner.partition(graph, devices, mode=mode, force_partition=True)
    used = {d for p in plan.partitions for d in p.device_ids}
    assert len(used) >= 2 and plan.violations(graph) == []
    cap = plan.provenance.forced_cap_bytes
    assert cap is not None and cap < devices[0].memory_bytes
    assert max(plan.device_memory_bytes().values()) <= cap
