"""The predicted training step of a composed layout (pp x dp x tp, ZeRO) on a measured device
profile, split as the run is split: compute, DTensor dispatch, each kind of collective, the
pipeline's bubble, actions and hand-offs (:func:`partitioner.cluster.run.compose.run_layout` runs it).

# NOTE: [A composed step on a measured profile]
A rank runs its stage's ops for each of its m microbatches (its replica's rows over the
microbatch size), forward and backward: the forward priced by the profile at one microbatch's
size (:func:`partitioner.cost.measured.profile_latencies`; a Linear the tensor-parallel plan
shards at 1 / tp of it), times the profile's measured ``training_step_factor`` (forward and
backward over forward) and its slowdown for all the layout's ranks computing at once. Tensor
parallelism adds, per microbatch, DTensor's dispatch of every column-parallel Linear (forward and
backward: two calls) and one all-reduce per Linear pair each way (the row-parallel output in the
forward, the column-parallel input's gradient in the backward), priced by the profile's
``dtensor_all_reduce`` fit, which holds the row-parallel call measured after compute. Pipeline
stages run their schedule's slots (GPipe and 1F1B: m + p - 1,
:func:`partitioner.pipeline.steps.step_slots`) forward and as many backward, each slot as long as the slowest
stage's microbatch, plus one pipelining action and one hand-off of the boundary's bytes per slot
each way; the bubble is the slots beyond its m that a stage idles each way. Data parallelism with ZeRO 0 or 1
all-reduces every parameter's local gradient over dp once a step (one call a tensor, as the run
does); with ZeRO 2 or 3 FSDP2 all-gathers each sharded unit's parameters per microbatch (again
in the backward with ZeRO 3) and reduce-scatters the gradients, priced as an all-gather of the
rank's part and an all-reduce. Every collective is priced at its group's size (tp or dp ranks),
DTensor's dispatch at the layout's process count. Groups that run the same work at the same
time (the tp groups of dp replicas; the dp groups of tp shards and stages) are priced by the
profile's ``concurrent_*`` fits, measured with groups of that size side by side on every rank,
where it has them; a pipeline's tp groups work in different slots, so they are priced as one
group alone. (Pricing every collective at the world's count was tried and over-predicted a 2 x 2
run by 45-60 % here.) O(N + E) over the traced graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from partitioner.cost.measured import profile_latencies
from partitioner.cost.runs import Predicted
from partitioner.device_profile import DeviceProfile
from partitioner.graph import Graph
from partitioner.pipeline.steps import step_slots

__all__ = ["composed_step"]


def _bias_bytes(graph: Graph, v: int) -> int:
    node = graph.nodes[v]
    out = node.shape[-1] if node.shape else 0
    return int(out * 4) if node.param_bytes > out * 4 else 0


@dataclass
class _Stages:
    """Per pipeline stage, one microbatch: the forward on the profile, DTensor dispatches, the
    tensor-parallel all-reduces each way, each parameter tensor's local gradient bytes and the
    bytes sent on to later stages."""

    fwd: list[float]
    dispatch: list[float]
    tp_fwd: list[float]
    tp_bwd: list[float]
    grads: list[list[int]]
    boundary: list[float]

    @classmethod
    def empty(cls, pp: int) -> "_Stages":
        return cls([0.0] * pp, [0.0] * pp, [0.0] * pp, [0.0] * pp, [[] for _ in range(pp)], [0.0] * pp)


def _stage_of(
    graph: Graph, layout: Any, tp_plan: Sequence[tuple[str, str]], sharded: bool
) -> tuple[str, dict[str, int]]:
    """The schedule the run takes and each node's stage (empty with one stage)."""
    if layout.pp == 1:
        return "gpipe", {}
    from partitioner.cluster.run.pipelined import stage_cuts
    from partitioner.cluster.run.runnable import run_schedule

    linears = [
        graph.nodes[v].target
        for v in graph.op_indices
        if graph.nodes[v].op == "call_module" and graph.nodes[v].param_bytes
    ]
    cuts = stage_cuts(graph, tuple(tp_plan) if sharded else (), linears, layout.pp)
    return run_schedule(layout).name, {name: s for s, names in enumerate(cuts) for name in names}


def _collective_kinds(profile: DeviceProfile, dp: int, tp: int, pp: int) -> tuple[str, str]:
    """The profile's fits for the tensor-parallel all-reduce and the gradient sync: the concurrent
    ones where groups of that size run side by side and the profile measured them."""
    ring = "dtensor_all_reduce" if profile.collective("dtensor_all_reduce", tp) else "all_reduce"
    if dp > 1 and profile.collective("concurrent_dtensor_all_reduce", tp) is not None:
        ring = "concurrent_dtensor_all_reduce"
    sync = "all_reduce"
    if tp * pp > 1 and profile.collective("concurrent_all_reduce", dp) is not None:
        sync = "concurrent_all_reduce"
    return ring, sync


