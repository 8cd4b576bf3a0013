"""Node latencies from a measured device profile (:mod:`partitioner.device_profile`): what
:func:`partitioner.cost.model.roofline_latencies` uses in place of the flat roofline when the
devices carry one (NOTE: [Op time from a profile] there)."""

from __future__ import annotations

from typing import Sequence

from partitioner import kernels
from partitioner.cost import ops as gpu_ops
from partitioner.device_profile import DeviceProfile
from partitioner.devices import Device
from partitioner.graph import Graph

__all__ = ["device_profile", "transfer_latency_s", "profile_latencies", "runs_serially"]

NodeLatency = tuple[float, float]  # (memory seconds, compute seconds)


def device_profile(devices: Sequence[Device]) -> DeviceProfile | None:
    """The measured profile the cost model uses for ``devices``: the first device's that has one
    (NOTE: [One speed per plan]), or None (the flat roofline)."""
    return next((d.profile for d in devices if d.profile is not None), None)


def runs_serially(devices: Sequence[Device]) -> bool:
    """Whether the devices run a partition's ops one at a time (NOTE: [A partition's ops run one
    at a time] in :mod:`partitioner.cost.model`): devices priced by a measured profile."""
    return device_profile(devices) is not None


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
    A GPU's profile prices each op by its kernel curves through its engine
    (:func:`gpu_latencies`). O(N + E)."""
    if profile.gpu is not None:
        return gpu_latencies(graph, profile, batch_fraction)
    latencies: list[NodeLatency] = []
    for i, node in enumerate(graph.nodes):
        if not node.is_op:
            latencies.append((0.0, 0.0))
            continue
        moved = graph.activation_bytes(i) * batch_fraction + node.param_bytes
        latencies.append(
            profile.op_seconds(
                node.flops * batch_fraction,
                moved,
                node.dtype,
                node.op,
                node.target,
                gpu_ops.module_kind(graph, node),
                in_dtype=gpu_ops.input_dtype(graph, i),  # a cast to its own dtype moves nothing
            )
        )
    return latencies


def gpu_latencies(graph: Graph, profile: DeviceProfile, batch_fraction: float = 1.0) -> list[NodeLatency]:
    """Per node index: (memory seconds, compute seconds) on a GPU profile: each op's kernel from
    the measured curves, then its engine (NOTE: [Engines] in :mod:`partitioner.kernels`): under
    "eager" each op's increment of the launch queue (NOTE: [Eager launch queue]), so the nodes of
    one device add up to the queue's time. A matrix product's, attention's or the loss's time is
    compute, every other op's memory (the other half of the pair is 0). O(N + E)."""
    gpu = profile.gpu
    assert gpu is not None
    ops, _ = gpu_ops.op_times(graph, gpu, lambda node: gpu_ops.module_kind(graph, node))
    if batch_fraction != 1.0:
        ops = [op.scaled(batch_fraction) if op is not None else None for op in ops]
    times = [gpu.kernel_s(op) if op is not None else 0.0 for op in ops]
    if profile.engine == "graphs":
        spent = [kernels.fused_s(gpu, op, t) if op is not None else 0.0 for op, t in zip(ops, times)]
    else:
        order = [v for v in range(len(ops)) if ops[v] is not None]
        steps = kernels.eager_increments(
            [gpu.host_per_op_s * ops[v].launches for v in order],  # type: ignore[union-attr]
            [times[v] for v in order],
        )
        spent = [0.0] * len(ops)
        for v, t in zip(order, steps):
            spent[v] = t
    out: list[NodeLatency] = []
    for op, t in zip(ops, spent):
        if op is None:
            out.append((0.0, 0.0))
        elif op.kind in ("matmul", "attention", "loss"):
            out.append((0.0, t))
        else:
            out.append((t, 0.0))
    return out
