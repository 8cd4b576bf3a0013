"""Torch at the edge: trace a model (torch.fx, falling back to torch.export) and annotate its nodes.

Sizes follow ``torch.fx.passes.graph_manipulation.get_size_of_node`` (the reference
partitioner's memory model); shapes come from running the graph on fake tensors
(``torch._subclasses.fake_tensor.FakeTensorMode``), FLOPs from
``torch.utils.flop_counter.FlopCounterMode`` on the same fake run, so annotating a large model
costs no real compute or memory; repeated ops are dispatched once (:mod:`.annotate`). The result
is a :class:`~partitioner.graph.Graph`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import warnings
from typing import Any, Iterator, Mapping, Sequence

import torch
import torch.fx as fx

from partitioner.errors import TraceError
from partitioner.graph import Graph, ModelInfo, Node
from partitioner.op_table import is_view
from partitioner.tracing.annotate import Annotation, annotate
from partitioner.tracing.capture import merge_tied_attributes, to_graph_module, user_frame
from partitioner.tracing.flops import unpriced
from partitioner.tracing.functionalize import remove_inplace
from partitioner.tracing.lock import TRACE_LOCK
from partitioner.tracing.meta import on_meta, to_meta

__all__ = ["trace"]

logger = logging.getLogger(__name__)


def _flat_inputs(node: fx.Node) -> list[fx.Node]:
    found: dict[fx.Node, None] = {}
    fx.node.map_arg(node.args, found.setdefault)
    fx.node.map_arg(node.kwargs, found.setdefault)
    return list(found)


def _module_path(node: fx.Node) -> str:
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack")
    if stack:
        last = list(stack.values())[-1]
        path = last[0] if isinstance(last, tuple) else str(last)
        return str(path).removeprefix("L['self'].").removeprefix("L__self__.")
    if node.op == "get_attr":
        return str(node.target).rpartition(".")[0]
    return ""


def _is_embedding(node: fx.Node, modules: dict[str, torch.nn.Module]) -> bool:
    # Same rule as the reference partitioner (a module whose type name contains "Embedding"),
    # plus the functional and ATen forms that torch.export produces.
    if node.op == "call_module":
        return "Embedding" in type(modules.get(str(node.target))).__name__
    if node.op == "call_function":
        name = getattr(node.target, "__name__", str(node.target))
        return "embedding" in name
    return False


def _target_name(node: fx.Node) -> str:
    if node.op == "call_function":
        name = getattr(node.target, "__qualname__", None) or getattr(node.target, "__name__", None)
        return str(name or node.target)
    return str(node.target)


def _run_annotation(gm: fx.GraphModule, example_inputs: tuple[Any, ...]) -> dict[str, Annotation]:
    try:
        return annotate(gm, example_inputs)
    except Exception as exc:  # an op without a fake kernel: annotate on real tensors instead
        logger.info("fake-tensor annotation failed (%s); running on real tensors", exc)
    try:
        return annotate(gm, example_inputs, fake=False)
    except Exception as exc:
        where = user_frame(exc)
        raise TraceError(
            f"running the traced graph on the example inputs failed with {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
            + (f" at {where}" if where else "")
            + ". Fix: check that example_inputs match the model's forward() (count, shapes, dtypes)."
        ) from exc


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Hold back what torch logs and warns while tracing (a failed fake-tensor run logs a long
    traceback; torch.export prints graphs) unless ``verbose``: the TraceError says what matters."""
    if verbose or logging.getLogger().isEnabledFor(logging.INFO):  # the CLI's --verbose
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


