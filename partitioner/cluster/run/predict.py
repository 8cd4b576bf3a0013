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


def composed_step(
    graph: Graph, layout: Any, tp_plan: Sequence[tuple[str, str]], profile: DeviceProfile, batch: int
) -> Predicted:
    """The step of ``layout`` (a :class:`~partitioner.cluster.layouts.Layout`) on ``graph`` traced
    at ``batch`` rows, with ``tp_plan`` the (Linear, "colwise" | "rowwise") pairs the run shards
    (NOTE: [A composed step on a measured profile]). Parts are the slowest rank's, in seconds."""
    dp, tp, pp = layout.dp, layout.tp, layout.pp
    world = dp * tp * pp
    mb = layout.microbatch_size
    m = max(1, batch // dp // mb)
    fraction = mb / batch
    styles = dict(tp_plan) if tp > 1 else {}
    whole = profile_latencies(graph, profile, fraction)
    split = profile_latencies(graph, profile, fraction / tp) if styles else whole
    stage_of: dict[str, int] = {}
    schedule = "gpipe"
    if pp > 1:
        from partitioner.cluster.run.pipelined import run_schedule, stage_cuts

        schedule = run_schedule(layout).name

        linears = [
            graph.nodes[v].target
            for v in graph.op_indices
            if graph.nodes[v].op == "call_module" and graph.nodes[v].param_bytes
        ]
        for s, names in enumerate(stage_cuts(graph, tuple(tp_plan) if styles else (), linears, pp)):
            stage_of.update({name: s for name in names})
    k, slow = profile.training_step_factor, profile.slowdown_for(world)
    fwd, dispatch, tp_fwd, tp_bwd = ([0.0] * pp for _ in range(4))
    grads: list[list[int]] = [[] for _ in range(pp)]  # each parameter tensor's local bytes
    boundary = [0.0] * pp  # bytes a stage sends on per microbatch
    ring = "dtensor_all_reduce" if profile.collective("dtensor_all_reduce", tp) else "all_reduce"
    if dp > 1 and profile.collective("concurrent_dtensor_all_reduce", tp) is not None:
        ring = "concurrent_dtensor_all_reduce"
    sync_kind = "all_reduce"
    if tp * pp > 1 and profile.collective("concurrent_all_reduce", dp) is not None:
        sync_kind = "concurrent_all_reduce"
    for v in graph.op_indices:
        node = graph.nodes[v]
        s = stage_of.get(node.name, 0)
        style = styles.get(node.target) if node.op == "call_module" else None
        if style is None:
            fwd[s] += max(whole[v])
        else:
            mem_s, comp_s = split[v]
            share = node.param_bytes * (1 - 1 / tp)
            mem_s = max(0.0, mem_s - share / profile.bandwidth_bytes_per_s(max(share, 1.0)))
            fwd[s] += max(mem_s, comp_s)
        if node.param_bytes:
            bias = _bias_bytes(graph, v)
            weight = node.param_bytes - bias
            grads[s] += [weight // tp if style else weight] + (
                [bias // tp if style == "colwise" else bias] if bias else []
            )
        if style == "colwise":
            dispatch[s] += 2 * profile.dtensor_module_for(world)
            src = node.inputs[0] if node.inputs else v
            tp_bwd[s] += profile.collective_s(ring, graph.nodes[src].output_bytes * fraction, tp)
        elif style == "rowwise":
            tp_fwd[s] += profile.collective_s(ring, node.output_bytes * fraction, tp)
        if pp > 1 and s < pp - 1 and any(stage_of.get(graph.nodes[u].name, 0) > s for u in graph.users[v]):
            boundary[s] += node.output_bytes * fraction
    slot = [fwd[s] * k * slow + dispatch[s] + tp_fwd[s] + tp_bwd[s] for s in range(pp)]
    parts: list[tuple[str, float]] = []
    if pp == 1:
        parts += [
            ("compute", m * fwd[0] * k * slow),
            ("dtensor dispatch", m * dispatch[0]),
            ("all_reduce tp forward", m * tp_fwd[0]),
            ("all_reduce tp backward", m * tp_bwd[0]),
        ]
    else:
        slowest = max(range(pp), key=lambda s: slot[s])
        slots = step_slots(schedule, pp, m)
        link = profile.link
        hand = max((link.seconds(b) if link else 0.0) for b in boundary)
        parts += [
            ("compute", m * fwd[slowest] * k * slow),
            ("dtensor dispatch", m * dispatch[slowest]),
            ("all_reduce tp forward", m * tp_fwd[slowest]),
            ("all_reduce tp backward", m * tp_bwd[slowest]),
            ("bubble", (slots - m) * slot[slowest]),
            ("pipeline actions", 2 * slots * profile.pipeline_action_for(pp)),
            ("hand-off", 2 * slots * hand),
        ]
    if dp > 1:
        sync = max(range(pp), key=lambda s: sum(grads[s]))
        if layout.zero <= 1:
            parts.append(("all_reduce gradients dp", sum(profile.collective_s(sync_kind, b, dp) for b in grads[sync])))
        else:
            units = len(grads[sync]) // 2 + 1  # FSDP2 units: each planned Linear (weight, bias), and the root
            held = sum(grads[sync])
            gathers = m * (2 if layout.zero == 3 else 1)
            parts.append(
                (
                    "all_gather parameters dp",
                    gathers * (profile.collective_s("all_gather", held / dp / units, dp) * units),
                )
            )
            parts.append(("reduce_scatter gradients dp", units * profile.collective_s(sync_kind, held / units, dp)))
    return Predicted(sum(s for _, s in parts), tuple(parts))
