"""What every mode receives (:class:`Problem`) and returns (:class:`Assignment`).

Modes propose; :func:`partitioner.partition` applies (torch.fx's capability partitioner keeps
``propose_partitions`` apart from ``fuse_partitions`` the same way).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from partitioner.cost.model import CostModel, best_index
from partitioner.devices import Device
from partitioner.errors import InfeasibleError
from partitioner.graph import Graph
from partitioner.options import PartitionOptions
from partitioner.units import format_bytes

__all__ = [
    "Problem",
    "Recorder",
    "Progress",
    "Assignment",
    "pick_best",
    "compact",
    "node_alone_bytes",
    "largest_node_check",
]


@dataclass(frozen=True)
class Assignment:
    """``part[v]`` is node v's partition (-1 for non-op nodes); ``devices_of[p]`` its devices.

    ``ordered``: the ids are the order the partitions run in (a topological order in which each
    device runs its partitions), so the plan keeps them; otherwise partitions are numbered by
    their first node. ``lower_bound_s`` and ``note``: a solver's proven bound and what it did.
    Immutable (tuples): a mode that refines another's result makes a new one
    (``dataclasses.replace``), never writes into it."""

    part: Sequence[int]  # stored as tuples
    devices_of: Sequence[Sequence[int]]
    ordered: bool = False
    lower_bound_s: float = 0.0
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "part", tuple(self.part))
        object.__setattr__(self, "devices_of", tuple(tuple(d) for d in self.devices_of))


class Recorder(Protocol):
    """Receives an algorithm's decisions as it makes them (:mod:`partitioner.accelerator.steps` keeps them)."""

    def __call__(
        self,
        kind: str,
        text: str,
        moves: Sequence[tuple[int, int]] = (),
        devices: Sequence[tuple[int, Sequence[int]]] = (),
        accepted: bool = True,
        latency_s: float | None = None,
    ) -> Any: ...


@dataclass(frozen=True)
class Progress:
    """What a long run (the ``optimal`` mode's solver) is doing: the ``phase`` ("heuristics",
    "branch and bound", "cp-sat", "done"), a sentence for a person, and the most seconds the
    phase may take (None: not bounded by a time limit; the heuristics are O(budget (N + E)))."""

    phase: str
    message: str
    at_most_s: float | None = None


_logger = logging.getLogger("partitioner.accelerator")


