"""``optimal``: an exact solver for the cost model in force (CP-SAT, from OR-Tools), with a time
limit; it returns the best plan found and a proven lower bound on every plan's latency.

The heuristic modes run first (``kl_based``, which includes ``cost_aware``, and the fills); the
best of them warm-starts the solver and sets its time scale, and is kept when the solver finds
nothing better. Under the physical cost model a graph of at most :data:`MAX_OPS` ops goes first
to a branch and bound over every plan (NOTE: [Plan enumeration] in :mod:`._enumerate`), given
CP-SAT's node-level relaxation bound and 80 % of the time limit: when it ends, its plan is
optimal with that proof (on random graphs of up to 12 ops on 3 devices it ends in seconds); when
it runs out of time, its best plan starts the CP-SAT models below, which get the remaining 20 %.
The models (NOTE: [Plan model], NOTE: [Relaxation bound] in :mod:`.cpsat`) run in
a worker process with a time limit, never in the caller's. Graphs of more than
:data:`MAX_UNITS` op nodes are coarsened first (chains contracted, then runs of consecutive
nodes grouped), and the plan says so; the bound then comes from the node-level relaxation only
while the graph has at most :data:`RELAX_LIMIT` ops, else from the critical path.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math
from typing import Sequence

from partitioner.accelerator import kl_based, largest_first, size_based
from partitioner.accelerator._base import Assignment, Problem
from partitioner.accelerator._cpsat import RelaxInput, SlotInput, SolveResult, Tensor, solve
from partitioner.accelerator._enumerate import MAX_OPS, EnumInput, EnumResult, bounded_search
from partitioner.accelerator._fills import exhaustive_fit
from partitioner.errors import InfeasibleError, PartitionError, RunError
from partitioner.plan.records import OPTIMALITY_TOLERANCE
from partitioner.processes.worker import run_in_worker
from partitioner.units import format_seconds

__all__ = ["partition", "coarsen", "MAX_UNITS", "RELAX_LIMIT", "DEFAULT_TIME_LIMIT_S", "MAX_DEVICES"]

logger = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT_S = 10.0
MAX_UNITS = 200  # units (ops or contracted groups) the plan model takes
RELAX_LIMIT = 400  # ops the relaxation takes without coarsening
MAX_DEVICES = 16
TICKS = 10**8  # ticks in the best heuristic's latency: the solver's time resolution
MAX_SLOTS = 16  # slots (partitions) the plan model holds over all devices


def partition(problem: Problem) -> Assignment:
    graph, devices = problem.graph, problem.devices
    if len(devices) > MAX_DEVICES:
        raise PartitionError(
            f"optimal plans for at most {MAX_DEVICES} devices (got {len(devices)}); use kl_based "
            "or cost_aware for larger clusters"
        )
    if importlib.util.find_spec("ortools") is None:
        raise PartitionError(
            "the optimal mode needs OR-Tools, which is not installed; "
            "pip install ortools (or reinstall partition-explorer), or use kl_based"
        )
    limit = problem.options.time_limit_s or DEFAULT_TIME_LIMIT_S
    problem.say("heuristics", "kl_based, largest_first and size_based plans: the solver's start and upper bound")
    heuristics = _heuristics(problem)  # (latency, assignment), each scored once
    upper, best = min(heuristics, key=lambda la: (la[0], _count(la[1])), default=(math.inf, None))
    cost = problem.cost
    ops = list(graph.op_indices)
    if not math.isfinite(upper):
        upper = sum(cost.node_s) + sum(_comm_s(problem, u) for u in ops)
    if upper <= 0:  # nothing takes time: every plan is optimal
        if best is None:
            raise InfeasibleError("no plan fits the devices' memory")
        return best
    if not cost.torch and len(ops) <= MAX_OPS:
        problem.say(
            "branch and bound",
            f"every plan of the {len(ops)} ops on {len(devices)} devices, up to {0.8 * limit:.1f} s",
            0.8 * limit,
        )
        exact, better = _enumerate(problem, upper if best is not None else math.inf, best, 0.8 * limit)
        if exact is not None:
            problem.say("done", exact.note, 0.0)
            return exact
        if better is not None:  # the search's best plan, unproven, starts the solver instead
            best, upper = better, problem.latency(better)
        limit *= 0.2
    tick = upper / TICKS
    units, coarse = coarsen(problem, MAX_UNITS)
    k = _slots_per_device(problem, units, best)
    hint = _slot_hint(problem, units, best, k) if best is not None else None
    slot_input = _slot_input(problem, units, tick, k, hint, 0.6 * limit)
    relax_input = None
    if len(ops) <= RELAX_LIMIT:
        node_units = [[v] for v in ops]
        dev_hint = None
        if best is not None and all(len(best.devices_of[best.part[v]]) == 1 for v in ops):
            index = {d.logical_id: i for i, d in enumerate(devices)}
            dev_hint = tuple(index[best.devices_of[best.part[v]][0]] for v in ops)
        base = _slot_input(problem, node_units, tick, 1, None, 0.0)
        relax_input = RelaxInput(
            base.unit_w, base.unit_preds, base.unit_bytes, base.tensors, base.capacity, dev_hint, 0.4 * limit
        )
    problem.say(
        "cp-sat",
        f"CP-SAT on {len(units)} {'groups of ops' if coarse else 'ops'} in up to {k} partitions a device, "
        f"up to {limit:.1f} s (plan model {0.6 * limit:.1f} s, relaxation bound {0.4 * limit:.1f} s)",
        limit,
    )
    try:
        answer = run_in_worker(
            solve, (slot_input, relax_input), timeout_s=1.5 * limit + 30, what="the optimal mode's solver"
        )
    except RunError as exc:
        if best is None:
            raise
        logger.warning("solver failed (%s); keeping the best heuristic plan", exc)
        problem.say("done", f"the solver failed ({str(exc).splitlines()[0]}); the best heuristic plan is kept", 0.0)
        return dataclasses.replace(
            best, ordered=True, note=f"solver failed ({str(exc).splitlines()[0]}); the best heuristic plan is shown"
        )
    slots = answer.slots
    bound_ticks = 0
    complete = not coarse and k >= len(units)  # every plan is a solution of the plan model
    if complete and slots.status in ("OPTIMAL", "FEASIBLE", "UNKNOWN", "INFEASIBLE"):
        bound_ticks = slots.bound if slots.status != "INFEASIBLE" else 0
    relax = answer.relax
    if relax and relax.status in ("OPTIMAL", "FEASIBLE", "UNKNOWN"):
        bound_ticks = max(bound_ticks, relax.bound)
    if bound_ticks * tick <= cost.lower_bound_s():  # no better than the heaviest path of nodes
        bound_ticks = 0
    found = _decode(problem, units, k, slots) if slots.slot is not None else None
    # Keep the heuristic's ids: its latency depends on the order a device runs its partitions,
    # which is the order of the ids compared here.
    chosen = dataclasses.replace(best, ordered=True) if best is not None else None
    if found is not None and problem.fits(found):
        if chosen is None or problem.latency(found) <= upper * (1 + 1e-9):
            chosen = found
    if chosen is None:
        raise InfeasibleError(f"the solver found no plan within the devices' memory ({slots.status})")
    bound_s = bound_ticks * tick
    space = (
        "every plan"
        if complete
        else f"plans of up to {k} partition{'s' if k > 1 else ''} per device"
        + (f" over {len(units)} groups of the {len(ops)} ops (chains contracted)" if coarse else "")
    )
    kept = (
        "its plan"
        if chosen is found
        else "kept the best plan of the heuristics (and the plan search, when it ran) as the solver found none faster"
    )
    proof = "the node-level relaxation" if relax and relax.bound >= bound_ticks else "the plan model"
    proved = (
        f"bound {format_seconds(bound_s)} proven by {proof}"
        if bound_ticks
        else "it proved no bound above the heaviest path of nodes"
    )
    note = f"CP-SAT searched {space} for {slots.wall_s:.1f} s ({slots.status.lower()}); {kept}; {proved}"
    problem.say("done", note, 0.0)
    return dataclasses.replace(chosen, lower_bound_s=bound_s, note=note)


def _enumerate(
    problem: Problem, upper: float, best: Assignment | None, limit: float
) -> tuple[Assignment | None, Assignment | None]:
    """The branch and bound of NOTE: [Plan enumeration] (in a worker): (the optimal plan with its
    proof, None) when the search ends within ``limit`` seconds, else (None, the faster plan than
    ``best`` it found, if any), and CP-SAT takes over."""
    try:
        tick = (upper if math.isfinite(upper) else sum(problem.cost.node_s)) / TICKS
        base = _slot_input(problem, [[v] for v in problem.graph.op_indices], tick or 1.0, 1, None, 0.0)
        relax = RelaxInput(
            base.unit_w, base.unit_preds, base.unit_bytes, base.tensors, base.capacity, None, 0.1 * limit
        )
        found: EnumResult = run_in_worker(
            bounded_search,
            (_enum_input(problem, upper, limit), relax, tick or 1.0),
            timeout_s=limit + 30,
            what="the optimal mode's plan search",
        )
    except RunError as exc:
        logger.warning("plan search failed (%s); CP-SAT takes over", exc)
        return None, None
    chosen = dataclasses.replace(best, ordered=True) if best is not None else None
    kept = "the best heuristic plan"
    ops = problem.graph.op_indices
    if found.plan is not None:
        part = [-1] * len(problem.graph)
        for p, (_, members) in enumerate(found.plan):
            for i in members:
                part[ops[i]] = p
        plan = Assignment(part, [[problem.devices[d].logical_id] for d, _ in found.plan], ordered=True)
        if problem.fits(plan) and (chosen is None or problem.latency(plan) < problem.latency(chosen)):
            chosen, kept = plan, "its plan"
    if not found.complete:
        return None, (chosen if kept == "its plan" else None)
    if chosen is None:
        raise InfeasibleError(
            "no plan fits the devices' memory: a search of every placement of the "
            f"{len(ops)} ops found none; add memory or a device"
        )
    latency = problem.latency(chosen)
    if found.lower_s >= latency * (1 - OPTIMALITY_TOLERANCE):
        how = "reached the bound CP-SAT's node-level relaxation proved"
        bound = found.lower_s
    else:
        how = "searched every plan"
        bound = latency
    note = f"branch and bound {how} in {found.wall_s:.1f} s ({found.visited} partial plans); {kept} is optimal"
    return dataclasses.replace(chosen, lower_bound_s=min(bound, latency), note=note), None


def _enum_input(problem: Problem, upper: float, limit: float) -> EnumInput:
    cost, graph = problem.cost, problem.graph
    ops = list(graph.op_indices)
    local = {v: i for i, v in enumerate(ops)}
    outside = sorted({u for v in ops for u in cost.preds[v] if u not in local})
    tensor = dict(local)
    tensor.update({u: len(ops) + j for j, u in enumerate(outside)})
    return EnumInput(
        w=tuple(cost.node_s[v] for v in ops),
        preds=tuple(tuple(local[u] for u in cost.op_preds[v]) for v in ops),
        op_bytes=tuple(cost.total[v] for v in ops),
        reads=tuple(tuple(sorted({tensor[u] for u in cost.preds[v]})) for v in ops),
        tensor_bytes=tuple(cost.out[u] for u in ops + outside),
        rate=cost.rate if cost.rate else math.inf,
        transfer_latency_s=cost.transfer_latency_s,
        capacity=tuple(d.memory_bytes for d in problem.devices),
        upper_s=upper,
        time_limit_s=limit,
    )


def _count(a: Assignment) -> int:
    return len({p for p in a.part if p >= 0})


def _heuristics(problem: Problem) -> list[tuple[float, Assignment]]:
    """The fitting plans of the heuristics with their latencies: each with the mode's ids and as
    a plan numbers it (see ``Assignment.ordered``)."""
    found = []
    for mode in (kl_based, largest_first, size_based):
        try:
            a = mode.partition(problem)
        except InfeasibleError:
            continue
        if problem.fits(a):
            found += [(lat, v) for v in (a, _by_first_node(a)) if math.isfinite(lat := problem.latency(v))]
    if not found:  # a placement search over every node -> device map where the graph is small
        a = exhaustive_fit(problem)
        if a is not None and problem.fits(a) and math.isfinite(lat := problem.latency(a)):
            found.append((lat, a))
    return found


def _by_first_node(a: Assignment) -> Assignment:
    """``a`` with partitions numbered by their first node, as a plan numbers a mode's partitions."""
    ids: dict[int, int] = {}
    for p in a.part:
        if p >= 0 and p not in ids:
            ids[p] = len(ids)
    old = {new: p for p, new in ids.items()}
    return Assignment([ids[p] if p >= 0 else -1 for p in a.part], [list(a.devices_of[old[i]]) for i in range(len(ids))])


