"""One table of the ops a traced graph holds: each op's name as one normaliser writes it, and one
record an op (is it a view, the kernel class it is priced by, what autograd keeps of it for the
backward, how a tensor-parallel shard passes it). Torch-free, and imports nothing of the house: the
cost model (:mod:`partitioner.cost.ops`), the device profile, the cluster planner
(:mod:`partitioner.cluster.op_kinds`, its profile and forward scan), the tracer and its FLOP check,
the recomputation reader, tensor parallelism and a composed run's Linear pairs all read it, so they
cannot disagree on an op.

    >>> op_name("aten::transpose.int"), op_name("torch.nn.functional.gelu"), op_name("add_")
    ('transpose', 'gelu', 'add')
    >>> lookup("aten::slice.Tensor").is_view, lookup("flex_attention").kernel
    (True, 'attention')

# NOTE: [One op table]
An op is named by what its target says, whatever the trace: ``aten::add.Tensor`` (an exported
graph), ``aten.add.Tensor`` (an ``OpOverload``'s ``str``), ``torch.nn.functional.gelu`` or
``gelu`` (a ``symbolic_trace`` function), ``_operator.truediv`` or ``truediv`` (Python's
operators, written as their aten op: ``div``), ``<built-in function add>``, a method name
(``transpose``), an in-place form (``add_``) or a dunder (``__and__``): :func:`op_name` gives the
bare name, keeping a leading underscore (``_unsafe_view`` and ``view`` are two ops). A module call
is named by its class (``LayerNorm`` -> ``layer_norm``, :func:`module_op`). An op the table does not
hold is a copy of its bytes to the cost model and keeps its inputs to the planner.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

__all__ = [
    "OpInfo",
    "KERNELS",
    "SAVES",
    "SHAPES",
    "TP_RULES",
    "OPS",
    "MODULES",
    "VIEWS",
    "op_name",
    "module_op",
    "lookup",
    "is_view",
    "returns_input",
    "names",
    "stems",
]

# The kernel classes the cost model prices ops by (partitioner.kernels.KernelOp's kinds, plus
# "cast": no kernel when the op keeps its input's dtype, else a copy; see returns_input).
KERNELS = (
    "view",
    "cast",
    "copy",
    "add",
    "gelu",
    "silu",
    "softmax",
    "layer_norm",
    "rms_norm",
    "embedding",
    "matmul",
    "attention",
    "loss",
)
# What autograd keeps for the backward (NOTE: [Saved activations] in partitioner.cluster.saved):
# "same" its output is its input's value (a view, cast or copy); "product" its activation operands;
# "norm" its input; "attention" query, key, value and output; "softmax" its output; "linear" /
# "nonlinear" / "reduction" pointwise, as a fused region keeps; "mask" a dropout's mask; "" the
# planner's generic rule (its inputs).
SAVES = ("same", "product", "norm", "attention", "softmax", "linear", "nonlinear", "reduction", "mask", "")
# How the output's shape follows the input's: "reshape" any shape of the same elements (how a
# projection's features become heads); "same" the same elements in the same shape; "" otherwise.
SHAPES = ("reshape", "same", "")
# How a tensor-parallel shard passes the op (NOTE: [Shards through ops]): "activation" an activation
# layer or function, "pointwise" another op on one tensor, "elementwise" an op on tensors all
# sharded alike; "" it does not.
TP_RULES = ("activation", "pointwise", "elementwise", "")


@dataclass(frozen=True)
class OpInfo:
    """One op (NOTE: [One op table])."""

    name: str  # as op_name writes it
    kernel: str = "copy"  # KERNELS
    saves: str = ""  # SAVES
    shape: str = ""  # SHAPES
    tp: str = ""  # TP_RULES
    batched: bool = False  # a batched product: how eager attention writes Q K^T and scores x V
    bilinear: bool = False  # linear in each operand apart: of two activations, its backward reads both

    @property
    def is_view(self) -> bool:
        """Whether the op moves no bytes and launches no kernel: a view, an index, a shape query
        (only its dispatch is paid)."""
        return self.kernel == "view"

    @property
    def is_matmul(self) -> bool:
        """Whether the op is a matrix product (a linear, a convolution, a batched or grouped matmul)."""
        return self.kernel == "matmul"

    @property
    def is_attention(self) -> bool:
        """Whether the op is attention in one kernel (sdpa and its fused forms, flex attention)."""
        return self.kernel == "attention"

    @property
    def is_product(self) -> bool:
        """Whether the op does matmul-sized work: a matrix product or attention."""
        return self.is_matmul or self.is_attention


def _ops(kernel: str, saves: str, names: str, shape: str = "") -> list[OpInfo]:
    return [OpInfo(name, kernel, saves, shape) for name in names.split()]


_ROWS = (
    # Views: a new shape or an index over the input's storage.
    _ops("view", "same", "view _unsafe_view reshape unflatten", "reshape")
    + _ops(
        "view",
        "same",
        "unsqueeze squeeze transpose t permute expand expand_as view_as slice select narrow movedim "
        "as_strided flatten split split_with_sizes chunk unbind getitem",
    )
    + _ops("view", "same", "alias detach identity lift_fresh_copy contiguous", "same")
    # No tensor at all: shape queries and checks.
    + _ops("view", "", "size sym_size dim numel getattr _assert_tensor_metadata")
    # Dropout launches nothing as traced (inference); training keeps its mask.
    + _ops("view", "mask", "dropout")
    # Casts: the same elements in the same shape, the input itself when its dtype stays.
    + _ops("cast", "same", "to type_as float half bfloat16 type", "same")
    # Copies: a new tensor whatever its dtype (_to_copy: the cast a decomposed graph writes).
    + _ops("copy", "same", "clone _to_copy", "same")
    + _ops(
        "matmul",
        "product",
        "linear mm addmm bmm matmul baddbmm einsum addmv mv dot conv1d conv2d conv3d convolution "
        "conv_transpose2d _grouped_mm grouped_mm grouped_mm_fallback _scaled_mm multi_head_attention",
    )
    + _ops(
        "attention",
        "attention",
        "scaled_dot_product_attention _scaled_dot_product_flash_attention "
        "_scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention flex_attention "
        "_flash_attention_forward _efficient_attention_forward",
    )
    + _ops("loss", "", "cross_entropy nll_loss cross_entropy_loss")
    + _ops("loss", "softmax", "log_softmax _log_softmax")
    + _ops("softmax", "softmax", "softmax _softmax safe_softmax _safe_softmax")
    + _ops("layer_norm", "norm", "layer_norm native_layer_norm group_norm batch_norm native_batch_norm instance_norm")
    + _ops("rms_norm", "norm", "rms_norm _fused_rms_norm")
    + _ops("gelu", "nonlinear", "gelu tanh")
    + _ops("silu", "nonlinear", "silu sigmoid")
    + _ops("add", "linear", "add sub mul div where masked_fill")
    + _ops("add", "", "maximum minimum")
    + _ops("copy", "linear", "neg cat rsub stack")
    + _ops(
        "copy",
        "nonlinear",
        "pow exp log rsqrt sqrt erf reciprocal square abs clamp softplus mish elu leaky_relu hardtanh "
        "hardswish hardsigmoid sin cos log1p expm1 relu relu6",
    )
    + _ops("copy", "reduction", "mean var sum amax var_mean std norm")
    + _ops("embedding", "", "embedding")
)
# NOTE: [Shards through ops]
# A column-parallel layer's output is split along its features; an op on that one tensor alone
# (an activation, a power, an exponential) or on tensors all split alike (a gated MLP's gate * up)
# keeps it split, so it may stand between the column- and the row-parallel layer of a pair
# (Megatron-LM's MLP). The planner (partitioner.sharding) passes shards through "activation" and
# "pointwise" ops and through "elementwise" ones; a composed run's Linear pairs
# (partitioner.cluster.run.tp_plans) accept "activation" layers and functions alone.
_TP = {
    "activation": "relu gelu silu tanh sigmoid mish leaky_relu elu dropout identity",
    "pointwise": "alias pow neg exp erf sqrt",
    "elementwise": "mul add sub div",
}
_BATCHED = "bmm baddbmm matmul einsum".split()
_BILINEAR = "mul div".split()
_RULE = {name: rule for rule, words in _TP.items() for name in words.split()}
_TABLE = tuple(
    replace(op, tp=_RULE.get(op.name, ""), batched=op.name in _BATCHED, bilinear=op.name in _BILINEAR) for op in _ROWS
)
OPS: dict[str, OpInfo] = {op.name: op for op in _TABLE}
VIEWS = frozenset(name for name, op in OPS.items() if op.is_view)

# A module call's op, by its class name in lower case (nn.LayerNorm -> layer_norm); a class not
# here is named by itself in lower case.
MODULES = {
    "linear": "linear",
    "conv1d": "conv1d",  # nn.Conv1d, and GPT-2's Conv1D (a transposed linear)
    "conv2d": "conv2d",
    "conv3d": "conv3d",
    "convtranspose2d": "conv_transpose2d",
    "multiheadattention": "multi_head_attention",
    "embedding": "embedding",
    "layernorm": "layer_norm",
    "rmsnorm": "rms_norm",
    "groupnorm": "group_norm",
    "batchnorm1d": "batch_norm",
    "batchnorm2d": "batch_norm",
    "dropout": "dropout",
    "gelu": "gelu",
    "relu": "relu",
    "silu": "silu",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "softmax": "softmax",
    "identity": "identity",
    "flatten": "flatten",
    "crossentropyloss": "cross_entropy",
}

# Python's operators under their aten names (``a / b`` is ``truediv`` in a symbolic trace).
_OPERATORS = {
    "truediv": "div",
    "itruediv": "div",
    "floordiv": "floor_divide",
    "iadd": "add",
    "isub": "sub",
    "imul": "mul",
    "mod": "remainder",
}
_NAMESPACES = ("aten.", "prims.", "transformers.", "_c10d_functional.", "c10d_functional.")
_WRAPPED = re.compile(r"<(?:built-in function|built-in method|function|method) '?([\w.]+)'?")


def op_name(target: object) -> str:
    """The op a node's target names (NOTE: [One op table]): ``"aten::add.Tensor"`` -> ``"add"``,
    ``"torch.nn.functional.gelu"`` -> ``"gelu"``, ``"_operator.truediv"`` -> ``"div"``,
    ``"add_"`` -> ``"add"``; a leading underscore stays (``"aten::_softmax"`` -> ``"_softmax"``). O(len)."""
    text = str(target).strip()
    wrapped = _WRAPPED.match(text)
    if wrapped:
        text = wrapped.group(1)
    if "::" in text:  # aten::add.Tensor: the overload follows the name
        text = text.rpartition("::")[2].partition(".")[0]
    elif text.startswith(_NAMESPACES):  # aten.add.Tensor
        text = text.split(".")[1]
    else:  # torch.nn.functional.gelu, _operator.add, Tensor.view, a method's name
        text = text.rpartition(".")[2]
    name = text.lower()
    if len(name) > 4 and name.startswith("__") and name.endswith("__"):
        name = name[2:-2]  # __and__, __getitem__
    elif len(name) > 1 and name.endswith("_") and not name.endswith("__"):
        name = name.rstrip("_")  # in place: add_
    return _OPERATORS.get(name, name)


def module_op(class_name: str) -> str:
    """The op a module call is, by the module's class name (``"LayerNorm"`` -> ``"layer_norm"``)."""
    lowered = class_name.lower()
    return MODULES.get(lowered, lowered)


