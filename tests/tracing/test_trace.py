import pytest
import torch
import torch.fx as fx
from torch.fx.passes.graph_manipulation import get_size_of_all_nodes

import partitioner
from examples import WorkedExample
from partitioner import TraceError
from partitioner.testing.synthetic import random_fx_module


def test_sizes_match_reference_definition():
    gm, inputs = random_fx_module(seed=3, n_ops=30)
    graph = partitioner.trace(gm, inputs)
    get_size_of_all_nodes(gm, list(inputs))
    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        ours = graph.node(node.name)
        assert ours.output_bytes == node.size_bytes.output_size
        assert ours.total_bytes == node.size_bytes.total_size


def test_annotations_of_a_linear_layer():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
    graph = partitioner.trace(model, (torch.randn(8, 16),))
    linear = graph.node("_0")
    assert linear.op == "call_module" and linear.module_path == "0"
    assert linear.shape == (8, 32) and linear.dtype == "float32"
    assert linear.output_bytes == 8 * 32 * 4
    assert linear.param_bytes == (16 * 32 + 32) * 4
    assert linear.flops == 2 * 8 * 16 * 32
    assert graph.node("_1").flops == 0 and graph.node("_1").inputs == (graph.index["_0"],)


def test_embedding_nodes_are_flagged():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.EmbeddingBag(100, 8, mode="sum")
            self.fc = torch.nn.Linear(8, 2)

        def forward(self, idx, offsets):
            return self.fc(self.table(idx, offsets))

    graph = partitioner.trace(Model(), (torch.randint(0, 100, (6,)), torch.tensor([0, 3])))
    assert graph.node("table").is_embedding and not graph.node("fc").is_embedding


def test_trace_accepts_graph_module_and_keeps_names(worked_example):
    graph, a = worked_example
    gm = fx.symbolic_trace(WorkedExample())
    again = partitioner.trace(gm, (a,))
    assert again.graph_module is gm
    assert [n.name for n in again.nodes] == [n.name for n in gm.graph.nodes]


def test_annotation_uses_no_real_compute():
    class Huge(torch.nn.Module):
        def forward(self, x):
            return (x @ x.transpose(0, 1)).relu()

    # 20000 x 20000 float32 would need 1.6 GB for the product: fake tensors allocate nothing.
    x = torch.empty(20000, 64)
    graph = partitioner.trace(Huge(), (x,))
    assert graph.node("matmul").output_bytes == 20000 * 20000 * 4
    assert graph.node("matmul").flops == 2 * 20000 * 20000 * 64


def test_falls_back_to_export_for_shape_control_flow():
    class ShapeBranch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            if x.shape[0] > 1:  # symbolic_trace cannot evaluate this; torch.export can
                return self.fc(x).relu()
            return self.fc(x)

    x = torch.randn(3, 4)
    model = ShapeBranch()
    graph = partitioner.trace(model, (x,))
    assert any(n.is_op for n in graph.nodes)
    devices = partitioner.parse_devices("2x1KiB")
    plan = partitioner.partition(graph, devices, mode="size_based", force_partition=True)
    torch.testing.assert_close(partitioner.split(plan, graph)(x), model(x))


def test_untraceable_model_names_the_line_and_fix():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # depends on values: neither tracer can follow it
                return x.relu()
            return -x

    with pytest.raises(TraceError, match=r"test_trace.py:\d+.*x.sum\(\) > 0.*Fix: remove Python control flow"):
        partitioner.trace(DataDependent(), (torch.randn(3),))


def test_wrong_number_of_inputs():
    with pytest.raises(TraceError, match="takes 1 input.*but 2 example input"):
        partitioner.trace(torch.nn.ReLU(), (torch.randn(2), torch.randn(2)))