def _comm_s(problem: Problem, u: int) -> float:
    rate = problem.cost.rate
    return 0.0 if not rate or math.isinf(rate) else problem.graph.output_bytes[u] / rate


def coarsen(problem: Problem, limit: int) -> tuple[list[list[int]], bool]:
    """Op nodes grouped into at most ``limit`` units listed in a topological order: each op its
    own unit when there are few enough; else chains (an op whose only op input has it as its only
    op user) contracted, then consecutive units merged. Returns the units and whether any were
    merged. O(N + E)."""
    cost, ops = problem.cost, problem.graph.op_indices
    if len(ops) <= limit:
        return [[v] for v in ops], False
    unit_of: dict[int, int] = {}
    units: list[list[int]] = []
    for v in ops:
        preds = cost.op_preds[v]
        if len(preds) == 1 and len(cost.op_users[preds[0]]) == 1:
            g = unit_of[preds[0]]
        else:
            g = len(units)
            units.append([])
        units[g].append(v)
        unit_of[v] = g
    if len(units) > limit:  # every edge goes forward in this order, so runs of it stay acyclic
        size = math.ceil(len(units) / limit)
        units = [sum(units[i : i + size], []) for i in range(0, len(units), size)]
    return [sorted(u) for u in units], True


def _slots_per_device(problem: Problem, units: Sequence[Sequence[int]], best: Assignment | None) -> int:
    if problem.cost.torch:
        return 1
    most = MAX_SLOTS // len(problem.devices)
    if len(units) * len(problem.devices) <= MAX_SLOTS:
        return len(units)  # small enough for every plan
    want = 2
    if best is not None:
        per_device: dict[int, int] = {}
        for p in {p for p in best.part if p >= 0}:
            for d in best.devices_of[p]:
                per_device[d] = per_device.get(d, 0) + 1
        want = max(want, max(per_device.values(), default=1))
    return max(1, min(want, most))


