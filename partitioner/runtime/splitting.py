"""Apply a plan: a ``torch.fx.GraphModule`` with one submodule per partition.

Built with ``torch.fx.passes.split_module.split_module``; submodules are named
``submod_<partition id>`` and run in topological order of the partition DAG.
"""

from __future__ import annotations

import copy

import torch.fx as fx
from torch.fx.passes.split_module import split_module

from partitioner.errors import InvalidPlanError, PartitionError
from partitioner.graph import Graph
from partitioner.plan.records import Plan
from partitioner.plan.validate import DEVICE_KINDS

__all__ = ["split"]


def split(plan: Plan, graph: Graph) -> fx.GraphModule:
    """Split the traced model of ``graph`` by ``plan``. Raises when the plan does not fit it."""
    if graph.graph_module is None:
        raise PartitionError(
            f"graph {graph.name!r} has no traced module to split (it was built by hand); "
            "use partitioner.trace(model, example_inputs)"
        )
    problems = [v for v in plan.violations(graph) if v.kind not in DEVICE_KINDS]
    if problems:
        raise InvalidPlanError(problems)
    mapping = plan.node_to_partition()
    gm = graph.graph_module

    def callback(node: fx.Node) -> int:
        return mapping[node.name]

    result = split_module(gm, gm, callback, keep_original_order=False)
    codegen = gm.graph._codegen
    if type(codegen) is not fx.graph.CodeGen:
        # torch.export modules flatten inputs and outputs with a pytree codegen; give the split
        # module the same calling convention so it is a drop-in replacement.
        result.graph._codegen = copy.deepcopy(codegen)
        result.recompile()
    return result