@dataclass
class Problem:
    graph: Graph
    devices: list[Device]
    cost: CostModel
    options: PartitionOptions = field(default_factory=PartitionOptions)
    record: Recorder | None = None  # a decision trace is being kept (the Learn page's steps)
    progress: Callable[[Progress], Any] | None = None  # told of a long run's phases (:meth:`say`)
    # (latency, critical path) of the plans the searches scored, keyed by the plan: a search that
    # meets a plan again reads it back (NOTE: [Scored plans] in _search.py). Not copied by
    # dataclasses.replace: a Problem with another cost model starts empty.
    scored: dict[int, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    # Whether a plan fits and its latency, keyed by the plan (an Assignment is frozen): the
    # searches' starts are checked when made and again when the best is picked, and a search
    # that moved nothing returns its start (NOTE: [Known plans]).
    _fitting: dict[Assignment, bool] = field(default_factory=dict, init=False, repr=False, compare=False)
    _latencies: dict[Assignment, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    # What a search from a plan can start from instead of building it again: the memory tally
    # (DeviceMemory) of the fill that made the plan, or the state of the search that ended in it.
    # Given once, then the new search's to change.
    _tallies: dict[Assignment, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def say(self, phase: str, message: str, at_most_s: float | None = None) -> None:
        """Log a long run's phase and tell ``progress`` of it."""
        _logger.info("%s: %s", phase, message)
        if self.progress is not None:
            self.progress(Progress(phase, message, at_most_s))

    @property
    def capacity(self) -> dict[int, int]:
        return {d.logical_id: d.memory_bytes for d in self.devices}

    def devices_by_memory(self) -> list[Device]:
        """Largest memory first; list order breaks ties."""
        return sorted(self.devices, key=lambda d: -d.memory_bytes)

    def fits(self, assignment: Assignment) -> bool:
        """True when every device holds at most its memory, with the partitions in the order
        the plan will number them (by first node unless ``ordered``): torch's memory rule charges
        a device's later partitions less than its first, so the order can decide it. Known plans
        are read back (NOTE: [Known plans])."""
        known = self._fitting.get(assignment)
        if known is not None:
            return known
        members: dict[int, list[int]] = {}
        for v, p in enumerate(assignment.part):
            if p >= 0:
                members.setdefault(p, []).append(v)
        pids = sorted(members) if assignment.ordered else sorted(members, key=lambda p: members[p][0])
        used = self.cost.device_memory([members[p] for p in pids], [assignment.devices_of[p] for p in pids])
        fits = all(used.get(d.logical_id, 0) <= d.memory_bytes for d in self.devices)
        self._fitting[assignment] = fits
        return fits

    def latency(self, assignment: Assignment) -> float:
        """The plan's latency (:meth:`CostModel.evaluate`), read back when known. # NOTE: [Known plans]
        Under either cost model a plan's latency and whether it fits are functions of the plan
        alone (its ``part``, ``devices_of`` and ``ordered``, all in the Assignment's equality):
        the searches score each start, refine it and pick the best, and at 50,000 nodes scoring
        the same plans again cost a tenth of a search (O(N + E) each). A search that knows the
        latency of the plan it returns, exactly as :meth:`CostModel.evaluate` gives it (the
        incremental model's tries equal full evaluations to the bit: a test checks it), records
        it with :meth:`know_latency`. Looking a plan up hashes and compares its tuples (C speed)."""
        known = self._latencies.get(assignment)
        if known is None:
            known = self._latencies[assignment] = self.cost.evaluate(assignment.part, assignment.devices_of).latency_s
        return known

    def know_latency(self, assignment: Assignment, latency_s: float) -> None:
        """Record the latency of ``assignment`` found by a search (NOTE: [Known plans])."""
        self._latencies[assignment] = latency_s

    def keep_tally(self, assignment: Assignment, tally: Any) -> None:
        """Keep the memory tally a fill built for ``assignment`` (its devices' bytes, counts and
        readers: what a tally built from the plan holds, the same integers in another order), or
        the state of the search that ended in it (its tally and incremental cost, as above)."""
        self._tallies[assignment] = tally

    def take_tally(self, assignment: Assignment) -> Any:
        """The tally or search state kept for ``assignment``, once (None when there is none)."""
        return self._tallies.pop(assignment, None)


def pick_best(problem: Problem, candidates: Sequence[Assignment]) -> Assignment:
    """The feasible candidate the one best-plan rule prefers (:func:`partitioner.cost.model.best_index`:
    lowest latency, fewer partitions winning near ties); infeasible ones only when none fits."""
    feasible = [a for a in candidates if problem.fits(a)] or list(candidates)
    scores = [(problem.latency(a), len({p for p in a.part if p >= 0})) for a in feasible]
    best = best_index(scores)
    return feasible[0 if best is None else best]


def compact(a: Assignment) -> Assignment:
    """``a`` without the partitions that moves and merges left empty, the others in their order.
    An empty partition has no edges and takes no time, so neither the schedule's order of the
    others nor the latency changes; a search from the result schedules fewer partitions."""
    used = sorted({p for p in a.part if p >= 0})
    new = {p: i for i, p in enumerate(used)}
    return Assignment([new[p] if p >= 0 else -1 for p in a.part], [list(a.devices_of[p]) for p in used])


def node_alone_bytes(graph: Graph, v: int) -> int:
    """Memory node v needs in a partition of its own: its total size plus its inputs' outputs."""
    return graph.total_bytes[v] + sum(graph.output_bytes[u] for u in graph.preds[v])


def largest_node_check(graph: Graph, devices: Sequence[Device]) -> None:
    """Raise naming the largest node when it fits no device on its own."""
    biggest = max(graph.op_indices, key=lambda v: node_alone_bytes(graph, v))
    need = node_alone_bytes(graph, biggest)
    room = max(d.memory_bytes for d in devices)
    if need > room:
        node = graph.nodes[biggest]
        raise InfeasibleError(
            f"node {node.name!r} ({node.target}) needs {format_bytes(need)} with its inputs but the "
            f"largest device has {format_bytes(room)} ({format_bytes(need - room)} short); add memory to a "
            "device or shrink that layer"
        )