def _slot_input(
    problem: Problem,
    units: Sequence[Sequence[int]],
    tick: float,
    k: int,
    hint: tuple[int, ...] | None,
    time_limit_s: float,
) -> SlotInput:
    cost, graph = problem.cost, problem.graph
    unit_of = {v: g for g, members in enumerate(units) for v in members}
    w, preds, size = [], [], []
    for members in units:
        inside = set(members)
        longest: dict[int, float] = {}
        for v in members:  # the unit's own critical path
            longest[v] = cost.node_s[v] + max((longest[u] for u in cost.op_preds[v] if u in inside), default=0.0)
        w.append(int(max(longest.values()) // tick))
        preds.append(tuple(sorted({unit_of[u] for v in members for u in cost.op_preds[v]} - {unit_of[members[0]]})))
        size.append(sum(cost.total[v] for v in members))
    tensors: list[Tensor] = []
    for u in range(len(graph)):
        src = unit_of.get(u, -1)
        if src < 0 and cost.is_op[u]:
            continue
        counts: dict[int, int] = {}
        for v in graph.users[u]:
            if cost.is_op[v] and unit_of[v] != src:
                counts[unit_of[v]] = counts.get(unit_of[v], 0) + 1
        if counts:
            ticks = int(_comm_s(problem, u) // tick)
            tensors.append((src, cost.out[u], tuple(sorted(counts.items())), ticks, cost.total[u]))
    capacity = tuple(d.memory_bytes for d in problem.devices)
    return SlotInput(tuple(w), tuple(preds), tuple(size), tuple(tensors), capacity, k, cost.torch, hint, time_limit_s)


def _slot_hint(problem: Problem, units: Sequence[Sequence[int]], a: Assignment, k: int) -> tuple[int, ...] | None:
    """``a`` as a slot per unit, when it fits the plan model (one device per partition, at most
    ``k`` partitions per device)."""
    index = {d.logical_id: i for i, d in enumerate(problem.devices)}
    ev = problem.cost.evaluate(a.part, a.devices_of)
    if ev.order is None or any(len(a.devices_of[p]) != 1 for p in set(a.part) if p >= 0):
        return None
    position: dict[int, int] = {}
    used: dict[int, int] = {}
    for p in ev.order:
        if not ev.members[p]:
            continue
        d = index[a.devices_of[p][0]]
        position[p] = d * k + used.get(d, 0)
        used[d] = used.get(d, 0) + 1
    if any(n > k for n in used.values()):
        return None
    hint = []
    for members in units:  # a unit split between partitions goes where most of it is (CP-SAT repairs)
        parts = [a.part[v] for v in members]
        hint.append(position[max(set(parts), key=lambda p: (parts.count(p), -p))])
    return tuple(hint)


def _decode(problem: Problem, units: Sequence[Sequence[int]], k: int, answer: SolveResult) -> Assignment:
    """The solver's slots as partitions numbered in the order they run (rank, then start)."""
    assert answer.slot is not None
    slot = answer.slot
    used = sorted(set(slot), key=lambda s: (answer.rank[s], answer.start[s], s))
    ids = {s: i for i, s in enumerate(used)}
    part = [-1] * len(problem.graph)
    for g, members in enumerate(units):
        for v in members:
            part[v] = ids[slot[g]]
    devices_of = [[problem.devices[s // k].logical_id] for s in used]
    return Assignment(part, devices_of, ordered=True)
