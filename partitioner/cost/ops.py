"""A traced graph's ops as GPU kernels (:class:`~partitioner.kernels.KernelOp`): which curve
prices each (a matrix product by its shape, attention by its sequence, the rest by the bytes they
move), and which ops launch no kernel at all (views, casts to the same dtype). Torch-free; the
times come from :mod:`partitioner.kernels`.
"""

from __future__ import annotations

from typing import Any

from partitioner.kernels import GpuKernels, KernelOp, dtype_name
from partitioner.units import find_dtype

__all__ = ["op_kind", "kernel_op", "is_causal", "op_times", "module_kind"]

_VIEWS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "unsqueeze",
        "squeeze",
        "transpose",
        "t",
        "permute",
        "expand",
        "slice",
        "select",
        "alias",
        "detach",
        "unflatten",
        "flatten",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "getitem",
        "size",
        "sym_size",
        "dim",
        "lift_fresh_copy",
        "dropout",
        "as_strided",
        "expand_as",
        "view_as",
        "narrow",
        "movedim",
        "_assert_tensor_metadata",
        "getattr",
        "identity",
        "flatten_using_ints",
        "numel",
    }
)
_MATMUL = frozenset(
    {
        "linear",
        "mm",
        "addmm",
        "bmm",
        "matmul",
        "baddbmm",
        "einsum",
        "conv1d",
        "conv2d",
        "conv3d",
        "convolution",
        "_grouped_mm",
        "grouped_mm_fallback",
        "grouped_mm",
        "addmv",
        "mv",
        "dot",
        "conv_transpose2d",
    }
)
_ATTENTION = frozenset(
    {
        "scaled_dot_product_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    }
)
_LOSS = frozenset({"cross_entropy", "nll_loss", "cross_entropy_loss", "log_softmax", "_log_softmax"})
_NAMED = {
    "softmax": "softmax",
    "_softmax": "softmax",
    "layer_norm": "layer_norm",
    "native_layer_norm": "layer_norm",
    "group_norm": "layer_norm",
    "batch_norm": "layer_norm",
    "rms_norm": "rms_norm",
    "_fused_rms_norm": "rms_norm",
    "gelu": "gelu",
    "silu": "silu",
    "sigmoid": "silu",
    "tanh": "gelu",
    "add": "add",
    "sub": "add",
    "mul": "add",
    "div": "add",
    "where": "add",
    "maximum": "add",
    "minimum": "add",
    "masked_fill": "add",
    "embedding": "embedding",
}
_MODULES = {
    "linear": "linear",
    "conv1d": "conv1d",
    "conv2d": "conv2d",
    "layernorm": "layer_norm",
    "rmsnorm": "rms_norm",
    "gelu": "gelu",
    "silu": "silu",
    "relu": "add",
    "softmax": "softmax",
    "embedding": "embedding",
    "dropout": "dropout",
    "identity": "identity",
    "crossentropyloss": "cross_entropy",
    "batchnorm2d": "batch_norm",
    "groupnorm": "group_norm",
    "multiheadattention": "linear",
}


def _short(target: str) -> str:
    """``aten::mul.Tensor`` -> ``mul``; ``torch.nn.functional.gelu`` -> ``gelu``."""
    base = target.split("::")[-1].rpartition(".")[2] if "::" not in target else target.split("::")[-1].split(".")[0]
    return (
        base.strip("_")
        if base not in ("_softmax", "_log_softmax", "_grouped_mm", "_unsafe_view", "_fused_rms_norm")
        else base
    )


def op_kind(op: str, target: str, module_kind: str = "") -> str:
    """The kernel class of an op (see :class:`KernelOp`); ``module_kind`` is a ``call_module``'s
    class name (``"Linear"``)."""
    short = _MODULES.get(module_kind.lower(), module_kind.lower()) if op == "call_module" else _short(target)
    if short in _VIEWS:
        return "view"
    if short in _MATMUL:
        return "matmul"
    if short in _ATTENTION:
        return "attention"
    if short in _LOSS:
        return "loss"
    return _NAMED.get(short, "copy")


def kernel_op(graph: Any, v: int, kind: str, causal: bool = True) -> KernelOp:
    """The :class:`KernelOp` of node ``v`` of a :class:`~partitioner.graph.Graph`."""
    node = graph.nodes[v]
    dtype = dtype_name(node.dtype)
    moved = float(graph.activation_bytes(v) + node.param_bytes)
    shape: tuple[int, ...] = node.shape or ()
    numel = 1.0
    for d in shape:
        numel *= d
    casts = ("to", "_to_copy", "contiguous", "clone", "type_as", "float", "half", "bfloat16", "type")
    if kind == "view" or (kind == "copy" and _short(node.target) in casts and _same_as_input(graph, v)):
        return KernelOp("view", dtype)  # a cast to the same dtype, or contiguous on a contiguous tensor
    if kind == "matmul" and node.flops > 0 and numel > 0:
        if len(shape) == 4 and node.op == "call_module" or "conv" in node.target:
            n = float(shape[1]) if len(shape) >= 3 else float(shape[-1])
        else:
            n = float(shape[-1]) if shape else 1.0
        m = max(numel / n, 1.0)
        k = max(node.flops / (2.0 * numel), 1.0)
        experts = 0.0
        if "grouped_mm" in node.target:  # packed experts' weights: (experts, ., .)
            packed = [graph.nodes[u].shape for u in node.inputs if len(graph.nodes[u].shape or ()) == 3]
            experts = float(packed[0][0]) if packed else 0.0
        return KernelOp("matmul", dtype, m=m, k=k, n=n, experts=experts)
    if kind == "attention" and len(shape) >= 3 and node.flops > 0:
        seq, head_dim = float(shape[-2]), float(shape[-1])
        heads = max(numel / (seq * head_dim), 1.0)
        return KernelOp("attention", dtype, m=heads, k=head_dim, n=seq, causal=causal)
    if kind == "loss":
        logits = max((graph.output_bytes[u] for u in graph.preds[v]), default=0)
        return KernelOp("loss", dtype, nbytes=float(logits) / max(_element_bytes(dtype), 1))
    if kind == "embedding":  # reads the rows it gathers, writes them: not the whole table
        return KernelOp(kind, dtype, nbytes=2.0 * node.output_bytes)
    if kind in ("matmul", "attention"):
        kind = "copy"
    return KernelOp(kind, dtype, nbytes=moved, fixed_bytes=float(node.param_bytes))


def _element_bytes(dtype: str) -> int:
    """One element's bytes by the dtype table; 4 for a type it does not hold."""
    found = find_dtype(dtype)
    return found.bytes if found is not None else 4


def _same_as_input(graph: Any, v: int) -> bool:
    node = graph.nodes[v]
    ins = [graph.nodes[u] for u in node.inputs if graph.nodes[u].op != "get_attr"]
    return bool(ins) and ins[0].dtype == node.dtype and ins[0].shape == node.shape


def is_causal(graph: Any) -> bool:
    """Whether the model's attention is causal: a decoder (``*ForCausalLM``, ``*LMHeadModel``),
    read from the traced model's classes; an encoder (BERT, ViT) attends both ways."""
    classes = " ".join(" ".join(c) for c in graph.model_info.module_classes.values())
    if not classes:
        return True
    return any(k in classes for k in ("CausalLM", "LMHead", "Decoder", "GPT", "Llama", "Mistral", "Mixtral"))


def op_times(graph: Any, kernels: GpuKernels, module_kind: Any = None) -> tuple[list[KernelOp | None], list[float]]:
    """Per node index: its :class:`KernelOp` (None for non-ops) and its kernel seconds. O(N + E)."""
    causal = is_causal(graph)
    ops: list[KernelOp | None] = []
    times: list[float] = []
    for v, node in enumerate(graph.nodes):
        if not node.is_op:
            ops.append(None)
            times.append(0.0)
            continue
        op = kernel_op(graph, v, op_kind(node.op, node.target, module_kind(node) if module_kind else ""), causal)
        ops.append(op)
        times.append(kernels.kernel_s(op))
    return ops, times


def module_kind(graph: Any, node: Any) -> str:
    """The type name of the module a ``call_module`` node calls (``"GELU"``), read from the traced
    module when the graph has one; "" otherwise."""
    if node.op != "call_module" or graph.graph_module is None:
        return ""
    try:
        return type(graph.graph_module.get_submodule(node.target)).__name__
    except AttributeError:
        return ""
