"""Rewrite in-place ops of a traced graph as out-of-place ones, so a plan may cut anywhere.

# NOTE: [In-place ops and partitions]
``y = relu(x); y.mul_(2); return y.tanh()`` reads ``y`` after the mutation, but the graph says
``tanh`` reads ``relu``'s output: if ``mul_`` runs in another partition (another process, or
merely after ``tanh`` in the split's order) ``tanh`` sees the value before the mutation. As
torch.export's functionalization does, each in-place op becomes its out-of-place twin and every
later reader of the mutated value reads the op's result instead, so data flow is explicit and
any partition is correct. Mutations of a view's base (``x.view(...).add_(1)`` changing ``x``)
are not followed; torch.export graphs are functional already. O(N + E).
"""

from __future__ import annotations

import copy
import logging
import operator
from typing import Any, Callable

import torch
import torch.fx as fx

__all__ = ["remove_inplace"]

logger = logging.getLogger(__name__)

_INPLACE_OPERATORS: dict[Callable[..., Any], Callable[..., Any]] = {
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.itruediv: operator.truediv,
    operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod,
    operator.ipow: operator.pow,
    operator.iand: operator.and_,
    operator.ior: operator.or_,
    operator.ixor: operator.xor,
    operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift,
    operator.imatmul: operator.matmul,
}


def _rewrite(node: fx.Node, gm: fx.GraphModule) -> bool:
    """Make ``node`` out-of-place if it mutates its first argument; True when it did."""
    if node.op == "call_method" and isinstance(node.target, str):
        name = node.target
        if name.endswith("_") and not name.startswith("_") and hasattr(torch.Tensor, name[:-1]):
            node.target = name[:-1]
            return True
    elif node.op == "call_function":
        if node.target in _INPLACE_OPERATORS:
            node.target = _INPLACE_OPERATORS[node.target]
            return True
        name = getattr(node.target, "__name__", "")
        if (
            name.endswith("_")
            and not name.startswith("_")
            and getattr(node.target, "__module__", "") in ("torch", "torch._C._VariableFunctions")
            and hasattr(torch, name[:-1])
        ):
            node.target = getattr(torch, name[:-1])
            return True
        if node.kwargs.get("inplace") is True:
            node.kwargs = {**node.kwargs, "inplace": False}
            return True
    elif node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        if getattr(module, "inplace", False) is True:
            twin = copy.copy(module)  # the person's module keeps its own setting
            setattr(twin, "inplace", False)
            parent, _, leaf = str(node.target).rpartition(".")
            setattr(gm.get_submodule(parent) if parent else gm, leaf, twin)
            return True
    return False


def remove_inplace(gm: fx.GraphModule) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """``gm`` with its in-place ops made out-of-place (a new GraphModule sharing the modules when
    any changed; ``gm`` itself otherwise) and the names of the nodes rewritten."""
    candidates = [n for n in gm.graph.nodes if n.op.startswith("call") and n.args and isinstance(n.args[0], fx.Node)]
    if not any(_mutates(n, gm) for n in candidates):
        return gm, ()
    graph = copy.deepcopy(gm.graph)
    out = fx.GraphModule(gm, graph)
    order = {n: i for i, n in enumerate(graph.nodes)}
    changed = []
    for node in list(graph.nodes):
        if not (node.op.startswith("call") and node.args and isinstance(node.args[0], fx.Node)):
            continue
        mutated = node.args[0]
        if not _rewrite(node, out):
            continue
        for user in list(mutated.users):
            if user is not node and order[user] > order[node]:
                user.replace_input_with(mutated, node)
        changed.append(node.name)
    graph.lint()
    out.recompile()
    logger.info("made %d in-place op(s) out-of-place: %s", len(changed), ", ".join(changed))
    return out, tuple(changed)


def _mutates(node: fx.Node, gm: fx.GraphModule) -> bool:
    if node.op == "call_method":
        return isinstance(node.target, str) and node.target.endswith("_") and not node.target.startswith("_")
    if node.op == "call_function":
        name = getattr(node.target, "__name__", "")
        return (
            node.target in _INPLACE_OPERATORS
            or node.kwargs.get("inplace") is True
            or (name.endswith("_") and not name.startswith("_"))
        )
    if node.op == "call_module":
        return getattr(gm.get_submodule(str(node.target)), "inplace", False) is True
    return False
