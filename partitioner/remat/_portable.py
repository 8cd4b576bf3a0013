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

:func:`materialize` gives weights on the meta device (shapes only: large ``hf:`` models) random
values, so the model can run: min-cut's choices depend on shapes and operators, not on values.
"""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

__all__ = ["PortableGraph", "to_portable", "from_portable", "materialize", "meta_bytes"]


@dataclass(frozen=True)
class _NodeRef:
    name: str


@dataclass(frozen=True)
class _OpRef:
    namespace: str
    name: str
    overload: str

    def resolve(self) -> Any:
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
        return _OpRef(target.namespace, target._schema.name.split("::", 1)[-1], target._overloadname)
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
        node = graph.create_node(op, target, back(args), back(kwargs), name=name)
        env[name] = node
    root = {k: from_portable(v) if isinstance(v, PortableGraph) else v for k, v in portable.attrs.items()}
    return fx.GraphModule(root, graph)


def meta_bytes(gm: torch.nn.Module, inputs: tuple[Any, ...] = ()) -> int:
    """Bytes of the distinct tensors of ``gm`` and ``inputs`` on the meta device."""
    seen: dict[int, int] = {}
    constants = [t for m in gm.modules() for t in vars(m).values() if isinstance(t, torch.Tensor)]
    for t in [*gm.parameters(), *gm.buffers(), *constants, *inputs]:
        if isinstance(t, torch.Tensor) and t.is_meta:
            seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())


def _filled(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    if t.is_floating_point():
        value = (torch.randn(t.shape, generator=generator) * 0.02).to(t.dtype)
    else:
        value = torch.zeros(t.shape, dtype=t.dtype)
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(value, requires_grad=t.requires_grad)
    return value


def materialize(gm: torch.nn.Module, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Give every meta tensor of ``gm`` (in place; a tensor reached twice stays one) and of
    ``inputs`` random values on the CPU (floats ~ N(0, 0.02), integers 0), and make the graph's
    ops that name the meta device name the CPU; returns the inputs."""
    generator = torch.Generator().manual_seed(0)
    done: dict[int, torch.Tensor] = {}
    for module in gm.modules():
        for store in (module._parameters, module._buffers):
            for key, t in list(store.items()):
                if t is not None and t.is_meta:
                    store[key] = done.setdefault(id(t), _filled(t, generator))  # type: ignore[assignment]
        for key, t in list(vars(module).items()):  # plain tensor attributes (export's constants)
            if isinstance(t, torch.Tensor) and t.is_meta:
                setattr(module, key, done.setdefault(id(t), _filled(t, generator)))
    if done:  # the trace wrote the meta device into its ops (``arange``, ``to``, metadata asserts)
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

        for module in gm.modules():
            if isinstance(module, fx.GraphModule):
                for n in module.graph.nodes:
                    n.args, n.kwargs = cpu(n.args), cpu(n.kwargs)
                module.recompile()
    return tuple(_filled(x, generator) if isinstance(x, torch.Tensor) and x.is_meta else x for x in inputs)