def _stage_sums(
    graph: Graph,
    layout: Any,
    styles: dict[str, str],
    stage_of: dict[str, int],
    profile: DeviceProfile,
    fraction: float,
    ring: str,
) -> _Stages:
    """Each stage's ops priced at one microbatch (``fraction`` of the traced batch); a Linear the
    plan shards at 1 / tp of it, less the weight bytes it no longer reads."""
    tp, pp, world = layout.tp, layout.pp, layout.dp * layout.tp * layout.pp
    whole = profile_latencies(graph, profile, fraction)
    split = profile_latencies(graph, profile, fraction / tp) if styles else whole
    out = _Stages.empty(pp)
    for v in graph.op_indices:
        node = graph.nodes[v]
        s = stage_of.get(node.name, 0)
        style = styles.get(node.target) if node.op == "call_module" else None
        if style is None:
            out.fwd[s] += max(whole[v])
        else:
            mem_s, comp_s = split[v]
            share = node.param_bytes * (1 - 1 / tp)
            mem_s = max(0.0, mem_s - share / profile.bandwidth_bytes_per_s(max(share, 1.0)))
            out.fwd[s] += max(mem_s, comp_s)
        if node.param_bytes:
            bias = _bias_bytes(graph, v)
            weight = node.param_bytes - bias
            out.grads[s] += [weight // tp if style else weight] + (
                [bias // tp if style == "colwise" else bias] if bias else []
            )
        if style == "colwise":
            out.dispatch[s] += 2 * profile.dtensor_module_for(world)
            src = node.inputs[0] if node.inputs else v
            out.tp_bwd[s] += profile.collective_s(ring, graph.nodes[src].output_bytes * fraction, tp)
        elif style == "rowwise":
            out.tp_fwd[s] += profile.collective_s(ring, node.output_bytes * fraction, tp)
        if pp > 1 and s < pp - 1 and any(stage_of.get(graph.nodes[u].name, 0) > s for u in graph.users[v]):
            out.boundary[s] += node.output_bytes * fraction
    return out


def _data_parallel_parts(
    layout: Any, grads: list[int], profile: DeviceProfile, sync: str, m: int
) -> list[tuple[str, float]]:
    """The gradient sync of the stage holding the most (``grads``: its tensors' local bytes): one
    all-reduce a tensor with ZeRO 0-1; FSDP2's all-gathers and reduce-scatters with ZeRO 2-3."""
    dp = layout.dp
    if layout.zero <= 1:
        return [("all_reduce gradients dp", sum(profile.collective_s(sync, b, dp) for b in grads))]
    units = len(grads) // 2 + 1  # FSDP2 units: each planned Linear (weight, bias), and the root
    held = sum(grads)
    gathers = m * (2 if layout.zero == 3 else 1)
    return [
        ("all_gather parameters dp", gathers * (profile.collective_s("all_gather", held / dp / units, dp) * units)),
        ("reduce_scatter gradients dp", units * profile.collective_s(sync, held / units, dp)),
    ]


def composed_step(
    graph: Graph, layout: Any, tp_plan: Sequence[tuple[str, str]], profile: DeviceProfile, batch: int
) -> Predicted:
    """The step of ``layout`` (a :class:`~partitioner.cluster.layouts.Layout`) on ``graph`` traced
    at ``batch`` rows, with ``tp_plan`` the (Linear, "colwise" | "rowwise") pairs the run shards
    (NOTE: [A composed step on a measured profile]). Parts are the slowest rank's, in seconds."""
    dp, tp, pp = layout.dp, layout.tp, layout.pp
    m = max(1, batch // dp // layout.microbatch_size)
    fraction = layout.microbatch_size / batch
    styles = dict(tp_plan) if tp > 1 else {}
    schedule, stage_of = _stage_of(graph, layout, tp_plan, bool(styles))
    ring, sync = _collective_kinds(profile, dp, tp, pp)
    st = _stage_sums(graph, layout, styles, stage_of, profile, fraction, ring)
    k, slow = profile.training_step_factor, profile.slowdown_for(dp * tp * pp)
    slot = [st.fwd[s] * k * slow + st.dispatch[s] + st.tp_fwd[s] + st.tp_bwd[s] for s in range(pp)]
    slowest = max(range(pp), key=lambda s: slot[s])  # with one stage, that stage
    parts: list[tuple[str, float]] = [
        ("compute", m * st.fwd[slowest] * k * slow),
        ("dtensor dispatch", m * st.dispatch[slowest]),
        ("all_reduce tp forward", m * st.tp_fwd[slowest]),
        ("all_reduce tp backward", m * st.tp_bwd[slowest]),
    ]
    if pp > 1:
        slots = step_slots(schedule, pp, m)
        link = profile.link
        hand = max((link.seconds(b) if link else 0.0) for b in st.boundary)
        parts += [
            ("bubble", (slots - m) * slot[slowest]),
            ("pipeline actions", 2 * slots * profile.pipeline_action_for(pp)),
            ("hand-off", 2 * slots * hand),
        ]
    if dp > 1:
        heaviest = max(range(pp), key=lambda s: sum(st.grads[s]))
        parts += _data_parallel_parts(layout, st.grads[heaviest], profile, sync, m)
    return Predicted(sum(s for _, s in parts), tuple(parts))
