"""The exact models of the ``optimal`` mode, as CP-SAT programs (OR-Tools): a plan model that
finds plans, and a node-level relaxation that proves a lower bound on every plan.

Everything here takes plain integers (times in ticks, memory in bytes) and runs in a worker
process (:func:`solve` is the worker's entry); :mod:`.optimal` builds the inputs and reads the
answers. OR-Tools is imported inside the functions.

# NOTE: [Plan model]
Each device d has ``k`` ordered slots; a slot is one partition, and slot j+1 on a device starts
after slot j ends (a device runs one partition at a time). Each unit (an op node, or a contracted
group) goes to exactly one slot. A unit finishes at ``T[g] >= S[slot] + w[g]`` and after each
input unit, ``T[g] >= T[h] + w[g]`` (inside a partition this is its critical path; across
partitions it is implied). ``F[s] >= T[g]`` for its units. A tensor u read in another slot b
makes an edge (slot of u -> b): ``S[b] >= F[a] + sum of the crossing tensors' transfer ticks``
(no transfer on one device), and ranks along edges keep the partition DAG acyclic. A device holds
the union of its slots' nodes plus every outside tensor they read, once. Under the torch cost
model there is one slot per device, memory counts an outside tensor once per reading node, and an
input both partitions read travels with the edge (``partitioner_utils``). The objective is the
latest finish. With as many slots per device as units, every plan is one of its solutions.

# NOTE: [Relaxation bound]
Drop partitions: every node runs on one or more devices; it finishes ``w`` after each input,
plus that input's transfer when it runs on a device the input is not on; memory per device is
exact (the union rule). Any plan of either cost model satisfies these constraints with the same
or less time and memory (a partition waits for all its inputs; torch's counts are never lower),
so the relaxation's optimum, and CP-SAT's proven bound on it, bounds every plan's latency from
below. Durations and transfers are rounded down to ticks, which keeps the bound valid.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["SlotInput", "RelaxInput", "SolveResult", "Answer", "solve", "solve_slots", "solve_relaxation", "Tensor"]

# (producer unit, or -1 for an input or attribute; bytes; ((reader unit, reading nodes), ...);
# transfer ticks; torch's held bytes for an input or attribute)
Tensor = tuple[int, int, tuple[tuple[int, int], ...], int, int]


@dataclass(frozen=True)
class SolveResult:
    """What one CP-SAT model sends back from the worker: its status name (``OPTIMAL``,
    ``FEASIBLE``, ``INFEASIBLE``, ``UNKNOWN``...), the proven bound in ticks, the wall time, and
    for the plan model with a solution: the objective, each unit's slot, each slot's start and
    rank."""

    status: str
    bound: int
    wall_s: float = 0.0
    objective: int | None = None
    slot: tuple[int, ...] | None = None
    start: tuple[int, ...] = ()
    rank: tuple[int, ...] = ()


@dataclass(frozen=True)
class Answer:
    """The worker's answer: the plan model's result, and the relaxation's when it ran."""

    slots: SolveResult
    relax: SolveResult | None = None


@dataclass(frozen=True)
class SlotInput:
    unit_w: tuple[int, ...]  # ticks
    unit_preds: tuple[tuple[int, ...], ...]
    unit_bytes: tuple[int, ...]  # total bytes of the unit's ops
    tensors: tuple[Tensor, ...]
    capacity: tuple[int, ...]  # bytes per device index
    slots_per_device: int
    torch: bool
    hint: tuple[int, ...] | None  # slot per unit
    time_limit_s: float


@dataclass(frozen=True)
class RelaxInput:
    node_w: tuple[int, ...]  # ticks per op
    node_preds: tuple[tuple[int, ...], ...]  # op inputs
    node_bytes: tuple[int, ...]
    tensors: tuple[Tensor, ...]  # as in SlotInput, units being ops
    capacity: tuple[int, ...]
    hint: tuple[int, ...] | None  # device per op
    time_limit_s: float


def _solver(time_limit_s: float) -> Any:
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = max(1, min(8, os.cpu_count() or 1))
    solver.parameters.random_seed = 0
    return solver


