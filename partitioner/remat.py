"""Training memory: what functorch's min-cut saves for the backward and what it recomputes.

``torch._functorch.partitioners.min_cut_rematerialization_partition`` (what ``torch.compile``
runs on every training graph) splits the joint forward-backward graph into a forward that saves
some values and a backward that recomputes the rest, under ``activation_memory_budget`` (1: save
what min-cut would; 0: recompute all it can). :func:`analyze` traces the joint graph with AOT
autograd and runs that real function (nothing here reimplements the min-cut), then maps its
decisions back onto the forward graph that :func:`partitioner.trace` gives, so the explorer can
draw them: each aten node carries the name of the traced node it came from (``meta["custom"]``,
set while an ``fx.Interpreter`` runs the traced graph under ``preserve_node_meta``).

The joint trace imports heavy modules and some of torch's estimators abort the process on CPU,
so by default the work runs in a worker process with a time limit (the launcher of the real
runs); a failure raises :class:`~partitioner.errors.RunError` naming the cause.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import torch
import torch.fx as fx

from .devices import DEFAULT_SPEEDS
from .errors import PartitionError
from .graph import Graph
from .plan import Plan

__all__ = ["RematResult", "analyze", "sweep", "training_memory", "largest_fitting_budget", "LOSSES",
           "OPTIMIZER_STATE", "VIEW_OPS"]

LOSSES = ("sum", "mean")
OPTIMIZER_STATE = {"none": 0, "sgd": 1, "adam": 2}  # state tensors per parameter (SGD: momentum)
_TAG = "partition_explorer_node"


@dataclass(frozen=True)
class RematResult:
    """What the backward reads and recomputes at one budget; names are the traced graph's."""

    budget: float
    saved: tuple[str, ...]  # forward nodes whose values the backward reads (activations)
    recomputed: tuple[str, ...]  # forward nodes the backward computes again
    saved_activation_bytes: int  # distinct storages saved, parameters and inputs apart
    saved_input_bytes: int  # parameters, buffers and inputs the backward reads (held anyway)
    recompute_flops: int
    recompute_time_s: float  # the recomputed FLOPs at ``flops_per_s``
    saved_bytes_by_node: dict[str, int] = field(default_factory=dict)
    recomputed_ops: int = 0  # aten ops the backward recomputes (views apart: they are free)
    forward_ops: int = 0  # aten ops in the forward
    joint_trace_s: float = 0.0
    solver_s: float = 0.0
    gradients_equal: bool = True  # the split forward and backward gave eager's gradients

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["saved"], out["recomputed"] = list(self.saved), list(self.recomputed)
        return out


def training_memory(plan: Plan, graph: Graph, result: RematResult, optimizer: str = "adam") -> dict[int, dict[str, int]]:
    """Each device's training memory under ``plan``: the parameters its partitions hold, as many
    bytes again of gradients, the optimizer's state (``OPTIMIZER_STATE`` tensors per parameter,
    in the parameters' dtype), and the activations saved for the backward by nodes it runs
    (``result``'s budget). A replicated partition counts on each of its devices."""
    if optimizer not in OPTIMIZER_STATE:
        raise PartitionError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZER_STATE)}")
    params: dict[int, int] = {}
    activations: dict[int, int] = {}
    attrs: dict[int, set[int]] = {}
    for p in plan.partitions:
        for name in p.node_names:
            v = graph.index[name]
            node = graph.nodes[v]
            for d in p.device_ids:
                params[d] = params.get(d, 0) + node.param_bytes
                activations[d] = activations.get(d, 0) + result.saved_bytes_by_node.get(name, 0)
                attrs.setdefault(d, set()).update(u for u in graph.preds[v] if graph.nodes[u].op == "get_attr")
    out = {}
    for d in sorted(params):
        held = params[d] + sum(graph.output_bytes[u] for u in attrs.get(d, ()))
        out[d] = {"parameters": held, "gradients": held, "optimizer": OPTIMIZER_STATE[optimizer] * held,
                  "activations": activations[d]}
    return out


def largest_fitting_budget(plan: Plan, graph: Graph, results: Sequence[RematResult],
                           optimizer: str = "adam") -> RematResult | None:
    """The result with the largest budget (the least recomputation) at which every device's
    training memory fits its capacity; None when none does."""
    capacity = {d.logical_id: d.memory_bytes for d in plan.devices}
    for result in sorted(results, key=lambda r: -r.budget):
        used = training_memory(plan, graph, result, optimizer)
        if all(sum(parts.values()) <= capacity[d] for d, parts in used.items()):
            return result
    return None


