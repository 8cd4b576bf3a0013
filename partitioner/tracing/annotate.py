"""Annotate a traced graph: each node's output shape, dtype, bytes and FLOPs from one run on fake
tensors (``torch._subclasses.fake_tensor.FakeTensorMode``) under
``torch.utils.flop_counter.FlopCounterMode``, repeated ops priced once.

# NOTE: [Annotating repeated ops once]
A model is mostly the same block many times: every layer's ``linear`` meets inputs of the same
shape, dtype and strides, so its output metadata and FLOPs are the same too. Dispatching an op on
fake tensors costs about a millisecond (the fake kernel, its decomposition, torch's own
dispatch-cache key per ATen op), which for 50,000 nodes is most of a minute. The memo keys a node
by what decides its result (the target, a module's class, settings and weights' metadata, and
each argument as metadata for a tensor or as its value for a constant) and hands a later node
with the same key the first one's output and FLOPs: torch's fake-tensor dispatch cache lifted to
whole fx nodes, one key per node. Only metadata is read, so this holds for fake tensors only
(the real-tensor fallback runs every node). Nodes then share output objects: an op writing
values in place changes nothing a fake tensor carries, but one changing a tensor's shape in
place would change what other nodes were handed, so the memo is off for a graph holding such an
op (ATen's ``inplace_view`` ops, ``out=``) or code outside torch that might run one (a user's
function or module; :func:`changes_metadata`). An argument the key cannot describe (a tensor
subclass, an arbitrary object) or a module with hooks: that node is run.
``tests/tracing/test_annotate.py`` holds the annotations equal to the plain run's.
"""

from __future__ import annotations

import functools
import logging
import types
from typing import Any, Hashable

import torch
import torch.fx as fx

__all__ = ["annotate", "Annotation", "changes_metadata", "tensor_bytes"]

logger = logging.getLogger(__name__)

# (shape of a single tensor output or None, its dtype or None, bytes of every tensor output), FLOPs
Annotation = tuple[tuple[tuple[int, ...] | None, str | None, int], int]

_PLAIN_TENSORS: tuple[type, ...] = (torch.Tensor, torch.nn.Parameter)
_CONSTANTS = (
    int,
    float,
    bool,
    str,
    bytes,
    type(None),
    type(Ellipsis),
    torch.dtype,
    torch.device,
    torch.memory_format,
    torch.layout,
    types.FunctionType,
    types.BuiltinFunctionType,
)
# where the functions and modules come from that change no tensor's metadata unless named so
_PURE_NAMESPACES = ("torch", "_operator", "operator", "builtins", "math")
_VALUE_WRITES = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__"}  # not ATen names
_TORCH_MODULES = ("torch.nn.", "torch.ao.nn.")
# vars() of a module that hold its state (parameters, buffers, children) rather than settings
_MODULE_STATE = {"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"}


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in ``value`` (a tensor, or lists, tuples and dicts of them)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    return 0


def _describe(value: Any) -> tuple[tuple[int, ...] | None, str | None, int]:
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), str(value.dtype).removeprefix("torch."), tensor_bytes(value)
    return None, None, tensor_bytes(value)


def _key(value: Any) -> Hashable | None:
    """What of ``value`` decides an op's output metadata: a tensor's metadata, a constant's value
    (with its type, so ``1`` and ``True`` differ), containers element-wise. None when it cannot
    say (a tensor subclass, an arbitrary object): the node is then run, not looked up."""
    kind = type(value)
    if kind in _CONSTANTS:
        return kind, value
    if isinstance(value, torch.Tensor):
        if not (kind in _PLAIN_TENSORS or kind.__name__ == "FakeTensor") or value.layout != torch.strided:
            return None
        return (
            "T",
            value.shape,
            value.stride(),
            value.storage_offset(),
            value.dtype,
            value.device,
            value.requires_grad,
        )
    if isinstance(value, (tuple, list)):  # fx's immutable_list, torch.Size, named tuples too
        keys = tuple(_key(v) for v in value)
        return None if None in keys else (kind, keys)
    if isinstance(value, dict):  # fx's immutable_dict too
        items = tuple((k, _key(v)) for k, v in value.items())
        return None if any(v is None for _, v in items) else (kind, items)
    if kind is slice:
        parts = (_key(value.start), _key(value.stop), _key(value.step))
        return None if None in parts else (slice, parts)
    return None


@functools.lru_cache(maxsize=None)
def _inplace_view(name: str) -> bool:
    """Whether the in-place ATen op ``name`` (``unsqueeze_``) may change a tensor's shape, strides
    or dtype (torch's ``inplace_view`` tag) rather than only its values; True when unknown."""
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return name not in _VALUE_WRITES
    ops = [getattr(packet, overload) for overload in packet.overloads()]
    return not ops or any(torch.Tag.inplace_view in op.tags for op in ops)


def changes_metadata(node: fx.Node, gm: fx.GraphModule) -> bool:
    """Whether ``node`` may change the shape, strides or dtype of a tensor it reads: an in-place
    view op (``unsqueeze_``, ``transpose_``, ``resize_``...), an ``out=`` argument (it may be
    resized), or code outside torch (a user's function or module) that might do either. Ops that
    only write values in place (``add_``, ``relu(inplace=True)``) do not. O(1) for ops."""
    if node.op == "call_method":
        return str(node.target).endswith("_") and _inplace_view(str(node.target))
    if node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        return not all(type(m).__module__.startswith(_TORCH_MODULES) for m in module.modules())
    if node.op != "call_function":
        return False
    target = node.target
    if "out" in node.kwargs:
        return True
    if isinstance(target, torch._ops.OpOverload):
        return torch.Tag.inplace_view in target.tags or (
            target._schema.is_mutable and torch.Tag.inplace not in target.tags
        )
    if not str(getattr(target, "__module__", None)).startswith(_PURE_NAMESPACES):
        return True
    name = getattr(target, "__name__", "")
    return name.endswith("_") and not name.startswith("_") and _inplace_view(name)