def _horizon(w: tuple[int, ...], tensors: tuple[Tensor, ...]) -> int:
    return sum(w) + sum(t[3] for t in tensors) + 1


def _finish(
    m: Any,
    memory: list[list[Any]],
    capacity: tuple[int, ...],
    ends: list[Any],
    horizon: int,
    x: list[list[Any]],
    hint: tuple[int, ...] | None,
) -> None:
    """Both models' tail: memory within capacity, minimise the latest end, hint each row of ``x``
    (a unit's choice among slots or devices) with the choice in ``hint``."""
    for d, terms in enumerate(memory):
        m.add(sum(terms) <= capacity[d])
    latency = m.new_int_var(0, horizon, "latency")
    m.add_max_equality(latency, ends)
    m.minimize(latency)
    if hint is not None:
        for row, chosen in zip(x, hint):
            for i, var in enumerate(row):
                m.add_hint(var, i == chosen)


@dataclass
class _SlotModel:
    """The plan model while it is built (NOTE: [Plan model]): CP-SAT's model and its variables,
    indexed by unit g, slot s (device s // k) and device d."""

    m: Any
    inp: SlotInput
    horizon: int
    x: list[list[Any]]  # unit g in slot s
    start: list[Any]  # S[s]
    finish: list[Any]  # F[s]
    done: list[Any]  # T[g]
    rank: list[Any]  # R[s], increasing along the partition DAG's edges
    on: list[list[Any]]  # unit g on device d: its slots' x summed
    edge: dict[tuple[int, int], Any]  # slot a feeds slot b
    comm: dict[tuple[int, int], list[Any]]  # transfer ticks along an edge
    memory: list[list[Any]]  # bytes held on device d

    @property
    def num_slots(self) -> int:
        return len(self.start)

    def device(self, s: int) -> int:
        return s // self.inp.slots_per_device


def solve_slots(inp: SlotInput) -> SolveResult:
    """The plan model; ``slot`` per unit (slot s is device s // k, position s % k), the slots'
    start ticks and ranks, the objective and CP-SAT's bound in ticks, and its status."""
    from ortools.sat.python import cp_model

    sm = _slot_variables(cp_model.CpModel(), inp)
    _add_timing(sm)
    for tensor in inp.tensors:
        _add_tensor_memory(sm, tensor)
        _add_tensor_transfers(sm, tensor)
    _add_edges(sm)
    _break_symmetry(sm.m, inp, sm.x, sm.on)
    # A unit ends no later than its slot: the latest end bounds the units' ends too, which the
    # solver's bound then reaches through their chains without choosing slots.
    _finish(sm.m, sm.memory, inp.capacity, sm.finish + sm.done, sm.horizon, sm.x, inp.hint)
    return _solve_slot_model(sm)


def _slot_variables(m: Any, inp: SlotInput) -> _SlotModel:
    """Every unit in exactly one slot; the slots' and units' times, the slots' ranks, the edges."""
    k = inp.slots_per_device
    num_units, num_slots, devices = len(inp.unit_w), len(inp.capacity) * k, len(inp.capacity)
    horizon = _horizon(inp.unit_w, inp.tensors)
    x = [[m.new_bool_var("") for _ in range(num_slots)] for _ in range(num_units)]
    for g in range(num_units):
        m.add_exactly_one(x[g])
    start = [m.new_int_var(0, horizon, f"S{s}") for s in range(num_slots)]
    finish = [m.new_int_var(0, horizon, f"F{s}") for s in range(num_slots)]
    done = [m.new_int_var(0, horizon, f"T{g}") for g in range(num_units)]
    rank = [m.new_int_var(0, num_slots - 1, f"R{s}") for s in range(num_slots)]
    on = [[sum(x[g][d * k + j] for j in range(k)) for d in range(devices)] for g in range(num_units)]
    edge = {(a, b): m.new_bool_var("") for a in range(num_slots) for b in range(num_slots) if a != b}
    comm: dict[tuple[int, int], list[Any]] = {key: [] for key in edge}
    memory: list[list[Any]] = [[inp.unit_bytes[g] * on[g][d] for g in range(num_units)] for d in range(devices)]
    return _SlotModel(m, inp, horizon, x, start, finish, done, rank, on, edge, comm, memory)