def lookup(target: object) -> OpInfo | None:
    """The record of the op ``target`` names (any form :func:`op_name` reads), or None."""
    return OPS.get(op_name(target))


def is_view(target: object) -> bool:
    """Whether ``target`` names a view (:attr:`OpInfo.is_view`)."""
    found = lookup(target)
    return found is not None and found.is_view


def returns_input(target: object, in_dtype: object, out_dtype: object) -> bool:
    """Whether torch answers the op with its input itself: a cast of the table (``to``,
    ``type_as``, ``float``, ``half``, ``bfloat16``, ``type``) to the dtype its input already has
    (``t.to(t.dtype) is t``), so no kernel runs and no byte moves: only its dispatch is paid, as a
    view's. ``clone`` and ``_to_copy`` copy whatever the dtype. Dtypes as a graph writes them
    (``"torch.float32"`` and ``"float32"`` alike); None is unknown (not the same). O(1)."""
    found = lookup(target)
    if found is None or found.kernel != "cast" or in_dtype is None or out_dtype is None:
        return False
    return str(in_dtype).removeprefix("torch.") == str(out_dtype).removeprefix("torch.")


def names(
    *,
    kernel: str | None = None,
    saves: str | None = None,
    shape: str | None = None,
    tp: str | None = None,
    batched: bool | None = None,
    bilinear: bool | None = None,
) -> frozenset[str]:
    """The ops with that kernel class, saved-value class, shape rule, tensor-parallel rule and
    batched and bilinear flags (each when given). O(ops)."""
    return frozenset(
        op.name
        for op in _TABLE
        if (kernel is None or op.kernel == kernel)
        and (saves is None or op.saves == saves)
        and (shape is None or op.shape == shape)
        and (tp is None or op.tp == tp)
        and (batched is None or op.batched == batched)
        and (bilinear is None or op.bilinear == bilinear)
    )


def stems(name: str, of: frozenset[str]) -> bool:
    """Whether op ``name`` is one of ``of`` or a variant of one (``grouped_mm_fallback``,
    ``convolution_backward``: an entry then ``_``): how a custom or backward op is matched. O(|of|)."""
    return name in of or any(name.startswith(f"{op}_") for op in of)
