"""Per-op costs along a graph's topological order, as prefix sums the pipeline's stage split reads
(:func:`partitioner.pipeline.stages.plan`): forward and backward time per microbatch, parameter
bytes with their training state (NOTE: [Training state] in :mod:`partitioner.cost.training`),
activations, the hand-off after each position, and the weights several stages read. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from partitioner.cost.model import device_profile, node_latencies, profile_latencies
from partitioner.cost.training import traced_element_bytes, training_copies
from partitioner.devices import Device
from partitioner.graph import Graph
from partitioner.pipeline.simulator import simulate

__all__ = ["StageCosts", "stage_costs"]


def _stage_weights(graph: Graph, order: Sequence[int]) -> tuple[list[int], list[tuple[int, list[int], int]]]:
    """Weights by position in ``order``: each op's own parameters plus the attributes (weights,
    lifted by torch.export) whose first reader it is, so contiguous stages sum to
    :attr:`Graph.parameter_bytes`; and the attributes read at several positions (tied weights,
    shared buffers) as ``(first position, later positions, bytes)``: a stage that reads one
    after its first stage holds it too. O(N + E)."""
    pos = {v: i for i, v in enumerate(order)}
    readers: dict[int, list[int]] = {}
    own = [graph.nodes[v].param_bytes for v in order]
    for v in order:
        for u in graph.preds[v]:
            if graph.nodes[u].op == "get_attr":
                readers.setdefault(u, []).append(pos[v])
    shared = []
    for v, (first, size) in graph.repeated_weights.items():  # tied weights of two modules
        if v in pos and first in pos:
            own[pos[v]] -= size
            shared.append((pos[first], [pos[v]], size))
    for u, where in readers.items():
        where = sorted(set(where))
        own[where[0]] += graph.output_bytes[u]
        if len(where) > 1:
            shared.append((where[0], where[1:], graph.output_bytes[u]))
    return own, shared


def _crossing(graph: Graph, order: Sequence[int]) -> list[int]:
    """crossing[c]: bytes of outputs made at or before position c and read after it."""
    pos = {v: i for i, v in enumerate(order)}
    last: dict[int, int] = {}
    for v in order:
        for u in graph.preds[v]:
            if u in pos:
                last[u] = max(last.get(u, -1), pos[v])
    delta = [0] * (len(order) + 1)
    for u, end in last.items():
        if end > pos[u]:
            delta[pos[u]] += graph.output_bytes[u]
            delta[end] -= graph.output_bytes[u]
    out: list[int] = []
    run = 0
    for c in range(len(order)):
        run += delta[c]
        out.append(run)
    return out


@dataclass(frozen=True)
class StageCosts:
    """Per-op prefix sums along the topological order (index i: the ops before position i) and
    what every stage shares: the arrays the split's DP and its scoring read."""

    fwd: list[float]  # forward seconds per microbatch
    bwd: list[float]  # backward seconds per microbatch (0 for inference)
    params: list[float]  # parameter bytes with their training state
    acts: list[float]  # activation bytes per microbatch
    comm: list[float]  # comm[c]: the hand-off after position c, per microbatch
    shared: list[tuple[int, list[int], int]]  # weights read at several positions
    copies: float  # bytes held per byte of weights (NOTE: [Training state])
    stash: list[int]  # microbatches in flight per stage (the schedule's peak stash)
    action: float  # a measured pipelining action's cost beyond its compute
    training: bool

    def memory(self, a: int, b: int, s: int) -> int:
        """Stage ``s`` holding ops a..b-1: its parameters and state, a weight read again after its
        first stage, and the activations of the microbatches in flight."""
        stashed = (self.acts[b] - self.acts[a]) * (self.stash[s] if self.training else 1)
        again = sum(w for first, readers, w in self.shared if first < a and any(a <= r < b for r in readers))
        return int(self.params[b] - self.params[a] + again * self.copies + stashed)


def _prefix(values: Sequence[float]) -> list[float]:
    out = [0.0]
    for x in values:
        out.append(out[-1] + x)
    return out


def stage_costs(
    graph: Graph,
    devices: Sequence[Device],
    stages: int,
    m: int,
    schedule: str,
    training: str | None,
    rate: float | None,
    node_latency: Mapping[str, Sequence[float]] | None,
) -> StageCosts:
    order = list(graph.op_indices)
    lat = node_latencies(graph, devices, node_latency)
    fwd = [max(lat[v]) / m for v in order]
    profile = device_profile(devices) if not node_latency else None
    if profile is not None:  # NOTE: [A pipeline on a measured profile]
        lat = profile_latencies(graph, profile, 1.0 / m)
        busy = profile.slowdown_for(min(len(devices), stages, m))
        fwd = [max(lat[v]) * busy for v in order]
    trains = training is not None
    copies = training_copies(training, traced_element_bytes(graph))
    own, shared = _stage_weights(graph, order)
    cross = _crossing(graph, order)
    comm = [(c / m) / rate if rate else 0.0 for c in cross]
    link = profile.link if profile is not None else None  # the hand-off between computing ranks
    action = profile.pipeline_action_for(stages) if profile is not None else 0.0
    if link is not None:  # a measured action already holds its send's latency
        comm = [(c / m) / link.bandwidth_bytes_per_s + (0.0 if action else link.latency_s) for c in cross]
    return StageCosts(
        fwd=_prefix(fwd),
        bwd=_prefix([2.0 * f if trains else 0.0 for f in fwd]),
        params=_prefix([b * copies for b in own]),
        acts=_prefix([graph.nodes[v].output_bytes / m for v in order]),
        comm=comm,
        shared=shared,
        copies=copies,
        stash=list(simulate([1.0] * stages, m, schedule, training=trains).stage_peak_stash),
        action=action,
        training=trains,
    )
