"""The tensor-parallel plan a composed run shards: the model's Linear layers in column/row pairs
(NOTE: [Linear pairs]), or a model's own plan (attention by heads, embeddings) from
:mod:`partitioner.sharding`.

# NOTE: [Linear pairs]
Megatron-LM's MLP split: the first Linear of a pair is column-parallel (each rank computes a
slice of its output features), the second row-parallel (each rank reads that slice and the
partial sums are all-reduced), so only an elementwise op may stand between them. The plan pairs
the model's Linear layers in module order (``layers.0`` colwise, ``layers.1`` rowwise, ...) and
checks on the symbolic trace that the second reads the first through elementwise ops only, that
neither output is read elsewhere, and that the shared width divides by tp; any other parameter
holder (an embedding, a norm, a convolution) is refused: run it with tp1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from partitioner.errors import PartitionError
from partitioner.op_table import names

if TYPE_CHECKING:
    import torch

    from partitioner.sharding.tensor_parallel import TPPlan

__all__ = ["linear_pairs_plan", "model_tp_plan"]

# The activation layers and functions a Linear pair may hold (NOTE: [Shards through ops] in
# partitioner.op_table).
_ELEMENTWISE = names(tp="activation")


def _elementwise(gm: Any, node: Any) -> bool:
    if node.op == "call_module":
        name = type(gm.get_submodule(node.target)).__name__.lower()
    elif node.op in ("call_function", "call_method"):
        name = getattr(node.target, "__name__", str(node.target)).lower()
    else:
        return False
    return name.strip("_") in _ELEMENTWISE


def linear_pairs_plan(module: torch.nn.Module, tp: int) -> tuple[tuple[str, str], ...]:
    """The tensor-parallel styles of ``module``'s Linear layers (NOTE: [Linear pairs]); raises
    :class:`PartitionError` naming what cannot be sharded. O(N) over the traced graph."""
    import torch

    linears = [(n, m) for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)]
    _check_linears_only(module, len(linears))
    gm, calls = _module_calls(module)
    plan: list[tuple[str, str]] = []
    for (a, la), (b, lb) in zip(linears[0::2], linears[1::2]):
        _check_pair(gm, calls, (a, la), (b, lb), tp)
        plan += [(a, "colwise"), (b, "rowwise")]
    return tuple(plan)


def _check_linears_only(module: torch.nn.Module, linears: int) -> None:
    """Refuse a model whose parameters are not all in its ``linears`` Linear layers, or whose
    Linear layers do not pair up."""
    import torch

    others = sorted(
        f"{n} ({type(m).__name__})"
        for n, m in module.named_modules()
        if not isinstance(m, torch.nn.Linear) and any(True for _ in m.parameters(recurse=False))
    )
    if others:
        more = f" and {len(others) - 4} more" if len(others) > 4 else ""
        raise PartitionError(
            f"tensor parallelism here shards Linear layers only; {', '.join(others[:4])}{more} "
            f"hold parameters of other kinds: run this model with tp1"
        )
    if not linears or linears % 2:
        raise PartitionError(
            f"tensor parallelism pairs Linear layers (colwise, rowwise); the model has {linears}: run it with tp1"
        )


def _module_calls(module: torch.nn.Module) -> tuple[Any, dict[str, list[Any]]]:
    """``module``'s symbolic trace and the nodes that call each of its submodules, by path."""
    import torch.fx as fx

    from partitioner.tracing.lock import TRACE_LOCK

    try:
        with TRACE_LOCK:  # fx tracing patches module-level state: one trace at a time in a process
            gm = fx.symbolic_trace(module)
    except Exception as exc:  # noqa: BLE001 - any trace failure means the pairs cannot be checked
        raise PartitionError(
            f"tensor parallelism checks the Linear pairs on a symbolic trace, which failed "
            f"({type(exc).__name__}: {exc}): run this model with tp1"
        ) from None
    calls: dict[str, list[Any]] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            calls.setdefault(str(node.target), []).append(node)
    return gm, calls


def _check_pair(gm: Any, calls: dict[str, list[Any]], first: tuple[str, Any], second: tuple[str, Any], tp: int) -> None:
    """Refuse a Linear pair that cannot run column- then row-parallel: a shared width that does
    not match or divide by ``tp``, a layer called more than once, anything but one chain of
    elementwise ops between them."""
    (a, la), (b, lb) = first, second
    if la.out_features != lb.in_features or la.out_features % tp:
        raise PartitionError(
            f"Linear pair {a} -> {b}: the shared width must match and divide by tp={tp} "
            f"(got {la.out_features} -> {lb.in_features}); choose a tp that divides it"
        )
    if len(calls.get(a, [])) != 1 or len(calls.get(b, [])) != 1:
        raise PartitionError(f"Linear pair {a} -> {b}: each must be called once in the forward: run with tp1")
    node = calls[b][0].args[0] if calls[b][0].args else None
    while node is not None and node is not calls[a][0]:
        tensors = [x for x in node.all_input_nodes]
        if not (_elementwise(gm, node) and len(tensors) == 1 and len(node.users) == 1):
            raise PartitionError(
                f"Linear pair {a} -> {b}: only elementwise ops may stand between a column- "
                f"and a row-parallel Linear (found {node.op} {node.target}): run with tp1"
            )
        node = tensors[0]
    if node is None or len(node.users) != 1:
        raise PartitionError(f"Linear pair {a} -> {b}: {b} must read {a}'s output alone: run with tp1")


def model_tp_plan(graph: Any, tp: int) -> TPPlan | None:
    """The tensor-parallel plan of a composed run over ``tp`` devices: a model's own
    (transformers' ``base_model_tp_plan``: attention by heads, MLPs column then row) with the
    embeddings split by rows and the output head by columns as torchtitan splits them (the
    planner counts every parameter over tp); for a model without one whose Linear pairs do not
    cover it (norms, embeddings, attention), its MLP pairs
    (:func:`partitioner.sharding.tensor_parallel.mlp_pairs`) with everything else replicated; None
    where the Linear pairs serve (NOTE: [Linear pairs]). Raises
    :class:`~partitioner.errors.ShardingError` when the model's plan does not divide by ``tp``."""
    from partitioner.errors import ShardingError
    from partitioner.sharding import tensor_parallel
    from partitioner.sharding._modules import module_kinds
    from partitioner.sharding.model_plan import model_plan_styles
    from partitioner.sharding.specs import parameter_shapes

    if tp < 2:
        return None
    if not model_plan_styles(graph):
        try:
            linear_pairs_plan(graph.graph_module, tp)
            return None
        except PartitionError:
            pairs = tensor_parallel.mlp_pairs(graph, tp)
            return tensor_parallel.tp_plan(graph, pairs, tp) if pairs else None
    spec = tensor_parallel.from_model_plan(graph, tp)
    kinds, shapes = module_kinds(graph), parameter_shapes(graph)
    rows = {path: shapes[f"{path}.weight"][0][0] for path in kinds if f"{path}.weight" in shapes}
    vocab = {rows[path] for path, kind in kinds.items() if kind == "embedding" and path in rows}
    ends = {
        f"{path}.weight": f"{tp},1"
        for path, kind in kinds.items()
        if path in rows
        and f"{path}.weight" not in spec
        and rows[path] % tp == 0
        and (kind == "embedding" or (kind == "linear" and rows[path] in vocab))
    }  # tied heads are one parameter
    try:
        return tensor_parallel.tp_plan(graph, {**spec, **ends}, tp)
    except ShardingError:  # an end that will not split: the model's own plan alone
        return tensor_parallel.tp_plan(graph, spec, tp)
