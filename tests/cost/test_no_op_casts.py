"""A cast to the dtype its input already has is free where torch returns the input itself
(``t.to(t.dtype) is t``): the op table's rule (``returns_input``), checked against torch's own
behaviour, and priced alike by the GPU cost model (no kernel) and a calibrated host profile (its
dispatch alone, as a view); ``clone`` and ``_to_copy`` copy whatever the dtype."""

from __future__ import annotations

import pytest
import torch

import partitioner
from examples import host_profile
from partitioner.cost import ops as gpu_ops
from partitioner.cost.measured import profile_latencies
from partitioner.op_table import OPS, names, returns_input
from partitioner.profiles import gpu_profile

# A host profile: 1 us an op, a copy at 1 GB/s to 10 GB/s.
HOST = host_profile()
# Each cast or copy of the op table as eager PyTorch calls it on ``t``, to the dtype ``d``.
CALLS = {
    "to": lambda t, d: t.to(d),
    "type_as": lambda t, d: t.type_as(torch.ones(1, dtype=d)),
    "type": lambda t, d: t.type(d),
    "float": lambda t, d: t.float(),
    "half": lambda t, d: t.half(),
    "bfloat16": lambda t, d: t.bfloat16(),
    "clone": lambda t, d: t.clone(),
    "_to_copy": lambda t, d: torch.ops.aten._to_copy(t, dtype=d),
}
# The dtype each call casts to when it names one.
NAMED = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16}


def test_every_cast_and_copy_of_the_table_is_called_here():
    assert set(CALLS) == names(kernel="cast") | {
        n for n, op in OPS.items() if op.kernel == "copy" and op.saves == "same"
    }


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("source", [torch.float32, torch.bfloat16, torch.float16])
def test_the_table_says_an_op_returns_its_input_exactly_when_torch_does(name, source):
    t = torch.ones(4, 8, dtype=source)
    for target in (NAMED.get(name, source), torch.float64):
        out = CALLS[name](t, target)
        assert returns_input(name, str(source), str(out.dtype)) == (out is t), (name, source, target)


def test_the_rule_reads_every_form_a_trace_writes_a_cast_in():
    assert returns_input("aten::to.dtype", "torch.float32", "float32")
    assert returns_input("aten.type_as.default", "bfloat16", "bfloat16")
    assert not returns_input("aten::_to_copy", "float32", "float32")
    assert not returns_input("aten::to.dtype", "float32", "bfloat16")
    assert not returns_input("to", None, "float32")
    assert not returns_input("add", "float32", "float32")


class Casts(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        same = x.to(x.dtype)
        floated = x.float()
        typed = x.type_as(y)
        half = same.to(torch.bfloat16)
        copied = x.clone()
        return same + floated + typed + half.float() + copied


def test_a_traced_models_casts_cost_what_torch_does_on_the_gpu_and_the_host():
    x = torch.ones(64, 256)
    graph = partitioner.trace(Casts(), (x, x))
    free = {nd.name: gpu_ops.is_no_op_cast(graph, v) for v, nd in enumerate(graph.nodes) if nd.is_op}
    eager = {
        "to": x.to(x.dtype) is x,
        "float_1": x.float() is x,
        "type_as": x.type_as(x) is x,
        "to_1": x.to(torch.bfloat16) is x,
        "clone": x.clone() is x,
    }
    assert {n: free[n] for n in eager} == eager
    assert eager == {"to": True, "float_1": True, "type_as": True, "to_1": False, "clone": False}
    gpu = gpu_profile("h100-80gb").gpu
    view = HOST.op_seconds(0, 1e6, target="aten::view")
    for v, nd in enumerate(graph.nodes):
        if nd.name not in eager:
            continue
        op = gpu_ops.kernel_op(graph, v, gpu_ops.op_kind(nd.op, nd.target))
        priced = HOST.op_seconds(0, 1e6, nd.dtype, nd.op, nd.target, in_dtype=gpu_ops.input_dtype(graph, v))
        assert (op.kind == "view") == eager[nd.name] and (gpu.kernel_s(op) == 0.0) == eager[nd.name], nd.name
        assert (priced == view) == eager[nd.name], nd.name


def test_a_cast_to_its_own_dtype_costs_its_dispatch_alone_on_a_host_profile():
    view = HOST.op_seconds(0, 1e6, target="aten::view")
    assert HOST.op_seconds(0, 1e6, "float32", target="aten::to.dtype", in_dtype="float32") == view == (1e-6, 1e-6)
    assert HOST.op_seconds(0, 1e6, "float32", target="type_as", in_dtype="torch.float32") == view
    changed, _ = HOST.op_seconds(0, 1e6, "bfloat16", target="to", in_dtype="float32")
    copied, _ = HOST.op_seconds(0, 1e6, "float32", target="clone", in_dtype="float32")
    unknown, _ = HOST.op_seconds(0, 1e6, "float32", target="to")
    assert changed == copied == unknown > 50e-6  # a copy of 1 MB at about 10 GB/s


def test_a_plan_on_a_calibrated_host_prices_a_cast_to_its_own_dtype_as_a_view():
    x = torch.ones(64, 256)
    graph = partitioner.trace(Casts(), (x, x))
    times = dict(zip((nd.name for nd in graph.nodes), profile_latencies(graph, HOST)))
    view = HOST.op_seconds(0, 0, target="aten::view")
    assert [times[n] for n in ("to", "float_1", "type_as")] == [view] * 3  # what the cost model plans with
    assert min(times["to_1"][0], times["clone"][0]) > 10 * view[0]  # the real cast and the copy move their bytes
