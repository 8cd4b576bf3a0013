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
from dataclasses import dataclass
from typing import Sequence

from partitioner.accelerator import kl_based, largest_first, size_based
from partitioner.accelerator._base import Assignment, Problem
from partitioner.accelerator._cpsat import Answer, RelaxInput, solve
from partitioner.accelerator._enumerate import MAX_OPS, EnumInput, EnumResult, bounded_search
from partitioner.accelerator._fills import exhaustive_fit
from partitioner.accelerator._slots import coarsen, comm_s, decode, slot_hint, slot_input, slots_per_device
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


def partition(problem: Problem) -> Assignment:
    _check_supported(problem)
    limit = problem.options.time_limit_s or DEFAULT_TIME_LIMIT_S
    upper, best = _best_heuristic(problem)
    if upper <= 0:  # nothing takes time: every plan is optimal
        if best is None:
            raise InfeasibleError("no plan fits the devices' memory")
        return best
    if not problem.cost.torch and len(problem.graph.op_indices) <= MAX_OPS:
        exact, better = _branch_and_bound(problem, upper, best, 0.8 * limit)
        if exact is not None:
            return exact
        if better is not None:  # the search's best plan, unproven, starts the solver instead
            best, upper = better, problem.latency(better)
        limit *= 0.2
    return _cp_sat(problem, upper, best, limit)


def _check_supported(problem: Problem) -> None:
    if len(problem.devices) > MAX_DEVICES:
        raise PartitionError(
            f"optimal plans for at most {MAX_DEVICES} devices (got {len(problem.devices)}); use kl_based "
            "or cost_aware for larger clusters"
        )
    if importlib.util.find_spec("ortools") is None:
        raise PartitionError(
            "the optimal mode needs OR-Tools, which is not installed; "
            "pip install ortools (or reinstall partition-explorer), or use kl_based"
        )


def _best_heuristic(problem: Problem) -> tuple[float, Assignment | None]:
    """The fastest fitting heuristic plan (the fewest partitions among equals) and its latency:
    the solver's start and upper bound. Without one, the bound is every op's time and transfer."""
    problem.say("heuristics", "kl_based, largest_first and size_based plans: the solver's start and upper bound")
    heuristics = _heuristics(problem)  # (latency, assignment), each scored once
    upper, best = min(heuristics, key=lambda la: (la[0], _count(la[1])), default=(math.inf, None))
    if not math.isfinite(upper):
        upper = sum(problem.cost.node_s) + sum(comm_s(problem, u) for u in problem.graph.op_indices)
    return upper, best


def _branch_and_bound(
    problem: Problem, upper: float, best: Assignment | None, limit: float
) -> tuple[Assignment | None, Assignment | None]:
    """:func:`_enumerate` announced as a phase, with the upper bound only a plan proves."""
    problem.say(
        "branch and bound",
        f"every plan of the {len(problem.graph.op_indices)} ops on {len(problem.devices)} devices, up to {limit:.1f} s",
        limit,
    )
    exact, better = _enumerate(problem, upper if best is not None else math.inf, best, limit)
    if exact is not None:
        problem.say("done", exact.note, 0.0)
    return exact, better


@dataclass(frozen=True)
class _Shape:
    """The plan model's shape: its units (op groups, in a topological order), whether ops were
    grouped, its slots per device and the seconds a tick stands for."""

    units: Sequence[Sequence[int]]
    coarse: bool
    k: int
    tick: float

    @property
    def complete(self) -> bool:
        """Every plan is a solution of the plan model."""
        return not self.coarse and self.k >= len(self.units)


def _cp_sat(problem: Problem, upper: float, best: Assignment | None, limit: float) -> Assignment:
    """The CP-SAT models within ``limit`` seconds, started from ``best``; their plan when it is
    no slower than ``upper``, else ``best``, with the bound they proved and a note saying how."""
    units, coarse = coarsen(problem, MAX_UNITS)
    shape = _Shape(units, coarse, slots_per_device(problem, units, best), upper / TICKS)
    try:
        answer = _run_models(problem, shape, best, limit)
    except RunError as exc:
        if best is None:
            raise
        return _solver_failed(problem, best, exc)
    bound_ticks = _bound_ticks(problem, shape, answer)
    found = decode(problem, shape.units, shape.k, answer.slots) if answer.slots.slot is not None else None
    chosen = _chosen(problem, found, best, upper, answer.slots.status)
    note = _note(problem, shape, answer, bound_ticks, chosen is found)
    problem.say("done", note, 0.0)
    return dataclasses.replace(chosen, lower_bound_s=bound_ticks * shape.tick, note=note)


