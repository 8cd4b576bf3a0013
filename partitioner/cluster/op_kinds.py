"""The op classes of NOTE: [Saved activations] in :mod:`partitioner.cluster.saved`: which ops (and
which ``nn`` modules, by class) are views, matrix products, norms, attention, softmax, pointwise
(linear in their inputs or not) and reductions, as torch's ``derivatives.yaml`` decides what each
keeps for its backward. Read off the one op table (:mod:`partitioner.op_table`, NOTE: [One op
table]). Torch-free."""

from __future__ import annotations

from partitioner.graph import Graph
from partitioner.op_table import module_op, names, op_name

__all__ = [
    "VIEW",
    "PRODUCT",
    "NORM",
    "ATTENTION",
    "SOFTMAX",
    "LINEAR_POINTWISE",
    "NONLINEAR_POINTWISE",
    "REDUCTION",
    "op_base",
    "module_kind",
]

VIEW = names(saves="same")  # a view, cast or copy of a value is that value
PRODUCT = names(saves="product")
NORM = names(saves="norm")
ATTENTION = names(saves="attention")
SOFTMAX = names(saves="softmax")
LINEAR_POINTWISE = names(saves="linear")
REDUCTION = names(saves="reduction")
NONLINEAR_POINTWISE = names(saves="nonlinear") | REDUCTION


def op_base(target: str) -> str:
    """``"aten::addmm"`` or ``"aten::add.Tensor"`` -> ``"addmm"``, ``"add"`` (:func:`partitioner.op_table.op_name`)."""
    return op_name(target)


def module_kind(graph: Graph, v: int) -> str:
    """A ``call_module`` node's op kind by its module's class (``Linear`` -> ``linear``,
    ``LayerNorm`` -> ``layer_norm``); other modules are kept whole (they keep their inputs)."""
    classes = graph.model_info.module_classes.get(graph.nodes[v].target, ())
    return module_op(classes[0] if classes else graph.nodes[v].target.rsplit(".", 1)[-1])
