"""Training memory, torch-free: what one budget's min-cut result holds (:class:`RematResult`),
each device's parameters, gradients, optimizer state and saved activations under a plan, and the
largest budget at which every device fits. The joint trace that makes a result is
:mod:`partitioner.remat._joint` (torch, in a worker process)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from partitioner.cost.training import state_bytes, traced_element_bytes
from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.plan.records import Plan

__all__ = ["RematResult", "TrainingMemory", "training_memory", "largest_fitting_budget", "LOSSES", "check_request"]

LOSSES = ("sum", "mean")


@dataclass(frozen=True)
class RematResult:
    """What the backward reads and recomputes at one budget; names are the traced graph's."""

    budget: float
    saved: tuple[str, ...]  # forward nodes whose values the backward reads (activations)
    recomputed: tuple[str, ...]  # forward nodes the backward computes again
    saved_activation_bytes: int  # distinct storages saved, parameters and inputs apart
    saved_input_bytes: int  # parameters, buffers and inputs the backward reads (held anyway)
    recompute_flops: int
    recompute_time_s: float  # the recomputed FLOPs at ``peak_flops`` (FLOP/s)
    saved_bytes_by_node: dict[str, int] = field(default_factory=dict)
    recomputed_ops: int = 0  # aten ops the backward recomputes (views apart: they are free)
    forward_ops: int = 0  # aten ops in the forward
    joint_trace_s: float = 0.0
    solver_s: float = 0.0
    gradients_equal: bool | None = True  # split forward and backward gave eager's gradients; None: fake weights

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["saved"], out["recomputed"] = list(self.saved), list(self.recomputed)
        return out


@dataclass(frozen=True)
class TrainingMemory:
    """One device's training memory (NOTE: [Training state] in :mod:`partitioner.cost.training`)."""

    parameters: int
    gradients: int
    optimizer: int  # the optimizer's state, with mixed precision's fp32 master copy
    activations: int  # saved for the backward

    @property
    def total_bytes(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations

    def parts(self) -> dict[str, int]:
        """Part name -> bytes, in stacking order (the training page's figure)."""
        return {
            "parameters": self.parameters,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
        }


def training_memory(
    plan: Plan, graph: Graph, result: RematResult, optimizer: str | None = "adam"
) -> dict[int, TrainingMemory]:
    """Each device's training memory under ``plan``: the parameters its partitions hold, their
    gradients and optimizer state (:func:`partitioner.cost.training.state_bytes` at the graph's
    element type, the rule every technique reads), and the activations saved for the backward by
    nodes it runs (``result``'s budget). A replicated partition counts on each of its devices.
    ``optimizer`` None: inference (no gradients, no state). O(N + E)."""
    per_param = state_bytes(optimizer, traced_element_bytes(graph))
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
        held = per_param.of(params[d] + sum(graph.output_bytes[u] for u in attrs.get(d, ())))
        out[d] = TrainingMemory(held.weights, held.gradients, held.state, activations[d])
    return out


def largest_fitting_budget(
    plan: Plan, graph: Graph, results: Sequence[RematResult], optimizer: str | None = "adam"
) -> RematResult | None:
    """The result with the largest budget (the least recomputation) at which every device's
    training memory fits its capacity; None when none does."""
    capacity = {d.logical_id: d.memory_bytes for d in plan.devices}
    for result in sorted(results, key=lambda r: -r.budget):
        used = training_memory(plan, graph, result, optimizer)
        if all(m.total_bytes <= capacity[d] for d, m in used.items()):
            return result
    return None


def check_request(budget: float, loss: str) -> None:
    if not (isinstance(budget, (int, float)) and 0.0 <= float(budget) <= 1.0):
        raise PartitionError(
            f"budget must be between 0 and 1 (got {budget!r}); 1 saves what min-cut would, 0 recomputes all it can"
        )
    if loss not in LOSSES:
        raise PartitionError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")