def _check(budget: float, loss: str) -> None:
    if not (isinstance(budget, (int, float)) and 0.0 <= float(budget) <= 1.0):
        raise PartitionError(f"budget must be between 0 and 1 (got {budget!r}); 1 saves what min-cut "
                             "would, 0 recomputes all it can")
    if loss not in LOSSES:
        raise PartitionError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")


def analyze(model: torch.nn.Module | Graph, example_inputs: Sequence[Any] | torch.Tensor,
            budget: float = 0.5, loss: str = "sum", *, timeout_s: float | None = 300.0,
            flops_per_s: float = DEFAULT_SPEEDS["peak_flops"]) -> RematResult:
    """Run functorch's min-cut on ``model``'s joint graph at ``budget``. The loss is the sum (or
    mean) of every floating-point output. ``timeout_s=None`` runs in this process (tests,
    benchmarks); otherwise in a worker process that is stopped at the limit."""
    return sweep(model, example_inputs, (budget,), loss, timeout_s=timeout_s, flops_per_s=flops_per_s)[0]


def sweep(model: torch.nn.Module | Graph, example_inputs: Sequence[Any] | torch.Tensor,
          budgets: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0), loss: str = "sum", *,
          timeout_s: float | None = 300.0,
          flops_per_s: float = DEFAULT_SPEEDS["peak_flops"]) -> list[RematResult]:
    """:func:`analyze` at each budget, in one worker (the imports are paid once)."""
    for b in budgets:
        _check(b, loss)
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    if isinstance(model, Graph):
        gm = model.graph_module
        if gm is None:
            raise PartitionError(f"graph {model.name!r} has no traced module; use partitioner.trace")
    else:
        import partitioner  # its lazy ``trace`` (importing the submodule would shadow the function)

        gm = partitioner.trace(model, inputs).graph_module
    args = (gm, inputs, tuple(float(b) for b in budgets), loss, flops_per_s)
    if timeout_s is None:
        return _sweep(*args)
    from .runtime.launch import launch
    from .runtime.run import picklable

    return launch(_entry, 1, (picklable(gm), *args[1:]), timeout_s=timeout_s)[0]


def _entry(rank: int, world_size: int, *args: Any) -> list[RematResult]:
    return _sweep(*args)


class _Tagged(torch.nn.Module):
    """Runs the traced graph node by node, so every aten node made while tracing carries the
    traced node's name."""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__()
        self.gm = gm
        for n in gm.graph.nodes:
            n.meta.setdefault("custom", {})[_TAG] = n.name

    def forward(self, *args: Any) -> Any:
        return fx.Interpreter(self.gm).run(*args)


def _sweep(gm: fx.GraphModule, inputs: tuple[Any, ...], budgets: tuple[float, ...], loss: str,
           flops_per_s: float) -> list[RematResult]:
    import torch._functorch.config as functorch_config
    import torch.fx.traceback as fx_traceback
    from torch._functorch.aot_autograd import aot_function, make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    module = _Tagged(gm)
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}  # tied: once
    if not any(p.requires_grad for p in module.parameters()) and not any(
            isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):
        raise PartitionError("the model has no trainable parameters: there is no backward to analyse")

    def forward(params: dict[str, torch.Tensor], *args: Any) -> Any:
        return torch.func.functional_call(module, params, args)

    results = []
    for budget in budgets:
        seen: dict[str, Any] = {}

        def partition(joint: fx.GraphModule, joint_inputs: Any, **kw: Any) -> Any:
            seen["joint_s"] = time.perf_counter() - seen["start"]
            start = time.perf_counter()
            fw, bw = min_cut_rematerialization_partition(joint, joint_inputs, compiler="inductor", **kw)
            seen.update(fw=fw, bw=bw, outputs=kw.get("num_fwd_outputs", 1), solver_s=time.perf_counter() - start)
            return fw, bw

        def keep(graph_module: fx.GraphModule, _: Any) -> Any:
            return make_boxed_func(graph_module)

        seen["start"] = time.perf_counter()
        trainable = {k: v for k, v in state.items() if v.requires_grad}
        for p in trainable.values():
            p.grad = None
        with fx_traceback.preserve_node_meta(), functorch_config.patch(activation_memory_budget=budget):
            compiled = aot_function(forward, fw_compiler=keep, bw_compiler=keep,  # type: ignore[arg-type]
                                    partition_fn=partition)
            _loss(compiled(state, *inputs), loss).backward()
        # The split forward and backward must give eager's gradients.
        eager = torch.autograd.grad(_loss(module(*inputs), loss), list(trainable.values()), allow_unused=True)
        equal = all(torch.allclose(p.grad if p.grad is not None else torch.zeros_like(p),
                                   e if e is not None else torch.zeros_like(p), rtol=1e-4, atol=1e-6)
                    for p, e in zip(trainable.values(), eager))
        results.append(_read(budget, seen, flops_per_s, equal))
    return results


