"""The one op table (NOTE: [One op table] in partitioner/op_table.py): every entry reachable from
every form a trace writes, and the cost model, the device profile and the cluster planner agreeing
on every op of every sample model and of Hugging Face presets."""

from __future__ import annotations

from pathlib import Path

import layout_scan
import pytest

import partitioner
import sample_models
from examples import host_profile
from partitioner.cluster import op_kinds
from partitioner.cost import ops as gpu_ops
from partitioner.device_profile import ELEMENTWISE_KINDS
from partitioner.op_table import KERNELS, MODULES, OPS, SAVES, SHAPES, lookup, module_op, names, op_name

ROOT = Path(__file__).resolve().parents[1]
FORMER_HOMES = (
    "partitioner/device_profile.py",
    "partitioner/cost/ops.py",
    "partitioner/cluster/op_kinds.py",
    "partitioner/tracing/tracer.py",
    "partitioner/remat/_joint.py",
    "partitioner/sharding/_modules.py",
    "partitioner/sharding/tp_styles.py",  # issue 55: tests/test_op_table_homes.py
    "partitioner/cluster/run/tp_plans.py",
    "partitioner/tracing/flops.py",
    "partitioner/cluster/model_profile.py",
    "partitioner/cluster/forward_scan.py",
)
# A host profile: 1 us an op, 2 us more a module call, a copy at 1 GB/s to 10 GB/s, curves of their
# own for the ops that compute more than a copy.
HOST = host_profile(
    elementwise=tuple((k, ((1e3, 3e-6), (1e6, 2e-4))) for k in ("gelu", "layer_norm", "softmax", "silu")),
)


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("aten::add.Tensor", "add"),
        ("aten::add_.Tensor", "add"),
        ("aten::view", "view"),
        ("aten::_unsafe_view", "_unsafe_view"),
        ("aten::mean.dim", "mean"),  # the overload is no op of its own (it was "dim": a free op)
        ("aten::__and__.Tensor", "and"),
        ("aten.transpose.int", "transpose"),
        ("torch.nn.functional.gelu", "gelu"),
        ("_operator.truediv", "div"),
        ("truediv", "div"),
        ("<built-in function getitem>", "getitem"),
        ("_VariableFunctionsClass.relu", "relu"),
        ("Tensor.transpose", "transpose"),
        ("transformers::grouped_mm_fallback", "grouped_mm_fallback"),
        ("layers.0.mlp", "mlp"),
    ],
)
def test_op_name_reads_every_form_a_trace_writes(target, name):
    assert op_name(target) == name


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_entry_is_reachable_after_normalisation(name):
    forms = [name, f"aten::{name}", f"aten::{name}.default", f"aten.{name}.Tensor", f"torch.nn.functional.{name}"]
    assert {op_name(form) for form in forms} == {name}
    if not name.startswith("_"):
        assert op_name(f"{name}_") == name  # in place
    assert lookup(f"aten::{name}.default") is OPS[name]


def test_the_records_hold_known_classes_and_modules_name_ops_of_the_table():
    assert all(op.kernel in KERNELS and op.saves in SAVES and op.shape in SHAPES for op in OPS.values())
    assert sorted(set(MODULES.values()) - set(OPS)) == []
    assert module_op("LayerNorm") == "layer_norm" and module_op("ConvTranspose2d") == "conv_transpose2d"
    assert names(shape="reshape") == {"view", "_unsafe_view", "reshape", "unflatten"}


def test_the_planner_matches_the_ops_its_names_lost_their_underscores_for():
    """op_base stripped underscores, so these entries of the planner's lists never matched."""
    assert {op_kinds.op_base("aten::_unsafe_view"), op_kinds.op_base("aten::_to_copy")} <= op_kinds.VIEW
    assert op_kinds.op_base("aten::_fused_rms_norm") in op_kinds.NORM
    assert op_kinds.op_base("aten::_grouped_mm") in op_kinds.PRODUCT
    for fused in ("_scaled_dot_product_flash_attention", "_flash_attention_forward", "flex_attention"):
        assert op_kinds.op_base(f"aten::{fused}") in op_kinds.ATTENTION
        assert gpu_ops.op_kind("call_function", f"aten::{fused}") == "attention"
    assert op_kinds.op_base("aten::_safe_softmax.default") in op_kinds.SOFTMAX


