"""Trace a model of repeated blocks once a block: trace it cut to a few layers, repeat them to its
whole depth, and keep the whole trace for when a module is asked for (DESIGN.md, "A model of
identical blocks is traced once a distinct block and repeated, node for node equal to a full
trace"; issue 57).

# NOTE: [Tracing a repeated block once]
Tracing costs about a millisecond a node (torch.export, then a fake-tensor run), so a model's
trace grows with its depth: Llama-3-70B's 80 layers took 42 s of CPU, 405B's 126 layers 52 s,
though every layer is the same block. Here the model is traced with each stack of blocks cut
(:func:`~partitioner.tracing.blocks.selected_layers`, with the configs' layer counts and per-layer
lists cut alike) to the layers :attr:`Stack.keep` names: each run of same-kind layers' first,
second and last layer (3 layers for a Llama, 4 for T5's stacks whose first block differs), and
that trace is repeated to the full depth (:func:`~partitioner.tracing.expand.expand`). Before
repeating, the rule is checked on a graph a trace can give: the cut trace expanded by one more
layer a run (:attr:`Stack.check`) must equal, node for node, the trace of that longer cut (same
names, ops, targets, edges, module paths, shapes, bytes, parameters, FLOPs). Anything else (no
stack, layers of different kinds in every run, a layout the expansion does not know, a
difference in that check) traces the whole model, as before, and says why in the log.

The repeated graph holds no traced module: the whole model is traced when something first asks
for ``graph_module`` (a split, a real run), as a graph read from the trace cache is
(:class:`~partitioner.tracing.cache.CachedGraph`), and that trace must have the same fingerprint.
The two traces of 3 and 4 layers cost about what a whole trace of 10 layers does, at any depth:
Llama 3.1 405B from its config to its graph in 2.0 s of CPU against 14.2 s traced whole, 70B 1.7 s
against 11.0 s, 8B 1.9 s against 5.1 s (bench/bench_trace.py; T5-base, whose 24 blocks in four
runs keep 8, gains little: 3.0 s against 3.3 s).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from partitioner.graph import Graph
from partitioner.tracing.blocks import BlockPlan, find_stacks, plan_blocks, selected_layers
from partitioner.tracing.cache import CachedGraph
from partitioner.tracing.expand import ExpandError, expand, first_difference
from partitioner.tracing.lock import TRACE_LOCK
from partitioner.tracing.meta import on_meta
from partitioner.tracing.tracer import model_info, parameter_records, trace

__all__ = ["trace_repeated", "RepeatOutcome"]

logger = logging.getLogger(__name__)

# NOTE: [Too shallow to cut]
# Two cut traces cost two traces' fixed cost (export's setup, the fake-tensor run's) besides their
# layers, and leave the module to trace later. Measured here (CPU, llama and gpt2 layers at width
# 64 and 768): a whole trace costs about 0.15 s plus 0.11 s a layer, so about one and a half
# layers' worth fixed; the cut traces (3 and 4 layers) about 1.0-1.1 s whatever the depth. They
# break even at about 8 layers (llama: 0.91 s whole against 0.99 s cut at 8 layers, 1.50 against
# 1.13 at 12). So a model whose layers are at most those of the two cuts and one more is traced
# whole: the cut pays from 9 layers (a uniform stack).
TRACE_COST_LAYERS = 1


@dataclass(frozen=True)
class RepeatOutcome:
    """How :func:`trace_repeated` made its graph: ``repeated`` from ``traced_layers`` of
    ``layers``, or traced whole for ``reason``."""

    repeated: bool
    layers: int
    traced_layers: int
    reason: str = ""  # why the whole model was traced; "" when repeated
    plan: str = ""  # the stacks and runs found


@dataclass(frozen=True)
class _Request:
    """What :func:`trace_repeated` was asked to trace, and the whole or cut traces of it."""

    model: torch.nn.Module
    inputs: tuple[Any, ...]
    name: str | None
    kwargs: Mapping[str, Any] | None
    weight_scale: float

    def whole(self) -> Graph:
        graph = trace(self.model, self.inputs, name=self.name, example_kwargs=self.kwargs)
        return graph if self.weight_scale == 1.0 else graph.with_weight_bytes(self.weight_scale)

    def cut(self, plan: BlockPlan, selection: Sequence[Sequence[int]]) -> Graph:
        with selected_layers(self.model, plan, selection):
            return self.whole()

    def fallback(self, reason: str, plan: str) -> tuple[Graph, RepeatOutcome]:
        """The whole model traced, and why."""
        logger.info("%s traced whole: %s", self.name or type(self.model).__name__, reason)
        graph = self.whole()
        layers = sum(len(m) for _, m in find_stacks(self.model))
        return graph, RepeatOutcome(False, layers, layers, reason=reason, plan=plan)


def trace_repeated(
    model: torch.nn.Module,
    example_inputs: Sequence[Any] | torch.Tensor,
    name: str | None = None,
    example_kwargs: Mapping[str, Any] | None = None,
    weight_scale: float = 1.0,
    even_if_shallow: bool = False,
) -> tuple[Graph, RepeatOutcome]:
    """The graph :func:`partitioner.trace` gives for ``model`` (its parameter bytes times
    ``weight_scale``, as ``Graph.with_weight_bytes``), made from a trace of a few of its layers
    when its blocks repeat (NOTE: [Tracing a repeated block once]), with how it was made. A model
    too shallow to gain is traced whole unless ``even_if_shallow`` (NOTE: [Too shallow to cut]).
    The graph's module is traced on first use. Takes :data:`TRACE_LOCK` (the model is cut and put
    back meanwhile). O(N) for N nodes, plus two traces of a few layers a stack."""
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    request = _Request(model, inputs, name, example_kwargs, weight_scale)
    plan = _block_plan(model)
    if isinstance(plan, str):
        return request.fallback(plan, "")
    if plan.layers <= plan.kept + plan.checked + TRACE_COST_LAYERS and not even_if_shallow:
        reason = (
            f"too shallow to gain: {plan.layers} layers against {plan.kept} + {plan.checked} traced cut "
            "(NOTE: [Too shallow to cut])"
        )
        return request.fallback(reason, plan.describe())
    with TRACE_LOCK:
        made = _cut_and_expand(request, plan)
        if isinstance(made, str):
            return request.fallback(made, plan.describe())
    whole, records_match = made
    graph = CachedGraph(list(whole.nodes), whole.name, inputs, request.whole, meta_weights=on_meta(model))
    graph.tied_parameters = whole.tied_parameters
    graph.unpriced_ops = whole.unpriced_ops
    graph.model_info = model_info(model)
    graph.named_parameters = parameter_records(model) if records_match else None
    logger.info(
        "%s: traced %d of %d layers and repeated them (%s)", graph.name, plan.kept, plan.layers, plan.describe()
    )
    return graph, RepeatOutcome(True, plan.layers, plan.kept, plan=plan.describe())


def _block_plan(model: torch.nn.Module) -> BlockPlan | str:
    """The model's stacks of blocks, or why they cannot be read."""
    # NOTE: [Tracing a repeated block once]: the cut trace is a shortcut, so whatever fails on the
    # way (a model whose forward will not run cut) traces the whole model, which says its own errors
    try:
        return plan_blocks(model)
    except Exception as exc:
        return f"its blocks could not be read ({type(exc).__name__}: {exc})"


def _cut_and_expand(request: _Request, plan: BlockPlan) -> tuple[Graph, bool] | str:
    """The whole model's graph expanded from the cut trace, and whether the model's parameter list
    matched the longer cut's trace; or why the whole model must be traced instead: the cut model
    fails, or the cut trace expanded by one more layer a run is not that longer cut's trace."""
    keep = [s.keep for s in plan.stacks]
    check = [s.check for s in plan.stacks]
    try:
        cut = request.cut(plan, keep)
        longer = request.cut(plan, check)
        predicted = expand(cut, plan.stacks, check)
    except Exception as exc:  # an ExpandError, or the cut model failing to trace
        return str(exc) if isinstance(exc, ExpandError) else f"the cut model failed: {type(exc).__name__}: {exc}"
    with selected_layers(request.model, plan, check):  # the model's own list, checked on a trace
        records_match = parameter_records(request.model) == longer.named_parameters
    differs = first_difference(predicted, longer)
    if differs:
        return f"the cut trace repeated by one layer differs from its trace: {differs}"
    try:
        return expand(cut, plan.stacks, [range(s.length) for s in plan.stacks]), records_match
    except ExpandError as exc:
        return str(exc)
