"""The Learn page's stepper: an algorithm's recorded decisions (``partitioner.accelerator.steps``)
grouped into steps a person plays or steps through, the player's next step, what a step shows, and
where the replay ends beside the sidebar's plan. Pure: no Streamlit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from partitioner import Plan
from partitioner.accelerator.steps import Decision, DecisionTrace
from partitioner.units import format_seconds

__all__ = [
    "StepGroup",
    "group_steps",
    "replay_note",
    "final_latency",
    "player_step",
    "StepShown",
    "step_shown",
    "MAX_GROUPS",
    "BLOCK_GRAIN_ABOVE",
]

MAX_GROUPS = 60  # a played run lasts about a minute at one group a second


@dataclass(frozen=True)
class StepGroup:
    """Decisions ``first`` .. ``last`` (inclusive, 0-based) shown as one step of the stepper."""

    first: int
    last: int
    title: str  # what the group does, e.g. "fill P2 (38 nodes)" or "KL pass 3 (41 decisions)"

    @property
    def size(self) -> int:
        return self.last - self.first + 1


BLOCK_GRAIN_ABOVE = 300  # operations: on larger graphs a step is at most one block's decisions


def _block(trace: DecisionTrace, d: Decision) -> str:
    from partitioner.draw.nodeview import block_of

    return block_of(trace.graph, d.moves[0][0]) if d.moves else ""


def _round_ends(trace: DecisionTrace) -> list[int]:
    """Indices where a natural round ends: the fill moving to a new partition, a KL pass rolled
    back or a step taken, a merge taken, the chains contracted; on a graph of more than
    :data:`BLOCK_GRAIN_ABOVE` operations also where the placed or tried nodes move on to another
    block (``model.layers.5``), so a 4,861-operation fill is not one step of thousands."""
    ends = []
    decisions = trace.decisions
    by_block = len(trace.graph.op_indices) > BLOCK_GRAIN_ABOVE
    for i, d in enumerate(decisions):
        nxt = decisions[i + 1] if i + 1 < len(decisions) else None
        if nxt is None:
            ends.append(i)
        elif by_block and d.kind == nxt.kind and d.kind in ("place", "try") and _block(trace, d) != _block(trace, nxt):
            ends.append(i)
        elif d.kind == "place" and nxt.kind == "place":
            if d.moves and nxt.moves and d.moves[0][1] != nxt.moves[0][1]:
                ends.append(i)
        elif d.kind != nxt.kind and d.kind in ("place", "map", "contract", "device"):
            ends.append(i)
        elif d.kind in ("take", "roll back") or (d.kind in ("merge", "move") and d.accepted):
            ends.append(i)
    return ends


def _title(trace: DecisionTrace, first: int, last: int) -> str:
    kinds: dict[str, int] = {}
    for d in trace.decisions[first : last + 1]:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    taken = sum(d.accepted for d in trace.decisions[first : last + 1])
    parts = ", ".join(f"{n:,} {k}" for k, n in kinds.items())
    blocks = sorted(
        {b for b in (_block(trace, d) for d in trace.decisions[first : last + 1]) if b},
        key=lambda b: [int(c) if c.isdigit() else c for c in b.split(".")],
    )
    where = "" if not blocks else f" in {blocks[0]}" if len(blocks) == 1 else f" in {blocks[0]} to {blocks[-1]}"
    return (
        f"decisions {first + 1:,}-{last + 1:,}: {parts} ({taken:,} taken){where}"
        if last > first
        else f"decision {first + 1:,}: {trace.decisions[first].kind}{where}"
    )


def group_steps(trace: DecisionTrace, max_groups: int = MAX_GROUPS) -> list[StepGroup]:
    """The decisions in rounds (a partition filled, a KL pass, a merge taken), joined evenly
    where there are more than ``max_groups``, so any run plays in about ``max_groups`` steps.
    Every decision is in exactly one group, in order. O(decisions)."""
    if not trace.decisions:
        return []
    ends = _round_ends(trace)
    if len(ends) > max_groups:  # keep every k-th round end (the last one always)
        k = -(-len(ends) // max_groups)
        ends = [e for j, e in enumerate(ends) if (j + 1) % k == 0 or e == ends[-1]]
    groups, first = [], 0
    for end in ends:
        groups.append(StepGroup(first, end, _title(trace, first, end)))
        first = end + 1
    return groups


_WHY_APART = {
    "kl_pass": "this replay is one Kernighan-Lin refinement from the size-based plan; the kl_based mode "
    "refines several starts with a larger budget and keeps the best plan",
    "cost_aware_merge": "this replay is cost_aware's merge phase from one node per partition, one of the "
    "mode's starts; the mode also starts from coarse fills and cuts, moves boundary nodes, "
    "and keeps the lowest latency of them all",
    "size_based": "this replay is torch's fill alone; the size_based mode then maps partitions as the "
    "options ask (saturate host, forced partitioning)",
}


def _scored(trace: DecisionTrace, plan: Plan) -> float | None:
    """The latency of the replay's final mapping under ``plan``'s devices and options (a fill's
    decisions carry none), or None while a node is left unplaced."""
    from partitioner import evaluate_plan

    final = trace.replay()
    graph = trace.graph
    if any(final.part[v] < 0 for v in graph.op_indices):
        return None
    mapping = {graph.nodes[v].name: final.part[v] for v in graph.op_indices}
    options = plan.options
    scored = evaluate_plan(
        graph,
        list(plan.devices),
        mapping,
        dict(enumerate(final.devices_of)),
        transfer_rate_bytes_per_s=plan.transfer_rate_bytes_per_s,
        node_latency=options.node_latency_dict,
        cost_model=options.cost_model,
    )
    return scored.latency_s


def final_latency(trace: DecisionTrace, plan: Plan) -> float | None:
    """The latency where the replay ends: its last frame's, or (a fill's frames carry none) its final
    mapping scored under ``plan``'s devices and options; None while a node is left unplaced."""
    last = trace.frames[-1] if trace.frames else None
    if last is None:
        return None
    return last.latency_s if last.latency_s is not None else _scored(trace, plan)


