"""The joint trace (torch): what functorch's min-cut saves for the backward and what it recomputes.

``torch._functorch.partitioners.min_cut_rematerialization_partition`` (what ``torch.compile``
runs on every training graph) splits the joint forward-backward graph into a forward that saves
some values and a backward that recomputes the rest, under ``activation_memory_budget`` (1: save
what min-cut would; 0: recompute all it can). :func:`analyze` traces the joint graph with AOT
autograd and runs that real function (nothing here reimplements the min-cut), then maps its
decisions back onto the forward graph that :func:`partitioner.trace` gives, so the explorer can
draw them: each aten node carries the name of the traced node it came from (``meta["custom"]``,
set while an ``fx.Interpreter`` runs the traced graph under ``preserve_node_meta``).

The joint trace imports heavy modules and some of torch's estimators abort the process on CPU,
so by default the work runs in a fresh worker interpreter with a time limit
(:func:`partitioner.processes.worker.run_in_worker`); a failure raises :class:`~partitioner.errors.RunError` naming the cause.
Its progress (the joint graph traced, then each budget done) reaches the caller as it goes.
The graph travels as :class:`~partitioner.remat._portable.PortableGraph` (``torch.export``'s
GraphModules do not pickle); weights on the meta device become fake tensors there, so a model of
any size is analysed with no memory for its weights (Llama-3-8B's 32 layers: about 50 s and
0.6 GB). With fake weights nothing is computed, so the check that the split forward and backward
give eager's gradients is left out (``gradients_equal`` is None).
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable, NamedTuple, Sequence

import torch
import torch.fx as fx

from partitioner.devices import DEFAULT_SPEEDS
from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.op_table import VIEWS, is_view
from partitioner.processes.worker import report, run_in_worker
from partitioner.remat._portable import PortableGraph, from_portable, materialize, to_portable
from partitioner.remat.memory import RematResult, check_request

__all__ = ["analyze", "sweep", "VIEW_OPS"]

_TAG = "partition_explorer_node"


def analyze(
    model: torch.nn.Module | Graph,
    example_inputs: Sequence[Any] | torch.Tensor,
    budget: float = 0.5,
    loss: str = "sum",
    *,
    timeout_s: float | None = 300.0,
    peak_flops: float = DEFAULT_SPEEDS["peak_flops"],
    progress: Callable[[str], None] | None = None,
) -> RematResult:
    """Run functorch's min-cut on ``model``'s joint graph at ``budget``. The loss is the sum (or
    mean) of every floating-point output. ``timeout_s=None`` runs in this process (tests,
    benchmarks); otherwise in a worker process that is stopped at the limit."""
    (found,) = sweep(
        model, example_inputs, (budget,), loss, timeout_s=timeout_s, peak_flops=peak_flops, progress=progress
    )
    return found


def sweep(
    model: torch.nn.Module | Graph,
    example_inputs: Sequence[Any] | torch.Tensor,
    budgets: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    loss: str = "sum",
    *,
    timeout_s: float | None = 300.0,
    peak_flops: float = DEFAULT_SPEEDS["peak_flops"],
    progress: Callable[[str], None] | None = None,
) -> list[RematResult]:
    """:func:`analyze` at each budget, in one worker (the imports are paid once). ``progress``
    gets a status line as the joint trace starts, once it is traced and as each budget is done,
    each with the seconds since the work began (in the calling thread; whatever it raises stops
    the worker and comes out of this call)."""
    for b in budgets:
        check_request(b, loss)
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    if isinstance(model, Graph):
        gm = model.graph_module
        if gm is None:
            raise PartitionError(f"graph {model.name!r} has no traced module; use partitioner.trace")
    else:
        import partitioner  # its lazy ``trace`` (importing the submodule would shadow the function)

        gm = partitioner.trace(model, inputs).graph_module
    args = (to_portable(gm), inputs, tuple(float(b) for b in budgets), loss, peak_flops)
    if timeout_s is None:
        return _sweep(*args, progress=progress)
    return run_in_worker(_sweep, args, timeout_s, "the joint trace and min-cut", progress=progress)


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


class _Model(NamedTuple):
    """The traced graph ready to train: its module, its parameters and buffers by name (tied
    ones once), the inputs, and whether they are fake (weights on the meta device)."""

    module: _Tagged
    state: dict[str, torch.Tensor]
    inputs: tuple[Any, ...]
    fake: bool


def _sweep(
    portable: PortableGraph,
    inputs: tuple[Any, ...],
    budgets: tuple[float, ...],
    loss: str,
    peak_flops: float,
    progress: Callable[[str], None] | None = None,
) -> list[RematResult]:
    """The work of :func:`sweep`, in the worker (``progress`` None: its lines go to the caller
    by :func:`~partitioner.processes.worker.report`) or in this process."""
    say = progress or report
    began = time.perf_counter()
    model = _prepare(portable, inputs)
    forward_nodes = len(model.module.gm.graph.nodes)
    say(f"tracing the joint forward and backward of {forward_nodes:,} forward nodes ({_since(began)})")

    def traced(nodes: int) -> None:
        say(f"joint graph traced: {nodes:,} nodes ({_since(began)})")

    results = []
    joint_once: dict[str, Any] = {}
    for i, budget in enumerate(budgets):
        if model.fake and joint_once:  # NOTE: [One joint trace for fake weights]
            seen = _cut_again(joint_once, budget)
        else:
            seen = _trace_and_cut(model, budget, loss, joint_once if model.fake else None, traced if i == 0 else None)
        # The split forward and backward must give eager's gradients (fake weights have no values).
        equal = None if model.fake else _gradients_equal(model, loss)
        results.append(_read(budget, seen, peak_flops, equal))
        say(f"min-cut at budget {budget:g}: {i + 1} of {len(budgets)} done ({_since(began)})")
    return results


def _since(began: float) -> str:
    return f"{time.perf_counter() - began:.1f} s"


def _prepare(portable: PortableGraph, inputs: tuple[Any, ...]) -> _Model:
    gm = from_portable(portable)
    inputs, fake = materialize(gm, inputs)
    module = _Tagged(gm)
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}  # tied: once
    if not any(p.requires_grad for p in module.parameters()) and not any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in inputs
    ):
        raise PartitionError("the model has no trainable parameters: there is no backward to analyse")
    return _Model(module, state, inputs, fake)


def _trace_and_cut(
    model: _Model, budget: float, loss: str, keep_joint: dict[str, Any] | None, traced: Callable[[int], None] | None
) -> dict[str, Any]:
    """AOT autograd's joint trace of one training step, min-cut at ``budget`` as its partitioner,
    and the step run (the gradients land in the parameters). Returns what min-cut gave and the
    times; the joint graph goes into ``keep_joint`` where given, and its node count to ``traced``."""
    import torch._functorch.config as functorch_config
    import torch.fx.traceback as fx_traceback
    from torch._functorch.aot_autograd import aot_function, make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    seen: dict[str, Any] = {}

    def forward(params: dict[str, torch.Tensor], *args: Any) -> Any:
        return torch.func.functional_call(model.module, params, args)

    def partition(joint: fx.GraphModule, joint_inputs: Any, **kw: Any) -> Any:
        seen["joint_s"] = time.perf_counter() - seen["start"]
        if traced is not None:
            traced(len(joint.graph.nodes))
        if keep_joint is not None:
            keep_joint.update(joint=copy.deepcopy(joint), inputs=joint_inputs, kw=kw)
        start = time.perf_counter()
        fw, bw = min_cut_rematerialization_partition(joint, joint_inputs, compiler="inductor", **kw)
        seen.update(fw=fw, bw=bw, outputs=kw.get("num_fwd_outputs", 1), solver_s=time.perf_counter() - start)
        return fw, bw

    def keep(gm: fx.GraphModule, example_inputs: Any) -> Any:  # aot_function's compiler protocol
        return make_boxed_func(gm)

    seen["start"] = time.perf_counter()
    for p in _trainable(model).values():
        p.grad = None
    with fx_traceback.preserve_node_meta(), functorch_config.patch(activation_memory_budget=budget):
        compiled = aot_function(forward, fw_compiler=keep, bw_compiler=keep, partition_fn=partition)
        _loss(compiled(model.state, *model.inputs), loss).backward()
    return seen


def _cut_again(joint_once: dict[str, Any], budget: float) -> dict[str, Any]:
    """Min-cut at ``budget`` on a copy of the joint graph kept from the first trace."""
    import torch._functorch.config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    start = time.perf_counter()
    with functorch_config.patch(activation_memory_budget=budget):
        fw, bw = min_cut_rematerialization_partition(
            copy.deepcopy(joint_once["joint"]), joint_once["inputs"], compiler="inductor", **joint_once["kw"]
        )
    outputs = joint_once["kw"].get("num_fwd_outputs", 1)
    return dict(fw=fw, bw=bw, outputs=outputs, joint_s=0.0, solver_s=time.perf_counter() - start)


def _trainable(model: _Model) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.state.items() if v.requires_grad}


def _gradients_equal(model: _Model, loss: str) -> bool:
    """Whether the gradients the split step left in the parameters are eager autograd's."""
    trainable = _trainable(model)
    eager = torch.autograd.grad(_loss(model.module(*model.inputs), loss), list(trainable.values()), allow_unused=True)
    return all(
        torch.allclose(
            p.grad if p.grad is not None else torch.zeros_like(p),
            e if e is not None else torch.zeros_like(p),
            rtol=1e-4,
            atol=1e-6,
        )
        for p, e in zip(trainable.values(), eager)
    )


