"""A pipeline plan's stages as GraphModules cut from the traced graph, each the
``PipelineStage`` body of one stage in a real run (:mod:`partitioner.pipeline.runner`, and the
composed pipelined runs of :mod:`partitioner.cluster.run`).

# NOTE: [Carrying values across cuts]
``PipelineStage`` passes one tuple of tensors from stage s to stage s + 1 only, so a value made
in stage 0 and read in stage 2 (a skip connection, an attention mask, the token ids) is carried:
every stage returns the tensors live after its cut, its own and those it passes through.
Values that are not tensors (``x.size(0)`` under symbolic tracing) cannot cross; the reading
stage recomputes them from the tensors it receives. A stage module keeps the original module's
qualified names (``layers.0.fc.weight``), so gradients compare by name.

We do not use ``pipeline(module, split_spec=...)``: it re-traces with ``torch.export``, whose node
names differ from the traced graph the plan's cut points name, and it cannot take a cut between
two operations of one submodule. Stages built from our own graph run under the same schedules.

# NOTE: [Dense gradients at a cut]
A stage receives the gradient of each value it sent into a buffer torch 2.13 allocates with the
strides of the gradient its shape inference saw on the next stage, and gloo receives only into
contiguous buffers. A cut inside attention carries the query heads ``[b, s, h, d]`` that the next
stage transposes: their gradient comes back with the transposed strides, and the first stage's
receive failed ("input tensor has to be contiguous"). Every stage after the first therefore reads
each carried value through :class:`DenseGrad`, the identity whose backward makes the gradient
contiguous, so both the inferred strides and the gradients sent are row-major.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.processes.portable import picklable

__all__ = ["build_stage_modules", "DenseGrad"]


class _DenseGrad(torch.autograd.Function):
    """The identity forward; the backward hands on its gradient with row-major strides."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class DenseGrad(torch.nn.Module):
    """``x`` itself in the forward; in the backward its gradient made contiguous (NOTE: [Dense
    gradients at a cut]). Values that take no gradient pass untouched. A module, so the call
    stays a node of its own when fx traces a stage again (a stage's pickle re-traces its code)."""

    def forward(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad:
            return _DenseGrad.apply(x)
        return x


def _dense_inputs(module: fx.GraphModule) -> fx.GraphModule:
    """``module`` reading each input through one :class:`DenseGrad`."""
    module.add_submodule("dense_grad", DenseGrad())
    graph = module.graph
    for p in [n for n in graph.nodes if n.op == "placeholder"]:
        with graph.inserting_after(p):
            dense = graph.call_module("dense_grad", (p,))
        p.replace_all_uses_with(dense, delete_user_cb=lambda user, dense=dense: user is not dense)
    graph.lint()
    module.recompile()
    return module


def build_stage_modules(
    graph: Graph, stages: Sequence[Sequence[str]], example_inputs: Sequence[Any]
) -> list[fx.GraphModule]:
    """One ``GraphModule`` per stage (see NOTE: [Carrying values across cuts]); stage 0 takes the
    model's inputs, the last returns the model's output leaves (one tensor, or a tuple)."""
    gm = graph.graph_module
    if gm is None:
        raise PartitionError(f"graph {graph.name!r} has no traced module to run; use partitioner.trace(model, inputs)")
    nodes = list(gm.graph.nodes)
    stage_of = {name: s for s, names in enumerate(stages) for name in names}
    is_tensor = _tensor_outputs(gm, example_inputs)
    placeholders = _place_inputs(nodes, stage_of, is_tensor)
    missing = [n.name for n in nodes if n.op not in ("placeholder", "get_attr", "output") and n.name not in stage_of]
    if missing:
        raise PartitionError(
            f"the plan's stages miss {len(missing)} operation(s) of the model ({missing[:3]}); "
            "was the plan made for this model?"
        )
    output = next(n for n in nodes if n.op == "output")
    leaves = tree_flatten(output.args[0])[0]
    if not all(isinstance(a, fx.Node) and is_tensor[a.name] for a in leaves):
        raise PartitionError("the model returns values that are not tensors; a pipeline's last stage returns tensors")
    count = len(stages)
    carried = _carried(nodes, output, stage_of, is_tensor, count)
    modules = []
    for s in range(count):
        inputs = [p.name for p in placeholders] if s == 0 else carried[s - 1]
        last = s == count - 1
        outputs = [a.name for a in leaves] if last else carried[s]
        modules.append(_stage_module(gm, nodes, stage_of, s, inputs, outputs, last))
    return modules


def _tensor_outputs(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> dict[str, bool]:
    """Whether each node's value is a tensor, from one run on the example inputs."""
    is_tensor: dict[str, bool] = {}

    class _Types(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            value = super().run_node(n)
            is_tensor[n.name] = isinstance(value, torch.Tensor)
            return value

    with torch.no_grad():
        _Types(gm).run(*example_inputs)
    return is_tensor


def _place_inputs(nodes: list[fx.Node], stage_of: dict[str, int], is_tensor: dict[str, bool]) -> list[fx.Node]:
    """The model's inputs, placed before stage 0 (stage -1), each checked to be a tensor."""
    placeholders = [n for n in nodes if n.op == "placeholder"]
    for p in placeholders:
        if not is_tensor[p.name]:
            raise PartitionError(f"input {p.name!r} is not a tensor; a pipeline passes tensors between stages")
        stage_of[p.name] = -1
    return placeholders


def _reads_before(n: fx.Node, s: int, stage_of: dict[str, int], is_tensor: dict[str, bool], into: set[str]) -> None:
    """Tensors from before stage s that computing ``n`` in stage s reads (through non-tensor
    values, which the stage recomputes)."""
    for a in n.all_input_nodes:
        if a.op == "get_attr" or stage_of.get(a.name) == s:
            continue
        if is_tensor[a.name]:
            into.add(a.name)
        else:
            _reads_before(a, s, stage_of, is_tensor, into)


def _carried(
    nodes: list[fx.Node], output: fx.Node, stage_of: dict[str, int], is_tensor: dict[str, bool], count: int
) -> list[list[str]]:
    """carried[c]: the tensors live after stage c, in graph order."""
    reads: list[set[str]] = [set() for _ in range(count + 1)]  # index count: the model's output
    for n in nodes:
        if n.name in stage_of and stage_of[n.name] >= 0:
            _reads_before(n, stage_of[n.name], stage_of, is_tensor, reads[stage_of[n.name]])
    _reads_before(output, count, stage_of, is_tensor, reads[count])
    order = {n.name: i for i, n in enumerate(nodes)}
    carried = []
    for c in range(count - 1):
        live = {v for t in range(c + 1, count + 1) for v in reads[t] if stage_of[v] <= c}
        carried.append(sorted(live, key=order.__getitem__))
    return carried


def _stage_module(
    gm: fx.GraphModule,
    nodes: list[fx.Node],
    stage_of: dict[str, int],
    s: int,
    inputs: Sequence[str],
    outputs: Sequence[str],
    last: bool,
) -> fx.GraphModule:
    """Stage ``s`` reading the values named ``inputs`` and returning those named ``outputs``: the
    model's output leaves on the ``last`` stage, else the tensors carried past its cut."""
    by_name = {n.name: n for n in nodes}
    g = fx.Graph()
    env: dict[str, fx.Node] = {}
    for name in inputs:
        env[name] = g.placeholder(name)

    def value(a: fx.Node) -> fx.Node:
        if a.name not in env:  # a parameter, or a non-tensor to recompute here
            env[a.name] = g.node_copy(a, lambda b: value(b))
        return env[a.name]

    for n in nodes:
        if stage_of.get(n.name) == s and n.op != "placeholder":
            env[n.name] = g.node_copy(n, value)
    if last:
        outs = [value(by_name[name]) for name in outputs]
    else:  # gloo sends only contiguous tensors: a carried view (a transpose) is copied first
        outs = [g.call_method("contiguous", (value(by_name[v]),)) for v in outputs]
    g.output(outs[0] if len(outs) == 1 else tuple(outs))
    module = fx.GraphModule(gm, g, class_name=f"Stage{s}")
    if s > 0:  # the gradient sent back over the cut leaves dense (NOTE: [Dense gradients at a cut])
        module = _dense_inputs(module)
    return picklable(module)
