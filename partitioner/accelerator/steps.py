"""An algorithm's decisions as data: what it tried, what it took, and the plan after each step.

The Learn page steps through these one decision at a time; nothing is recomputed per frame. The
algorithms record as they run (``Problem.record``), so the trace is theirs, not a re-enactment:

- ``size_based``: torch's greedy fill, node after node, then the leftover partitions mapped onto
  devices; replayed, it gives the ``size_based`` mode's plan exactly.
- ``kl_pass``: a Kernighan-Lin refinement from the size-based plan (largest-first where torch's
  fill fails): moves and swaps tried, taken when shorter, a pass's steps taken even when slower
  and rolled back to the best plan it saw; whole partitions tried on other devices.
- ``cost_aware_merge``: cost_aware's merge phase from one node per partition: chains contracted,
  then neighbouring partitions on the same devices merged while the latency does not grow.

A decision's ``moves`` (node -> partition) and ``devices`` (partition -> devices) are applied
when it is ``accepted``; :meth:`DecisionTrace.replay` applies them all to ``start`` and gives the
algorithm's result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

from partitioner.accelerator._base import Assignment
from partitioner.accelerator.api import build_problem
from partitioner.devices import Device
from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.options import PartitionOptions

__all__ = ["ALGORITHMS", "Decision", "Frame", "DecisionTrace", "record"]

ALGORITHMS = {
    "size_based": "Size-based fill (torch's): node after node",
    "kl_pass": "Kernighan-Lin: moves tried, taken and rolled back",
    "cost_aware_merge": "cost_aware: merging partitions",
}
_MAX_DECISIONS = 20_000  # a trace longer than this stops recording (the algorithm still finishes)


@dataclass(frozen=True)
class Decision:
    kind: str  # place, map, move, try, take, roll back, device, contract, merge
    text: str
    moves: tuple[tuple[int, int], ...] = ()  # (node index, partition) applied when accepted
    devices: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (partition, devices) set when accepted
    accepted: bool = True
    latency_s: float | None = None  # the plan's latency with this decision (tried or taken)


@dataclass(frozen=True)
class Frame:
    """The plan after a decision: each node's partition (-1: not placed yet), each partition's
    devices, and the latency of the plan so far (None while it is incomplete)."""

    part: tuple[int, ...]
    devices_of: dict[int, tuple[int, ...]]
    latency_s: float | None


@dataclass(frozen=True)
class DecisionTrace:
    algorithm: str
    graph: Graph = field(repr=False, compare=False)
    start: Assignment
    decisions: tuple[Decision, ...]
    result: Assignment  # what the algorithm returned
    start_latency_s: float | None = None
    truncated: bool = False

    def replay(self) -> Assignment:
        """The accepted decisions applied to ``start`` in order."""
        last = self.frames[-1] if self.frames else self._first
        top = max(last.devices_of, default=-1)
        return Assignment(list(last.part), [list(last.devices_of.get(p, ())) for p in range(top + 1)])

    @property
    def _first(self) -> Frame:
        devices = {p: tuple(d) for p, d in enumerate(self.start.devices_of)}
        return Frame(tuple(self.start.part), devices, self.start_latency_s)

    @cached_property
    def frames(self) -> list[Frame]:
        """The plan after each decision (a rejected one leaves it as it was)."""
        frame = self._first
        out = []
        for d in self.decisions:
            if d.accepted and (d.moves or d.devices):
                part = list(frame.part)
                for v, q in d.moves:
                    part[v] = q
                devices = dict(frame.devices_of)
                devices.update(d.devices)
                latency = d.latency_s if d.latency_s is not None else frame.latency_s
                frame = Frame(tuple(part), devices, latency)
            out.append(frame)
        return out


class _Keeper:
    def __init__(self) -> None:
        self.decisions: list[Decision] = []
        self.truncated = False

    def __call__(
        self,
        kind: str,
        text: str,
        moves: Sequence[tuple[int, int]] = (),
        devices: Sequence[tuple[int, Sequence[int]]] = (),
        accepted: bool = True,
        latency_s: float | None = None,
    ) -> None:
        if len(self.decisions) >= _MAX_DECISIONS:
            self.truncated = True
            return
        self.decisions.append(
            Decision(
                kind,
                text,
                tuple((int(v), int(q)) for v, q in moves),
                tuple((int(p), tuple(int(x) for x in ds)) for p, ds in devices),
                accepted,
                latency_s,
            )
        )


def record(
    graph: Graph,
    devices: Sequence[Device],
    algorithm: str,
    *,
    budget: int = 400,
    options: PartitionOptions | None = None,
) -> DecisionTrace:
    """Run ``algorithm`` (a key of :data:`ALGORITHMS`) on ``graph`` and ``devices`` and keep its
    decisions. ``budget``: cost-model evaluations for the searches (a few hundred keep a trace
    short enough to step through). Raises :class:`PartitionError` for an unknown algorithm and
    :class:`~partitioner.errors.InfeasibleError` where the algorithm finds no plan."""
    from partitioner.accelerator import size_based
    from partitioner.accelerator._fills import starts
    from partitioner.accelerator._merge import merge_partitions
    from partitioner.accelerator._search import improve_by_moves
    from partitioner.accelerator.cost_aware import singletons

    if algorithm not in ALGORITHMS:
        raise PartitionError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    problem = build_problem(graph, devices, options or PartitionOptions())
    keeper = _Keeper()
    if algorithm == "size_based":
        problem.record = keeper
        result = size_based.torch_fill(problem)
        return DecisionTrace(
            algorithm, graph, Assignment([-1] * len(graph), []), tuple(keeper.decisions), result, None, keeper.truncated
        )
    try:
        begin = size_based.partition(problem)
    except PartitionError:
        begin = starts(problem)[0]
    start = begin if algorithm == "kl_pass" else singletons(problem, begin)  # as cost_aware starts
    start_latency = problem.latency(start)
    problem.record = keeper
    if algorithm == "kl_pass":
        result = improve_by_moves(problem, start, budget, swaps=True)
    else:
        result = merge_partitions(problem, start, budget)
    return DecisionTrace(algorithm, graph, start, tuple(keeper.decisions), result, start_latency, keeper.truncated)