# NOTE: [No cycle collection while tracing]
# Tracing builds one object after another (fx nodes, proxies, fake tensors) and keeps most of
# them, and CPython's cycle collector runs a full pass over every live object each time the heap
# has grown by a quarter: a 20,000-node trace spent 0.56 s of its 4.7 s CPU in two full passes,
# a 5,000-node one 0.02 s, which made the time per node grow with the graph. As torch's own
# state-dict code does (``torch.distributed.checkpoint.state_dict._gc_context``), the collector
# pauses for the trace and resumes after it; what refcounting frees is freed as before.
@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def trace(
    model: torch.nn.Module | fx.GraphModule,
    example_inputs: Sequence[Any] | torch.Tensor,
    name: str | None = None,
    verbose: bool = False,
    example_kwargs: Mapping[str, Any] | None = None,
) -> Graph:
    """Trace ``model`` and annotate every node (shape, dtype, bytes, parameters, FLOPs).

    Accepts an ``nn.Module`` (``symbolic_trace``, falling back to ``torch.export`` when tracing
    meets data-dependent control flow) or an already traced ``GraphModule``; keyword inputs go
    in ``example_kwargs`` (as ``torch.export`` takes them; such models are traced by export, and
    the graph's inputs are the positional ones then the keyword ones). A model with a
    ``config.use_cache`` (Hugging Face) is traced with the cache off, so no cache object is in
    its outputs. Parameters reached under two names (tied weights) become one node, so their
    bytes count once (``graph.tied_parameters`` lists them). Raises :class:`TraceError` naming
    the failing line and the fix when neither works. torch's own log output while tracing is
    shown only with ``verbose``. Safe from threads: one trace at a time in a process (NOTE: [Tracing and
    threads]). O(N) for N nodes: one fake-tensor dispatch per distinct op
    (NOTE: [Annotating repeated ops once]), no cycle collection meanwhile (NOTE: [No cycle
    collection while tracing]).
    """
    if isinstance(example_inputs, Mapping):
        raise TraceError(
            f"example_inputs is a dict ({', '.join(map(str, list(example_inputs)[:4]))}); pass keyword "
            "inputs as example_kwargs, e.g. trace(model, (), example_kwargs={'input_ids': ids})"
        )
    # Hugging Face models return cache objects torch.export cannot flatten: trace with the cache
    # off (each sub-model may hold its own config), and put it back afterwards.
    configs: dict[int, Any] = {
        id(c): c
        for m in (model.modules() if isinstance(model, torch.nn.Module) else ())
        if getattr(c := getattr(m, "config", None), "use_cache", False) is True
    }
    with TRACE_LOCK:  # NOTE: [Tracing and threads] (partitioner/tracing/lock.py)
        try:
            for c in configs.values():
                c.use_cache = False
            with _quiet(verbose), _gc_paused():
                return _trace(model, example_inputs, name, dict(example_kwargs or {}))
        finally:
            for c in configs.values():
                c.use_cache = True


def _is_view(fx_node: fx.Node) -> bool:
    """Whether the node is an aten view op (its output shares its input's storage): a view of the
    op table (:mod:`partitioner.op_table`) that torch's schema says aliases its input."""
    target = fx_node.target
    if isinstance(target, torch._ops.OpOverload):
        return is_view(target._schema.name) and target.is_view
    return False


def parameter_records(module: torch.nn.Module) -> tuple[tuple[str, tuple[int, ...], int], ...]:
    """``(name, shape, bytes per element)`` of each of ``module``'s parameters, in
    ``named_parameters()`` order (:attr:`Graph.named_parameters`). O(parameters)."""
    return tuple((name, tuple(int(s) for s in p.shape), int(p.element_size())) for name, p in module.named_parameters())


def model_info(model: torch.nn.Module) -> ModelInfo:
    """The module classes of ``model`` (every class in each module's MRO up to ``nn.Module``) and
    a Hugging Face model's tensor-parallel plan, no-split blocks and tied weights. O(modules)."""
    classes = {
        path: tuple(c.__name__ for c in type(m).__mro__ if issubclass(c, torch.nn.Module))
        for path, m in model.named_modules()
    }
    config = getattr(model, "config", None)
    plan = getattr(config, "base_model_tp_plan", None) or {}
    tied = getattr(model, "_tied_weights_keys", None) or {}
    if not isinstance(tied, Mapping):  # older transformers: a list of tied names
        tied = {str(k): "" for k in tied}
    return ModelInfo(
        module_classes=classes,
        tp_plan=dict(plan),
        no_split_modules=tuple(getattr(model, "_no_split_modules", None) or ()),
        tied_weights={str(k): str(v) for k, v in tied.items()},
        experts_per_token=int(getattr(config, "num_experts_per_tok", 0) or 0),
    )


def _trace(
    model: torch.nn.Module | fx.GraphModule,
    example_inputs: Sequence[Any] | torch.Tensor,
    name: str | None,
    example_kwargs: dict[str, Any],
) -> Graph:
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    args = tuple(example_inputs)
    meta = on_meta(model)  # NOTE: [Meta weights, meta inputs]
    gm, tied = _capture(model, args, example_kwargs, meta)
    inputs = args + tuple(torch.utils._pytree.tree_leaves(example_kwargs)) if example_kwargs else args
    _check_input_count(gm, inputs)
    records = _run_annotation(gm, to_meta(inputs) if meta else inputs)
    nodes, parameters = _annotated_nodes(gm, records)
    graph = Graph(nodes, gm, inputs, name=name or type(model).__name__)
    graph.tied_parameters = tied + parameters.tied()
    graph.repeated_weights = parameters.repeated
    graph.unpriced_ops = unpriced((nd.target, nd.flops) for nd in nodes if nd.op == "call_function")
    graph.model_info = model_info(model)
    graph.named_parameters = parameter_records(gm)
    if not graph.op_indices:
        raise TraceError(f"{graph.name} has no operations to partition (only inputs, attributes and outputs)")
    return graph


