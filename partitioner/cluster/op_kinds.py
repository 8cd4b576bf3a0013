"""The op classes of NOTE: [Saved activations] in :mod:`partitioner.cluster.saved`: which aten ops
(and which ``nn`` modules, by class) are views, matrix products, norms, attention, softmax,
pointwise (linear in their inputs or not) and reductions, as torch's ``derivatives.yaml`` decides
what each keeps for its backward. Torch-free."""

from __future__ import annotations

from partitioner.graph import Graph

__all__ = [
    "VIEW",
    "PRODUCT",
    "NORM",
    "ATTENTION",
    "SOFTMAX",
    "LINEAR_POINTWISE",
    "NONLINEAR_POINTWISE",
    "REDUCTION",
    "MODULES",
    "op_base",
    "module_kind",
]

VIEW = {
    "view",
    "reshape",
    "_unsafe_view",
    "transpose",
    "permute",
    "expand",
    "expand_as",
    "unsqueeze",
    "squeeze",
    "contiguous",
    "clone",
    "getitem",
    "split",
    "split_with_sizes",
    "chunk",
    "slice",
    "select",
    "t",
    "alias",
    "detach",
    "flatten",
    "unflatten",
    "to",
    "_to_copy",
    "type_as",
    "view_as",
    "narrow",
    "movedim",
    "lift_fresh_copy",
    "float",
    "half",
    "bfloat16",
    "type",
    "identity",
}
PRODUCT = {
    "mm",
    "addmm",
    "linear",
    "matmul",
    "bmm",
    "baddbmm",
    "einsum",
    "conv1d",
    "conv2d",
    "conv3d",
    "convolution",
    "_grouped_mm",
    "grouped_mm",
}
NORM = {
    "layer_norm",
    "native_layer_norm",
    "rms_norm",
    "_fused_rms_norm",
    "group_norm",
    "batch_norm",
    "native_batch_norm",
    "instance_norm",
}
ATTENTION = {
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "flex_attention",
    "_flash_attention_forward",
    "_efficient_attention_forward",
}
SOFTMAX = {"softmax", "_softmax", "log_softmax", "_log_softmax", "safe_softmax", "_safe_softmax"}
LINEAR_POINTWISE = {"add", "sub", "neg", "cat", "where", "masked_fill", "rsub", "stack", "mul", "div"}
NONLINEAR_POINTWISE = {
    "pow",
    "tanh",
    "sigmoid",
    "silu",
    "gelu",
    "relu",
    "exp",
    "log",
    "rsqrt",
    "sqrt",
    "erf",
    "reciprocal",
    "square",
    "abs",
    "clamp",
    "softplus",
    "mish",
    "elu",
    "leaky_relu",
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "sin",
    "cos",
    "log1p",
    "expm1",
    "relu6",
    "mean",
    "var",
    "sum",
    "amax",
    "var_mean",
    "std",
    "norm",
}
REDUCTION = {"mean", "var", "sum", "amax", "var_mean", "std", "norm"}


def op_base(target: str) -> str:
    """``"aten::addmm"`` or ``"aten::add.Tensor"`` -> ``"addmm"``, ``"add"``."""
    return (
        target.split("::")[-1].split(".")[0].lower().strip("_")
        if "::" in target
        else target.rsplit(".", 1)[-1].lower().strip("_")
    )


MODULES = {
    "linear": "linear",
    "conv1d": "conv1d",
    "conv2d": "conv2d",
    "conv3d": "conv3d",
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
    "identity": "view",
    "flatten": "view",
}


def module_kind(graph: Graph, v: int) -> str:
    """A ``call_module`` node's op kind by its module's class (``Linear`` -> ``linear``,
    ``LayerNorm`` -> ``layer_norm``); other modules are kept whole (they keep their inputs)."""
    classes = graph.model_info.module_classes.get(graph.nodes[v].target, ())
    name = (classes[0] if classes else graph.nodes[v].target.rsplit(".", 1)[-1]).lower()
    return MODULES.get(name, name)