def _add_timing(sm: _SlotModel) -> None:
    """A unit ends ``w`` after its slot starts and after each input unit ends; a slot ends after
    its units; a device runs its slots one after another (the physical cost model)."""
    m, inp, x = sm.m, sm.inp, sm.x
    k = inp.slots_per_device
    for s in range(sm.num_slots):
        m.add(sm.finish[s] >= sm.start[s])
        for g in range(len(inp.unit_w)):
            m.add(sm.done[g] >= sm.start[s] + inp.unit_w[g]).only_enforce_if(x[g][s])
            m.add(sm.finish[s] >= sm.done[g]).only_enforce_if(x[g][s])
        if not inp.torch and s % k < k - 1:  # a device runs its slots one after another
            m.add(sm.start[s + 1] >= sm.finish[s])
            m.add(sm.rank[s + 1] >= sm.rank[s] + 1)
    for g, preds in enumerate(inp.unit_preds):
        for h in preds:
            m.add(sm.done[g] >= sm.done[h] + inp.unit_w[g])


def _add_tensor_memory(sm: _SlotModel, tensor: Tensor) -> None:
    """An outside tensor read on a device is held there: once (the union rule), or under the
    torch cost model once per reading node (an input or attribute: its held bytes, once)."""
    m, inp, on = sm.m, sm.inp, sm.on
    src, nbytes, readers, _, held = tensor
    for d in range(len(inp.capacity)):  # memory: an outside tensor read on the device
        if inp.torch and src >= 0:
            for h, count in readers:  # counted again for each reading node
                there = m.new_bool_var("")
                m.add(there >= on[h][d] - on[src][d])
                sm.memory[d].append(nbytes * count * there)
            continue
        there = m.new_bool_var("")
        for h, _ in readers:
            m.add(there >= on[h][d] - (on[src][d] if src >= 0 else 0))
        sm.memory[d].append((held if inp.torch else nbytes) * there)


def _add_tensor_transfers(sm: _SlotModel, tensor: Tensor) -> None:
    """A tensor read in another slot makes an edge from its producer's slot, with its transfer
    between devices; a device's slots read only from earlier slots of it."""
    m, x = sm.m, sm.x
    src, _, readers, ticks, _ = tensor
    if src < 0:
        if sm.inp.torch:  # an input two partitions read counts as sent along their edge
            _add_shared_input(sm, readers, ticks)
        return
    for b in range(sm.num_slots):
        read = m.new_bool_var("")
        for h, _ in readers:
            m.add(read >= x[h][b] - x[src][b])
        for a in range(sm.num_slots):
            if a == b:
                continue
            if sm.device(a) == sm.device(b) and a > b:
                m.add_bool_or([x[src][a].Not(), read.Not()])  # a device's slots run in order
                continue
            cross = m.new_bool_var("")
            m.add(cross >= x[src][a] + read - 1)
            m.add_implication(cross, sm.edge[(a, b)])
            if sm.device(a) != sm.device(b):
                sm.comm[(a, b)].append(ticks * cross)


def _add_shared_input(sm: _SlotModel, readers: tuple[tuple[int, int], ...], ticks: int) -> None:
    """Under the torch cost model an input both ends of an edge read travels along it."""
    m = sm.m
    reads = []
    for b in range(sm.num_slots):
        r = m.new_bool_var("")
        for h, _ in readers:
            m.add_implication(sm.x[h][b], r)
        reads.append(r)
    for a, b in sm.edge:
        both = m.new_bool_var("")
        m.add(both >= reads[a] + reads[b] - 1)
        sm.comm[(a, b)].append(ticks * both)


def _add_edges(sm: _SlotModel) -> None:
    """Along an edge the reader starts after the producer ends and its transfers, ranked later."""
    for (a, b), var in sm.edge.items():
        sm.m.add(sm.start[b] >= sm.finish[a] + sum(sm.comm[(a, b)])).only_enforce_if(var)
        sm.m.add(sm.rank[b] >= sm.rank[a] + 1).only_enforce_if(var)


