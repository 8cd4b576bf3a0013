"""A traced GraphModule as plain data that pickles, for the joint trace's worker process (torch).

A GraphModule made by ``torch.export`` (every ``hf:`` model) does not pickle: its forward hooks
are local lambdas, its ``_guards_fn`` submodule is generated code, and fx's own pickling
re-traces the generated source, which renames the nodes and drops the export pytree codegen.
:func:`to_portable` keeps what the joint trace needs, by name: each node's op, target (aten
operators as ``namespace::name.overload``, found again in ``torch.ops``), arguments and the
tensors and submodules it reads (parameters stay the same ``Parameter`` objects, so tied weights
stay one tensor); :func:`from_portable` rebuilds a plain ``fx.GraphModule`` whose nodes carry the
same names. Export's input guard (a ``call_module`` of ``_guards_fn`` with no users: it checks
the example shapes and returns nothing) is left out.

:func:`materialize` makes weights on the meta device (shapes only: large ``hf:`` models) fake CPU
tensors, so the joint trace runs at any size with no memory: min-cut's choices depend on shapes
and operators, not on values.
"""

from __future__ import annotations

import copy
import importlib
import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

__all__ = ["PortableGraph", "to_portable", "from_portable", "materialize"]


@dataclass(frozen=True)
class _NodeRef:
    name: str


@dataclass(frozen=True)
class _OpRef:
    namespace: str
    name: str
    overload: str
    module: str | None = None  # the module that registers a custom op (transformers' MoE fallback)

    def resolve(self) -> Any:
        if self.module:
            importlib.import_module(self.module)
        return getattr(getattr(getattr(torch.ops, self.namespace), self.name), self.overload)


@dataclass(frozen=True)
class _HigherOrderRef:
    name: str

    def resolve(self) -> Any:
        return getattr(torch.ops.higher_order, self.name)


@dataclass(frozen=True)
class PortableGraph:
    """A graph's nodes ``(name, op, target, args, kwargs)`` with node references by name, and the
    attributes (qualified name -> tensor, module or nested PortableGraph) its nodes read."""

    nodes: tuple[tuple[str, str, Any, Any, Any], ...]
    attrs: dict[str, Any]


def _target(target: Any) -> Any:
    if isinstance(target, torch._ops.OpOverload):
        from torch._library.custom_ops import OPDEFS

        name = target._schema.name.split("::", 1)[-1]
        custom = OPDEFS.get(f"{target.namespace}::{name}")
        return _OpRef(
            target.namespace, name, target._overloadname, custom._init_fn.__module__ if custom is not None else None
        )
    if isinstance(target, torch._ops.HigherOrderOperator):
        return _HigherOrderRef(target.name())
    return target


def _is_guard(node: fx.Node) -> bool:
    return node.op == "call_module" and str(node.target) == "_guards_fn" and not node.users


def to_portable(gm: fx.GraphModule) -> PortableGraph:
    """``gm`` as picklable data. O(N) for N nodes."""
    nodes = []
    attrs: dict[str, Any] = {}
    for n in gm.graph.nodes:
        if _is_guard(n):
            continue
        if n.op in ("get_attr", "call_module"):
            value = operator.attrgetter(str(n.target))(gm)
            if isinstance(value, fx.GraphModule):
                value = to_portable(value)
            elif isinstance(value, torch.nn.Module) and any(t.is_meta for t in [*value.parameters(), *value.buffers()]):
                value = copy.deepcopy(value)  # materialize() fills it: leave the caller's module as it was
            attrs[str(n.target)] = value
        args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: _NodeRef(a.name))  # type: ignore[arg-type, return-value]
        nodes.append((n.name, n.op, _target(n.target), args, kwargs))
    return PortableGraph(tuple(nodes), attrs)


def from_portable(portable: PortableGraph) -> fx.GraphModule:
    """The plain ``fx.GraphModule`` :func:`to_portable` described, its nodes named as before."""
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}

    def back(value: Any) -> Any:
        if isinstance(value, _NodeRef):
            return env[value.name]
        if isinstance(value, tuple):
            return tuple(back(v) for v in value)
        if isinstance(value, list):
            return [back(v) for v in value]
        if isinstance(value, dict):
            return {k: back(v) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(back(value.start), back(value.stop), back(value.step))
        return value

    for name, op, target, args, kwargs in portable.nodes:
        if isinstance(target, (_OpRef, _HigherOrderRef)):
            target = target.resolve()
        args = back(args)
        if target is torch.ops.aten.histc.default and args:
            # A mixture of experts counts tokens per expert with histc on integer ids, which CPU
            # kernels (and so fake tensors on the CPU) lack: count them as floats, the same counts.
            args = (
                graph.call_function(torch.ops.aten._to_copy.default, (args[0],), {"dtype": torch.float32}),
                *args[1:],
            )
        node = graph.create_node(op, target, args, back(kwargs), name=name)
        env[name] = node
    root = {k: from_portable(v) if isinstance(v, PortableGraph) else v for k, v in portable.attrs.items()}
    return fx.GraphModule(root, graph)


def _fake(t: torch.Tensor, mode: Any) -> torch.Tensor:
    """A fake CPU tensor of ``t``'s shape and dtype (no storage), a Parameter where ``t`` is one."""
    with mode:
        value = torch.empty(t.shape, dtype=t.dtype, device="cpu")
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(value, requires_grad=t.requires_grad)
    return value


def materialize(gm: torch.nn.Module, inputs: tuple[Any, ...]) -> tuple[tuple[Any, ...], bool]:
    """Make a model whose weights are on the meta device runnable for a trace: every meta tensor
    of ``gm`` (in place; a tensor reached twice stays one) becomes a fake CPU tensor of the same
    shape and dtype (``FakeTensorMode``: shapes and dtypes, no storage, so Llama-3-70B costs no
    memory), the inputs become fakes of the same mode, and the graph's ops that name the meta device
    name the CPU (so CPU kernels' decompositions are traced, as for real weights). Returns the
    inputs and whether anything was made fake (then the run computes no values)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    done: dict[int, torch.Tensor] = {}
    for module in gm.modules():
        for store in (module._parameters, module._buffers):
            for key, t in list(store.items()):
                if t is not None and t.is_meta:
                    store[key] = done.setdefault(id(t), _fake(t, mode))  # type: ignore[assignment]
        for key, t in list(vars(module).items()):  # plain tensor attributes (export's constants)
            if isinstance(t, torch.Tensor) and t.is_meta:
                setattr(module, key, done.setdefault(id(t), _fake(t, mode)))
    if not done and not any(isinstance(x, torch.Tensor) and x.is_meta for x in inputs):
        return inputs, False
    meta = torch.device("meta")

    def cpu(value: Any) -> Any:
        if isinstance(value, torch.device) and value == meta:
            return torch.device("cpu")
        if isinstance(value, str) and value == "meta":
            return "cpu"
        if isinstance(value, (tuple, list)):
            return type(value)(cpu(v) for v in value)
        if isinstance(value, dict):
            return {k: cpu(v) for k, v in value.items()}
        return value

    for module in gm.modules():  # the trace wrote the meta device into its ops (``arange``, ``to``)
        if isinstance(module, fx.GraphModule):
            for n in module.graph.nodes:
                n.args, n.kwargs = cpu(n.args), cpu(n.kwargs)
            module.recompile()
    return tuple(
        _fake(x, mode)
        if isinstance(x, torch.Tensor) and x.is_meta
        else mode.from_tensor(x)
        if isinstance(x, torch.Tensor)
        else x
        for x in inputs
    ), True