class _Annotator(fx.Interpreter):
    """Runs the graph once, recording each node's output description and FLOPs; with ``memo``,
    a node whose key was seen takes the earlier node's output and FLOPs without running
    (NOTE: [Annotating repeated ops once])."""

    def __init__(self, gm: fx.GraphModule, counter: Any, memo: bool) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.counter = counter
        self.records: dict[str, Annotation] = {}
        self.memo: dict[Hashable, tuple[Any, Annotation]] | None = {} if memo else None
        self.hits = 0
        self._module_keys: dict[str, Hashable | None] = {}

    def run_node(self, n: fx.Node) -> Any:
        if self.memo is None or n.op not in ("call_function", "call_method", "call_module"):
            before = self.counter.get_total_flops()
            result = super().run_node(n)
            self._record(n, result, before)
            return result
        with self._set_current_node(n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            key = self._node_key(n, args, kwargs)
            if key is not None and (hit := self.memo.get(key)) is not None:
                self.hits += 1
                self.records[n.name] = hit[1]
                return hit[0]
            before = self.counter.get_total_flops()
            result = getattr(self, n.op)(n.target, args, kwargs)
        record = self._record(n, result, before)
        if key is not None:
            self.memo[key] = (result, record)
        return result

    def _record(self, n: fx.Node, result: Any, before: int) -> Annotation:
        record = (_describe(result), int(self.counter.get_total_flops() - before))
        self.records[n.name] = record
        return record

    def _node_key(self, n: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable | None:
        if n.op == "call_module":
            target: Hashable | None = self._module_key(str(n.target))
        elif n.op == "call_method":
            target = ("method", n.target)
        else:
            target = n.target
        if target is None:
            return None
        arg_key = _key(args)
        kwarg_key = _key(kwargs) if kwargs else ()
        return None if arg_key is None or kwarg_key is None else (n.op, target, arg_key, kwarg_key)

    def _module_key(self, path: str) -> Hashable | None:
        """A module by its class and every setting, parameter and buffer of it and its children;
        None for a module with hooks or a setting the key cannot describe."""
        if path not in self._module_keys:
            self._module_keys[path] = self._describe_module(self.fetch_attr(path))
        return self._module_keys[path]

    @staticmethod
    def _describe_module(module: torch.nn.Module) -> Hashable | None:
        parts: list[Hashable] = []
        for name, sub in module.named_modules():
            for attr, value in vars(sub).items():
                if attr in _MODULE_STATE:
                    continue
                if "hook" in attr:
                    if value:
                        return None
                    continue
                if (k := _key(value)) is None:
                    return None
                parts.append((name, attr, k))
            for attr, tensor in (*sub._parameters.items(), *sub._buffers.items()):
                if (k := _key(tensor)) is None:
                    return None
                parts.append((name, attr, k))
            parts.append((name, type(sub)))
        return tuple(parts)


# NOTE: [No autograd graph while annotating]
# The parameters require grad, so a run with grad enabled records an autograd graph: every op's
# backward node holds the fake tensors it saved, which hold their own backward nodes, a chain as
# long as the model. Freeing it when the run ends went one level deeper in C per op and overflowed
# the stack at about 40,000 ops (a segfault, exit 139, after ``mlp`` with n_layer=20000 was
# traced). Shapes, bytes and forward FLOPs do not depend on grad mode, so no graph is recorded.


def annotate(
    gm: fx.GraphModule, example_inputs: tuple[Any, ...], fake: bool = True, memo: bool = True
) -> dict[str, Annotation]:
    """Each node's (shape, dtype, output bytes) and FLOPs, by node name, from one run of ``gm``
    on ``example_inputs`` turned into fake tensors (no real compute or memory; real tensors with
    ``fake=False``). With ``memo`` (fake runs only) a node whose target and input metadata match
    an earlier node's is not run again (NOTE: [Annotating repeated ops once]); ``memo=False`` is
    the plain run the tests compare against. O(N) node runs, O(distinct ops) fake dispatches with
    the memo. Raises whatever running the graph raises."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    from partitioner.tracing.flops import register_formulas

    register_formulas()
    if not fake:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            annotator = _Annotator(gm, counter, memo=False)
            annotator.run(*example_inputs)
        return annotator.records
    if memo and (changing := next((n for n in gm.graph.nodes if changes_metadata(n, gm)), None)) is not None:
        memo = False  # it could change the shape of an output the memo hands to several nodes
        logger.info("every node annotated apart: %s may change a tensor's shape in place", changing.name)
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    with fake_mode, torch.no_grad():  # NOTE: [No autograd graph while annotating]
        fake_inputs = [fake_mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in example_inputs]
        with FlopCounterMode(display=False) as counter:
            annotator = _Annotator(gm, counter, memo=memo)
            annotator.run(*fake_inputs)
    if memo:
        logger.info("annotated %d nodes, %d of them from the memo", len(annotator.records), annotator.hits)
    return annotator.records