def _loss(out: Any, kind: str) -> torch.Tensor:
    leaves = [t for t in torch.utils._pytree.tree_leaves(out)
              if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not leaves:
        raise PartitionError("no output of the model needs a gradient: there is no loss to train")
    return sum((t.sum() if kind == "sum" else t.mean()) for t in leaves)  # type: ignore[return-value]


VIEW_OPS = frozenset({"t", "view", "_unsafe_view", "transpose", "permute", "expand", "unsqueeze",
                      "squeeze", "reshape", "slice", "select", "as_strided", "alias", "detach"})


def _origin(node: fx.Node) -> str | None:
    return (node.meta.get("custom") or {}).get(_TAG)


def _flops(node: fx.Node) -> int:
    """FLOPs of one aten node: torch's own formulas (``torch.utils.flop_counter``) where it has
    one, else one per output element (pointwise)."""
    from torch.utils.flop_counter import flop_registry

    out = node.meta.get("val")
    formula = flop_registry.get(getattr(node.target, "overloadpacket", None))
    if formula is not None:
        args, kwargs = torch.utils._pytree.tree_map_only(fx.Node, lambda n: n.meta.get("val"), (node.args, node.kwargs))
        try:
            return int(formula(*args, **kwargs, out_val=out))
        except Exception:  # noqa: BLE001 - a formula that does not fit these arguments
            pass
    return sum(t.numel() for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor))


def _read(budget: float, seen: dict[str, Any], flops_per_s: float, gradients_equal: bool) -> RematResult:
    fw: fx.GraphModule = seen["fw"]
    bw: fx.GraphModule = seen["bw"]
    output = next(n for n in fw.graph.nodes if n.op == "output")
    saved_values = [a for a in output.args[0][seen["outputs"]:] if isinstance(a, fx.Node)]
    held = {_storage(n) for n in fw.graph.nodes if n.op == "placeholder"} - {None}
    by_node: dict[str, int] = {}
    input_bytes = 0
    counted: set[Any] = set()
    for value in saved_values:
        size, storage = _nbytes(value), _storage(value)
        if value.op == "placeholder" or storage in held:
            input_bytes += size if value.op == "placeholder" else 0
            continue
        name = _origin(value)
        if name is None or storage in counted:
            continue
        if storage is not None:
            counted.add(storage)
        by_node[name] = by_node.get(name, 0) + size
    fw_ops = [n for n in fw.graph.nodes if n.op == "call_function"]
    fw_names = {n.name for n in fw_ops}
    # Views (a new shape over a saved storage) cost nothing to redo: min-cut always redoes them.
    recomputed = [n for n in bw.graph.nodes if n.op == "call_function"
                  and n.meta.get("partitioner_tag") == "is_forward" and n.name in fw_names
                  and getattr(n.target, "_opname", None) not in VIEW_OPS]
    flops = sum(_flops(n) for n in recomputed)
    order = {n.name: i for i, n in enumerate(fw_ops)}
    names = dict.fromkeys(_origin(n) for n in sorted(recomputed, key=lambda n: order.get(n.name, 0)))
    return RematResult(
        budget=budget,
        saved=tuple(by_node),
        recomputed=tuple(n for n in names if n is not None),
        saved_activation_bytes=sum(by_node.values()),
        saved_input_bytes=input_bytes,
        recompute_flops=flops,
        recompute_time_s=flops / flops_per_s,
        saved_bytes_by_node=by_node,
        recomputed_ops=len(recomputed),
        forward_ops=len(fw_ops),
        joint_trace_s=seen.get("joint_s", 0.0),
        solver_s=seen.get("solver_s", 0.0),
        gradients_equal=gradients_equal,
    )


def _nbytes(node: fx.Node) -> int:
    val = node.meta.get("val")
    return int(val.numel() * val.element_size()) if isinstance(val, torch.Tensor) else 0


def _storage(node: fx.Node) -> Any:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        from torch.multiprocessing.reductions import StorageWeakRef

        return StorageWeakRef(val.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None