def _solve_slot_model(sm: _SlotModel) -> SolveResult:
    from ortools.sat.python import cp_model

    solver = _solver(sm.inp.time_limit_s)
    began = time.perf_counter()
    status = solver.solve(sm.m)
    found = SolveResult(solver.status_name(status), int(solver.best_objective_bound), time.perf_counter() - began)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        found = dataclasses.replace(
            found,
            objective=int(solver.objective_value),
            slot=tuple(next(s for s in range(sm.num_slots) if solver.value(row[s])) for row in sm.x),
            start=tuple(solver.value(v) for v in sm.start),
            rank=tuple(solver.value(v) for v in sm.rank),
        )
    return found


def _break_symmetry(m: Any, inp: SlotInput, x: list[list[Any]], on: list[list[Any]]) -> None:
    """NOTE: [Slot symmetry] The plan model holds each plan many times over; these constraints
    keep one copy of each. An empty slot takes no time, so a device's used slots come first
    (slot j + 1 holds a unit only if slot j holds one). Devices of equal memory are
    interchangeable (every device has the same speed and every pair the same rate), so of two
    neighbours with equal memory the second holds a unit only if the first holds a lower one.
    Every plan has a copy that satisfies both, with the same finish times, so no latency is cut
    off. With as many slots as ops on random 12-op graphs on 3 devices (36 slots), this (with
    the units' ends under the latency) took CP-SAT from no proof in 20 s, its bound near zero,
    to proofs in 2-16 s of 20 on a loaded 2-core machine: not yet the proof in 10 s that would
    let the model hold every plan there."""
    k, devices, num_units = inp.slots_per_device, len(inp.capacity), len(x)
    for d in range(devices):
        for j in range(k - 1):
            s = d * k + j
            for g in range(num_units):
                m.add_bool_or([x[h][s] for h in range(num_units)]).only_enforce_if(x[g][s + 1])
    flag = [[m.new_bool_var("") for _ in range(devices)] for _ in range(num_units)]
    for g in range(num_units):
        for d in range(devices):
            m.add(flag[g][d] == on[g][d])
    for d in range(1, devices):
        if inp.capacity[d] != inp.capacity[d - 1]:
            continue
        for g in range(num_units):
            earlier = [flag[h][d - 1] for h in range(g)]
            if earlier:
                m.add_bool_or(earlier).only_enforce_if(flag[g][d])
            else:
                m.add(flag[g][d] == 0)


def solve_relaxation(inp: RelaxInput) -> SolveResult:
    """The relaxation of NOTE: [Relaxation bound]: CP-SAT's proven bound in ticks, and status."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    num, devices = len(inp.node_w), len(inp.capacity)
    horizon = _horizon(inp.node_w, inp.tensors)
    x = [[m.new_bool_var("") for _ in range(devices)] for _ in range(num)]
    done = [m.new_int_var(inp.node_w[v], horizon, f"T{v}") for v in range(num)]
    for v in range(num):
        m.add_bool_or(x[v])
        for u in inp.node_preds[v]:
            m.add(done[v] >= done[u] + inp.node_w[v])
    memory: list[list[Any]] = [[inp.node_bytes[v] * x[v][d] for v in range(num)] for d in range(devices)]
    for src, nbytes, readers, ticks, _ in inp.tensors:
        for d in range(devices):
            there = m.new_bool_var("")
            for h, _ in readers:
                m.add(there >= x[h][d] - (x[src][d] if src >= 0 else 0))
                if src >= 0 and ticks:
                    m.add(done[h] >= done[src] + inp.node_w[h] + ticks * (x[h][d] - x[src][d]))
            memory[d].append(nbytes * there)
    _finish(m, memory, inp.capacity, done, horizon, x, inp.hint)
    solver = _solver(inp.time_limit_s)
    status = solver.solve(m)
    return SolveResult(solver.status_name(status), int(solver.best_objective_bound))


def solve(slots: SlotInput, relax: RelaxInput | None) -> Answer:
    """The worker's entry: the plan model, then the relaxation (when given)."""
    return Answer(solve_slots(slots), solve_relaxation(relax) if relax is not None else None)
