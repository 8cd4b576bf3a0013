"""Predicted times of real runs from a measured device profile, split as a run is measured:
a tensor-parallel forward (compute, each collective) on ``world_size`` processes.

# NOTE: [A tensor-parallel forward on a measured profile]
Every rank runs every op of the graph. An op inside a module the plan shards (or inside a block
sharded by heads) does 1 / world of its FLOPs, weights and output (Megatron-LM's split); the other
ops run whole on every rank. The ops' time is multiplied by the profile's slowdown for
``world_size`` ranks computing at once (they share the cores). DTensor adds its dispatch: each
sharded module call pays ``dtensor_module_for(world)`` (its input wrapped, its op dispatched on
DTensors, its output unwrapped: measured in place on ``world`` ranks at once, NOTE: [Engine costs
in place]), except a row-parallel module whose output is all-reduced: the profile's
``dtensor_all_reduce`` fit at that process count was measured on the whole row-parallel call
after compute (its dispatch and its all-reduce), so it is charged once, as the collective. An
all-gather's fit is per rank's part, so its bytes are the gathered tensor's over world.
O(N + E + C).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from partitioner.cost.model import profile_latencies
from partitioner.device_profile import DeviceProfile
from partitioner.graph import Graph

__all__ = ["Predicted", "tp_forward"]


@dataclass(frozen=True)
class Predicted:
    """A predicted time and where it goes (``parts``: name -> seconds, summing to ``total_s``)."""

    total_s: float
    parts: tuple[tuple[str, float], ...]

    def part(self, name: str) -> float:
        return sum(s for n, s in self.parts if n == name)


def _in(path: str, modules: Any) -> str | None:
    for m in modules:
        if path == m or path.startswith(m + "."):
            return str(m)
    return None


def tp_forward(graph: Graph, plan: Any, profile: DeviceProfile) -> Predicted:
    """The forward of ``plan`` (a :class:`~partitioner.sharding.tensor_parallel.TPPlan`) on
    ``plan.world_size`` ranks of ``profile`` (NOTE: [A tensor-parallel forward on a measured
    profile])."""
    world = int(plan.world_size)
    whole = profile_latencies(graph, profile)
    split = profile_latencies(graph, profile, 1.0 / world)
    styled = sorted(plan.styles)
    blocks = sorted(getattr(plan, "blocks", ()) or ())
    compute = 0.0
    calls: set[str] = set()
    for v in graph.op_indices:
        node = graph.nodes[v]
        owner = _in(node.module_path, styled) if node.module_path else None
        if owner is None and node.op == "call_module":
            owner = _in(node.target, styled)
        if owner is None:
            headed = node.module_path and _in(node.module_path, blocks)
            compute += max(split[v] if headed else whole[v])
            continue
        # FLOPs and activations split; the weights of a sharded module split too.
        mem_s, comp_s = split[v]
        if node.param_bytes:
            share = node.param_bytes * (1 - 1 / world)
            mem_s = max(0.0, mem_s - share / profile.bandwidth_bytes_per_s(max(share, 1.0)))
        compute += max(mem_s, comp_s)
        calls.add(owner)
    in_place = profile.collective("dtensor_all_reduce", world) is not None
    reduced = sum(1 for c in plan.collectives if not c.backward and c.kind == "all_reduce") if in_place else 0
    dispatched = max(0, len(calls) - reduced)
    parts = [
        ("compute", compute * profile.slowdown_for(world)),
        ("dtensor dispatch", profile.dtensor_module_for(world) * dispatched),
    ]
    for c in plan.collectives:
        if c.backward:
            continue
        nbytes = c.nbytes / world if c.kind == "all_gather" else c.nbytes
        kind = "dtensor_all_reduce" if c.kind == "all_reduce" and in_place else c.kind
        parts.append((f"{c.kind} {c.node}", profile.collective_s(kind, nbytes, world)))
    return Predicted(sum(s for _, s in parts), tuple(parts))
