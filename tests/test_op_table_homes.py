"""Issue 55, one home per rule: the op lists that tensor parallelism, the FLOP check, the cluster
profile and the forward scan kept are read off the op table (NOTE: [One op table] and NOTE:
[Shards through ops] in partitioner/op_table.py). Each former list is pinned here as it was, so the
table cannot drift from what those modules did; tests/test_op_table.py scans the modules for
literal lists of ops."""

from __future__ import annotations

import pytest

from partitioner.cluster import forward_scan
from partitioner.cluster.model_profile import _grows_with_sequence
from partitioner.cluster.run import tp_plans
from partitioner.op_table import OPS, TP_RULES, lookup, names, op_name, stems
from partitioner.sharding import tp_styles
from partitioner.tracing import flops

# The lists as the modules kept them before issue 55.
ACTIVATIONS = {"relu", "gelu", "silu", "tanh", "sigmoid", "dropout", "identity", "mish", "leaky_relu", "elu"}
DECOMPOSED = {"alias", "pow", "neg", "exp", "erf", "sqrt"}  # what an aten trace writes activations with
BATCHED = {"matmul", "bmm", "baddbmm", "einsum"}


def test_every_op_has_a_known_tensor_parallel_rule():
    assert all(op.tp in TP_RULES for op in OPS.values())
    assert names(batched=True) <= names(kernel="matmul")
    assert names(bilinear=True) <= names(tp="elementwise")


def test_a_composed_runs_linear_pairs_hold_the_tables_activations():
    assert tp_plans._ELEMENTWISE == names(tp="activation") == ACTIVATIONS


def test_the_planner_passes_shards_through_the_tables_ops():
    """Matched within an op's text: the former ``newgelu`` and ``gelu_new`` are found by ``gelu``;
    ``mish`` and ``elu`` (a composed run's activations) joined the planner's list."""
    assert set(tp_styles.POINTWISE) == names(tp="activation") | names(tp="pointwise") == ACTIVATIONS | DECOMPOSED
    assert set(tp_styles.ELEMENTWISE) == names(tp="elementwise") == {"mul", "add", "sub", "div"}
    assert all(any(p in text for p in tp_styles.POINTWISE) for text in ("newgelu", "gelu_new", "aten::gelu.default"))


def test_the_flop_check_reads_the_tables_products():
    assert flops.MATMUL_LIKE == names(kernel="matmul") | names(kernel="attention")
    assert all(lookup(name) is not None and lookup(name).is_product for name in flops.MATMUL_LIKE)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "target",
    [
        "aten::mm",
        "aten::bmm.default",
        "aten::addmm_",
        "aten::baddbmm",
        "aten::linear",
        "aten::einsum",
        "aten::_grouped_mm",
        "transformers::grouped_mm_fallback",
        "my::grouped_mm_thing",  # a variant of an entry
        "aten::_scaled_mm",
        "aten::convolution",
        "aten::convolution_backward",
        "aten::scaled_dot_product_attention",
        "aten::_flash_attention_forward",
        "aten::_efficient_attention_forward",
    ],
)
def test_every_op_the_former_flop_list_matched_is_still_matched(target):
    assert flops.unpriced([(target, 0)]) == ((target, 1),)
    assert flops.unpriced([(target, 10)]) == ()


@pytest.mark.parametrize("target", ["aten::relu", "aten::mvlgamma", "aten::add.Tensor", "aten::view"])
def test_ops_without_products_are_never_unpriced(target):
    assert not stems(op_name(target), flops.MATMUL_LIKE)
    assert flops.unpriced([(target, 0)]) == ()


@pytest.mark.parametrize(
    ("target", "grows"),
    [
        ("aten::bmm.default", True),
        ("aten::matmul", True),
        ("aten::baddbmm", True),
        ("aten::einsum", True),
        ("aten::scaled_dot_product_attention", True),
        ("aten::_scaled_dot_product_flash_attention", True),
        ("flex_attention", True),
        ("aten::_grouped_mm", False),
        ("aten::mm", False),
        ("aten::addmm", False),
        ("aten::linear", False),
        ("aten::softmax.int", False),
    ],
)
def test_the_profile_grows_attentions_products_with_the_sequence(target, grows):
    assert _grows_with_sequence(target) is grows


def test_the_forward_scan_reads_batched_and_bilinear_products_off_the_table():
    assert forward_scan.BATCHED == names(batched=True) == BATCHED
    assert forward_scan.BILINEAR == names(bilinear=True) == {"mul", "div"}
