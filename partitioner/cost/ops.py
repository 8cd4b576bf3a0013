"""A traced graph's ops as GPU kernels (:class:`~partitioner.kernels.KernelOp`): which curve
prices each (a matrix product by its shape, attention by its sequence, the rest by the bytes they
move), and which ops launch no kernel at all (views, casts to the same dtype). Torch-free; the
times come from :mod:`partitioner.kernels`.
"""

from __future__ import annotations

from typing import Any

from partitioner.kernels import GpuKernels, KernelOp, dtype_name
from partitioner.op_table import OPS, module_op, op_name, returns_input
from partitioner.units import find_dtype

__all__ = ["op_kind", "kernel_op", "is_causal", "op_times", "module_kind", "input_dtype", "is_no_op_cast"]


def op_kind(op: str, target: str, module_kind: str = "") -> str:
    """The kernel class of an op (see :class:`KernelOp`) by the op table (NOTE: [One op table] in
    :mod:`partitioner.op_table`); ``module_kind`` is a ``call_module``'s class name (``"Linear"``).
    A cast is a copy here: :func:`kernel_op` makes it a view when it keeps its input's dtype."""
    found = OPS.get(module_op(module_kind) if op == "call_module" else op_name(target))
    if found is None or found.kernel == "cast":
        return "copy"
    return found.kernel


def kernel_op(graph: Any, v: int, kind: str, causal: bool = True) -> KernelOp:
    """The :class:`KernelOp` of node ``v`` of a :class:`~partitioner.graph.Graph`."""
    node = graph.nodes[v]
    dtype = dtype_name(node.dtype)
    moved = float(graph.activation_bytes(v) + node.param_bytes)
    shape: tuple[int, ...] = node.shape or ()
    numel = 1.0
    for d in shape:
        numel *= d
    if kind == "view" or (kind == "copy" and is_no_op_cast(graph, v)):
        return KernelOp("view", dtype)  # a cast to the dtype it has: torch returns its input
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


def _first_input(graph: Any, v: int) -> Any:
    """The node ``v`` reads first, a module's weights (``get_attr``) apart; None when none."""
    return next((graph.nodes[u] for u in graph.nodes[v].inputs if graph.nodes[u].op != "get_attr"), None)


def input_dtype(graph: Any, v: int) -> str | None:
    """The dtype of the tensor node ``v`` reads first (what a cast casts); None when unknown."""
    first = _first_input(graph, v)
    return first.dtype if first is not None else None


def is_no_op_cast(graph: Any, v: int) -> bool:
    """Whether node ``v`` is a cast torch answers with its input itself (the dtype and shape stay:
    :func:`partitioner.op_table.returns_input`): no kernel, no bytes. O(inputs)."""
    node, first = graph.nodes[v], _first_input(graph, v)
    if node.op == "call_module" or first is None or first.shape != node.shape:
        return False
    return returns_input(node.target, first.dtype, node.dtype)


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