def _capture(
    model: torch.nn.Module | fx.GraphModule, args: tuple[Any, ...], kwargs: dict[str, Any], meta: bool
) -> tuple[fx.GraphModule, tuple[tuple[str, ...], ...]]:
    """The model's graph without in-place ops, traced on meta inputs when its weights are on meta,
    and the tied attributes it merged into one node each."""
    traced_args, traced_kwargs = (to_meta(args), to_meta(kwargs)) if meta else (args, kwargs)
    gm, _ = remove_inplace(to_graph_module(model, traced_args, traced_kwargs))  # NOTE: [In-place ops and partitions]
    return gm, merge_tied_attributes(gm)


def _check_input_count(gm: fx.GraphModule, inputs: tuple[Any, ...]) -> None:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise TraceError(
            f"the traced model takes {len(placeholders)} input(s) "
            f"({', '.join(p.name for p in placeholders)}) but {len(inputs)} example input(s) "
            "were given; pass one example tensor per forward() argument"
        )


class _SharedParameters:
    """A parameter two modules share (tied weights) is charged to each module's node, as a device
    running either must hold it; the graph records the repeat so the model's total counts it once."""

    def __init__(self) -> None:
        self.counted: dict[int, tuple[str, int]] = {}  # parameter -> (first name, first node)
        self.shared: dict[int, list[str]] = {}  # parameter -> its names, first first
        self.repeated: dict[int, tuple[int, int]] = {}  # node -> (node first holding, bytes repeated)

    def charge(self, path: str, module: torch.nn.Module, index: int) -> int:
        """The bytes of ``module``'s parameters, charged to node ``index`` (the module at ``path``)."""
        param_bytes = 0
        for pname, p in module.named_parameters():
            qualified, size = f"{path}.{pname}", p.numel() * p.element_size()
            param_bytes += size
            if id(p) not in self.counted:
                self.counted[id(p)] = (qualified, index)
            elif self.counted[id(p)][1] != index:
                first = self.counted[id(p)]
                names = self.shared.setdefault(id(p), [first[0]])
                if qualified not in names:
                    names.append(qualified)
                was = self.repeated.get(index, (first[1], 0))
                self.repeated[index] = (first[1], was[1] + size)
        return param_bytes

    def tied(self) -> tuple[tuple[str, ...], ...]:
        """The names of each parameter that more than one module holds."""
        return tuple(tuple(names) for names in self.shared.values() if len(names) > 1)


def _annotated_nodes(gm: fx.GraphModule, records: dict[str, Annotation]) -> tuple[list[Node], _SharedParameters]:
    """One :class:`Node` per fx node, in graph order, with its annotation and parameter bytes."""
    modules = dict(gm.named_modules())
    parameters = _SharedParameters()
    position: dict[fx.Node, int] = {}
    nodes: list[Node] = []
    weights: set[int] = set()  # get_attr nodes (weights) and views of them
    for fx_node in gm.graph.nodes:
        (shape, dtype, out_bytes), flops = records.get(fx_node.name, ((None, None, 0), 0))
        param_bytes = 0
        if fx_node.op == "call_module":
            param_bytes = parameters.charge(str(fx_node.target), modules[str(fx_node.target)], len(nodes))
        reads = tuple(position[i] for i in _flat_inputs(fx_node))
        # NOTE: [Views of weights] A transpose or view of a weight (a mixture of experts' packed
        # expert weights, transposed for grouped_mm) shares the weight's storage: it holds no bytes
        # of its own, and counting its output would hold each weight twice (Mixtral-8x7B: 172 GiB
        # for 87 GiB of weights). Its readers reach the weight through it.
        view = fx_node.op == "call_function" and bool(reads) and _is_view(fx_node) and all(i in weights for i in reads)
        if view or fx_node.op == "output":
            out_bytes = 0
        if view or fx_node.op == "get_attr":
            weights.add(len(nodes))
        position[fx_node] = len(nodes)
        nodes.append(
            Node(
                name=fx_node.name,
                op=fx_node.op,
                target=_target_name(fx_node),
                inputs=reads,
                module_path=_module_path(fx_node),
                shape=shape,
                dtype=dtype,
                output_bytes=int(out_bytes),
                param_bytes=int(param_bytes),
                flops=int(flops),
                is_embedding=_is_embedding(fx_node, modules),
            )
        )
    return nodes, parameters
