"""Node latencies from a measured device profile (:mod:`partitioner.device_profile`): what
:func:`partitioner.cost.model.roofline_latencies` uses in place of the flat roofline when the
devices carry one (NOTE: [Op time from a profile] there)."""

from __future__ import annotations

from typing import Any, Sequence

from partitioner.device_profile import DeviceProfile
from partitioner.devices import Device
from partitioner.graph import Graph

__all__ = ["device_profile", "transfer_latency_s", "profile_latencies"]

NodeLatency = tuple[float, float]  # (memory seconds, compute seconds)


def device_profile(devices: Sequence[Device]) -> DeviceProfile | None:
    """The measured profile the cost model uses for ``devices``: the first device's that has one
    (NOTE: [One speed per plan]), or None (the flat roofline)."""
    return next((d.profile for d in devices if d.profile is not None), None)


def transfer_latency_s(devices: Sequence[Device]) -> float:
    """Latency of one transfer between devices: the measured point-to-point latency of their
    profile, 0 without one."""
    profile = device_profile(devices)
    link = profile.link if profile else None
    return link.latency_s if link else 0.0


def profile_latencies(graph: Graph, profile: DeviceProfile, batch_fraction: float = 1.0) -> list[NodeLatency]:
    """Per node index: (memory seconds, compute seconds) from a measured profile, overhead
    included in both (NOTE: [Op time from a profile]). ``batch_fraction`` prices one microbatch
    of the traced batch: FLOPs and activations scale by it, weights and overheads do not.
    O(N + E)."""
    latencies: list[NodeLatency] = []
    for i, node in enumerate(graph.nodes):
        if not node.is_op:
            latencies.append((0.0, 0.0))
            continue
        moved = graph.activation_bytes(i) * batch_fraction + node.param_bytes
        latencies.append(profile.op_seconds(node.flops * batch_fraction, moved, node.dtype, node.op, node.target,
                                            _module_kind(graph, node)))
    return latencies


def _module_kind(graph: Graph, node: Any) -> str:
    """The type name of the module a ``call_module`` node calls (``"GELU"``), read from the traced
    module when the graph has one; "" otherwise (the profile's copy curve prices it then)."""
    if node.op != "call_module" or graph.graph_module is None:
        return ""
    try:
        return type(graph.graph_module.get_submodule(node.target)).__name__
    except AttributeError:
        return ""