def test_views_are_priced_as_views_by_the_host_profile():
    """1 MB through a view costs its dispatch alone (it was a copy of its bytes: ~100 us)."""
    for target in ("aten::view", "aten::slice.Tensor", "aten::transpose.int", "aten::detach"):
        assert HOST.op_seconds(0, 1e6, target=target) == (1e-6, 1e-6)
    memory_s, _ = HOST.op_seconds(0, 1e6, target="aten::mean.dim")
    assert memory_s > 50e-6
    assert HOST.op_seconds(0, 1e6, target="aten::gelu") == HOST.op_seconds(0, 1e6, target="gelu")


def test_no_former_home_keeps_a_list_of_ops():
    """The profile's curves (ELEMENTWISE_KINDS: what calibration measures) and tensor
    parallelism's layer kinds name ops but are no class of them."""
    words = set(OPS) - {"linear", "conv1d", "embedding"}
    found = [
        f"{path}:{line} {hits}"
        for path in FORMER_HOMES
        for line, hits in layout_scan.tables_in((ROOT / path).read_text(), words)
        if not set(hits) <= set(ELEMENTWISE_KINDS)
    ]
    assert found == []


def _agreement(graph: partitioner.Graph) -> list[str]:
    """Every op node where the cost model, the host profile and the planner disagree."""
    wrong = []
    for v, nd in enumerate(graph.nodes):
        if not nd.is_op:
            continue
        cls = gpu_ops.module_kind(graph, nd)
        kind = gpu_ops.op_kind(nd.op, nd.target, cls)
        launched = gpu_ops.kernel_op(graph, v, kind).kind
        in_dtype = gpu_ops.input_dtype(graph, v)
        one, two = (HOST.op_seconds(nd.flops, b, nd.dtype, nd.op, nd.target, cls, in_dtype) for b in (1e6, 2e6))
        free = one == two
        base = op_kinds.module_kind(graph, v) if nd.op == "call_module" else op_kinds.op_base(nd.target)
        checks = {
            "free on the profile iff no kernel to the cost model": free == (launched == "view"),
            "a matmul iff a product": (kind == "matmul") == (base in op_kinds.PRODUCT),
            "attention iff attention": (kind == "attention") == (base in op_kinds.ATTENTION),
            "a norm iff a norm": (kind in ("layer_norm", "rms_norm")) == (base in op_kinds.NORM),
            "a softmax is one": kind != "softmax" or base in op_kinds.SOFTMAX,
            "a view is its value or keeps nothing": kind != "view" or base in op_kinds.VIEW | names(kernel="view"),
        }
        wrong += [f"{nd.name} ({nd.target}): {rule}" for rule, ok in checks.items() if not ok]
    return wrong


@pytest.mark.parametrize("name", sample_models.names())
def test_the_cost_model_the_profile_and_the_planner_agree_on_every_sample_op(name):
    module, inputs, kwargs = sample_models.load(name, {})
    assert _agreement(partitioner.trace(module, inputs, example_kwargs=kwargs)) == []


@pytest.mark.parametrize(
    ("spec", "overrides"),
    [
        ("hf:llama-3-8b", {"num_hidden_layers": 2, "dtype": "bf16"}),  # meta weights
        ("hf:mixtral-8x7b", {"num_hidden_layers": 2, "dtype": "bf16"}),
        ("hf:gpt2-xl", {"n_layer": 2}),
        ("hf:t5-base", {"num_layers": 2, "num_decoder_layers": 2}),
        ("hf:bert-large", {"num_hidden_layers": 2}),
        ("hf:vit-l-16", {"num_hidden_layers": 2}),
        ("hf:mixtral", {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_local_experts": 4}),
    ],
)
def test_the_cost_model_the_profile_and_the_planner_agree_on_every_hf_op(spec, overrides):
    pytest.importorskip("transformers")
    module, inputs, kwargs = sample_models.load(spec, overrides)
    assert _agreement(partitioner.trace(module, inputs, example_kwargs=kwargs)) == []