def replay_note(trace: DecisionTrace, plan: Plan) -> str | None:
    """Where the replay ends beside the sidebar's plan: None when it ends on the same latency and
    partition count, else a sentence saying both and why they part."""
    last = trace.frames[-1] if trace.frames else None
    if last is None:
        return None
    parts = len({p for p in last.part if p >= 0})
    latency = final_latency(trace, plan)
    same_latency = latency is not None and abs(latency - plan.latency_s) <= 1e-9 + 1e-6 * plan.latency_s
    if same_latency and parts == len(plan.partitions):
        return (
            f"The replay ends where the `{plan.mode}` plan ends: {format_seconds(plan.latency_s)} with "
            f"{parts} partition{'s' if parts != 1 else ''}."
        )
    ends = "an incomplete plan" if latency is None else format_seconds(latency)
    why = _WHY_APART.get(trace.algorithm, "the replay shows one algorithm, not the whole mode")
    return (
        f"The replay ends at {ends} with {parts} partition{'s' if parts != 1 else ''}, the sidebar's "
        f"`{plan.mode}` plan at {format_seconds(plan.latency_s)} with {len(plan.partitions)}: {why}."
    )


def player_step(step: int, count: int, playing: bool, tick: bool) -> tuple[int, bool]:
    """(the step to show, still playing) for a stored ``step`` of ``count`` steps: clamped to
    1..count, one on when a playing player's timer ticked (``tick``; a click is no tick), and the player
    stopped by the tick that reaches the last step."""
    step = min(count, max(1, int(step)))
    if not (playing and tick):
        return step, playing
    step = min(count, step + 1)
    return step, step < count


@dataclass(frozen=True)
class StepShown:
    """What one step of the stepper shows beside the graph."""

    decision: int  # the index of the group's last decision (the frame drawn)
    span: str  # "decision 4" or "decisions 4-9"
    taken: int  # decisions taken up to and including this step
    latency_s: float | None  # after the step; None: the plan is not complete yet
    partitions: int


def step_shown(trace: DecisionTrace, groups: Sequence[StepGroup], step: int, plan: Plan) -> StepShown:
    """Step ``step`` (1-based) of ``groups``; the last step's latency is the replay's end
    (:func:`final_latency`) where its frame carries none."""
    group = groups[step - 1]
    index = group.last
    frame = trace.frames[index]
    latency = frame.latency_s if frame.latency_s is not None or step < len(groups) else final_latency(trace, plan)
    return StepShown(
        decision=index,
        span=f"decision {group.last + 1}" if group.size == 1 else f"decisions {group.first + 1}-{group.last + 1}",
        taken=sum(d.accepted for d in trace.decisions[: index + 1]),
        latency_s=latency,
        partitions=len({p for p in frame.part if p >= 0}),
    )