# NOTE: [One joint trace for fake weights]
# The joint forward-backward graph does not depend on the budget; only min-cut's choice does. With
# real weights every budget is traced and run again, so its split is checked against eager's
# gradients. With fake weights (large models: Llama-3-70B's joint trace is the slow part) nothing
# runs, so the first budget's joint graph is kept and min-cut runs on a copy of it at each other
# budget (min-cut changes the graph it is given). The decisions equal those of separate traces
# (tests/remat/test_remat_hf.py compares them with real weights at three budgets).


def _loss(out: Any, kind: str) -> torch.Tensor:
    leaves = [
        t
        for t in torch.utils._pytree.tree_leaves(out)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad
    ]
    if not leaves:
        raise PartitionError("no output of the model needs a gradient: there is no loss to train")
    return sum((t.sum() if kind == "sum" else t.mean()) for t in leaves)  # type: ignore[return-value]


VIEW_OPS = VIEWS  # the op table's views (partitioner.op_table)


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


def _read(budget: float, seen: dict[str, Any], peak_flops: float, gradients_equal: bool | None) -> RematResult:
    fw: fx.GraphModule = seen["fw"]
    bw: fx.GraphModule = seen["bw"]
    output = next(n for n in fw.graph.nodes if n.op == "output")
    saved_values = [a for a in output.args[0][seen["outputs"] :] if isinstance(a, fx.Node)]
    held = {_storage(n) for n in fw.graph.nodes if n.op == "placeholder"} - {None}
    by_node: dict[str, int] = {}
    input_bytes = 0
    counted: set[Any] = set()
    # NOTE: [Saved bytes per storage]
    # A saved value that is a view keeps its whole storage alive (sdpa's q, k and v are views of
    # GPT-2's fused c_attn output): each distinct storage counts once, at its full size, under
    # the first saved value that reads it. Views of parameters and inputs count as those.
    for value in saved_values:
        size, storage = _nbytes(value), _storage(value)
        key = storage if storage is not None else value.name
        if key in counted:
            continue
        if value.op == "placeholder" or storage in held:
            counted.add(key)
            input_bytes += size
            continue
        name = _origin(value)
        if name is None:
            continue
        counted.add(key)
        by_node[name] = by_node.get(name, 0) + size
    fw_ops = [n for n in fw.graph.nodes if n.op == "call_function"]
    fw_names = {n.name for n in fw_ops}
    # Views (a new shape over a saved storage) cost nothing to redo: min-cut always redoes them.
    recomputed = [
        n
        for n in bw.graph.nodes
        if n.op == "call_function"
        and n.meta.get("partitioner_tag") == "is_forward"
        and n.name in fw_names
        and not is_view(getattr(n.target, "_opname", ""))
    ]
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
        recompute_time_s=flops / peak_flops,
        saved_bytes_by_node=by_node,
        recomputed_ops=len(recomputed),
        forward_ops=len(fw_ops),
        joint_trace_s=seen.get("joint_s", 0.0),
        solver_s=seen.get("solver_s", 0.0),
        gradients_equal=gradients_equal,
    )


def _nbytes(node: fx.Node) -> int:
    """Bytes of the storage the node's value lives in (a view's whole base)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    try:
        return int(val.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):  # no storage (a sparse or wrapper tensor)
        return int(val.numel() * val.element_size())


def _storage(node: fx.Node) -> Any:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        from torch.multiprocessing.reductions import StorageWeakRef

        return StorageWeakRef(val.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None