def _run_models(problem: Problem, shape: _Shape, best: Assignment | None, limit: float) -> Answer:
    """The plan model (60 % of ``limit``) and the node-level relaxation (40 %, for graphs of at
    most :data:`RELAX_LIMIT` ops) in a worker; raises :class:`RunError` when it fails."""
    units, k = shape.units, shape.k
    hint = slot_hint(problem, units, best, k) if best is not None else None
    slots = slot_input(problem, units, shape.tick, k, hint, 0.6 * limit)
    relax = None
    if len(problem.graph.op_indices) <= RELAX_LIMIT:
        relax = _relaxation(problem, shape.tick, _device_hint(problem, best), 0.4 * limit)
    problem.say(
        "cp-sat",
        f"CP-SAT on {len(units)} {'groups of ops' if shape.coarse else 'ops'} in up to {k} partitions a device, "
        f"up to {limit:.1f} s (plan model {0.6 * limit:.1f} s, relaxation bound {0.4 * limit:.1f} s)",
        limit,
    )
    return run_in_worker(solve, (slots, relax), timeout_s=1.5 * limit + 30, what="the optimal mode's solver")


def _relaxation(problem: Problem, tick: float, hint: tuple[int, ...] | None, limit: float) -> RelaxInput:
    """The node-level relaxation's input (NOTE: [Relaxation bound]): each op its own unit."""
    base = slot_input(problem, [[v] for v in problem.graph.op_indices], tick, 1, None, 0.0)
    return RelaxInput(base.unit_w, base.unit_preds, base.unit_bytes, base.tensors, base.capacity, hint, limit)


def _device_hint(problem: Problem, best: Assignment | None) -> tuple[int, ...] | None:
    """The device index of each op in ``best``, when every partition of it has one device."""
    ops = problem.graph.op_indices
    if best is None or not all(len(best.devices_of[best.part[v]]) == 1 for v in ops):
        return None
    index = {d.logical_id: i for i, d in enumerate(problem.devices)}
    return tuple(index[best.devices_of[best.part[v]][0]] for v in ops)


def _solver_failed(problem: Problem, best: Assignment, exc: RunError) -> Assignment:
    first = str(exc).splitlines()[0]
    logger.warning("solver failed (%s); keeping the best heuristic plan", exc)
    problem.say("done", f"the solver failed ({first}); the best heuristic plan is kept", 0.0)
    return dataclasses.replace(best, ordered=True, note=f"solver failed ({first}); the best heuristic plan is shown")


def _bound_ticks(problem: Problem, shape: _Shape, answer: Answer) -> int:
    """The best bound the models proved, in ticks; 0 when it is no better than the heaviest path
    of nodes. The plan model's bound counts only when every plan is one of its solutions."""
    slots, relax = answer.slots, answer.relax
    bound_ticks = 0
    if shape.complete and slots.status in ("OPTIMAL", "FEASIBLE", "UNKNOWN", "INFEASIBLE"):
        bound_ticks = slots.bound if slots.status != "INFEASIBLE" else 0
    if relax and relax.status in ("OPTIMAL", "FEASIBLE", "UNKNOWN"):
        bound_ticks = max(bound_ticks, relax.bound)
    if bound_ticks * shape.tick <= problem.cost.lower_bound_s():  # no better than the heaviest path of nodes
        bound_ticks = 0
    return bound_ticks


def _chosen(
    problem: Problem, found: Assignment | None, best: Assignment | None, upper: float, status: str
) -> Assignment:
    """The solver's plan when it fits and is no slower than ``upper``, else ``best``."""
    # Keep the heuristic's ids: its latency depends on the order a device runs its partitions,
    # which is the order of the ids compared here.
    chosen = dataclasses.replace(best, ordered=True) if best is not None else None
    if found is not None and problem.fits(found):
        if chosen is None or problem.latency(found) <= upper * (1 + 1e-9):
            chosen = found
    if chosen is None:
        raise InfeasibleError(f"the solver found no plan within the devices' memory ({status})")
    return chosen


def _note(problem: Problem, shape: _Shape, answer: Answer, bound_ticks: int, own_plan: bool) -> str:
    """What CP-SAT searched, for how long, which plan was kept and what bound it proved."""
    slots, relax, k = answer.slots, answer.relax, shape.k
    space = (
        "every plan"
        if shape.complete
        else f"plans of up to {k} partition{'s' if k > 1 else ''} per device"
        + (
            f" over {len(shape.units)} groups of the {len(problem.graph.op_indices)} ops (chains contracted)"
            if shape.coarse
            else ""
        )
    )
    kept = (
        "its plan"
        if own_plan
        else "kept the best plan of the heuristics (and the plan search, when it ran) as the solver found none faster"
    )
    proof = "the node-level relaxation" if relax and relax.bound >= bound_ticks else "the plan model"
    proved = (
        f"bound {format_seconds(bound_ticks * shape.tick)} proven by {proof}"
        if bound_ticks
        else "it proved no bound above the heaviest path of nodes"
    )
    return f"CP-SAT searched {space} for {slots.wall_s:.1f} s ({slots.status.lower()}); {kept}; {proved}"


def _enumerate(
    problem: Problem, upper: float, best: Assignment | None, limit: float
) -> tuple[Assignment | None, Assignment | None]:
    """The branch and bound of NOTE: [Plan enumeration] (in a worker): (the optimal plan with its
    proof, None) when the search ends within ``limit`` seconds, else (None, the faster plan than
    ``best`` it found, if any), and CP-SAT takes over."""
    try:
        tick = (upper if math.isfinite(upper) else sum(problem.cost.node_s)) / TICKS
        relax = _relaxation(problem, tick or 1.0, None, 0.1 * limit)
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
