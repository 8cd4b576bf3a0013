"""The cluster search: every layout of every size in range, evaluated, and the answers a buyer
asks for: the fewest devices that fit, the fastest, the cheapest, and the Pareto front of
devices against step time.

Sizes are whole nodes (1, 2, 4, ... nodes), plus 1, 2, 4, ... devices of one node. For each:
tensor parallelism in powers of two up to a node, pipeline stages dividing the devices left (uneven
over the layers where they must be: NOTE: [Uneven stages] in :mod:`partitioner.cluster.rules`),
data parallelism taking the rest (the global batch must divide over it), microbatch sizes in
powers of two, each runnable schedule (the microbatch counts torch's schedule classes accept:
:func:`partitioner.pipeline.schedules.check_microbatches`), ZeRO 0-3, recomputation none, full,
selective (Megatron's scores where the model keeps them, torchtitan's per-op policy with fused
attention), min-cut at each measured budget and, where none does not fit, the fewest layers of a
rank recomputed that fit (``layers-K``), and for a mixture of experts every expert-parallel degree
dividing both the experts and the data-parallel degree; tensor parallelism only where it divides the
heads and widths (:func:`partitioner.cluster.layouts.check_layout`), interleaving 2 and 4 chunks deep, HSDP (ZeRO
sharding inside a node, replication across nodes) where the data-parallel group spans nodes,
ZeRO-Offload (the optimizer on the host) for ZeRO 2 and 3 layouts that do not fit without it, and
for sequences of 16k tokens and more context parallelism up to 16. The pipeline's step and stash come
from the Pipeline page's simulator: each schedule's order replayed once per (schedule, stages,
microbatches) and its times per backward ratio (NOTE: [Replaying one order] in
:mod:`partitioner.pipeline.steps`). The parts layouts share (states, activations, a stage's time, the
data-parallel step) are computed once a search (NOTE: [A search's memo] in
:mod:`partitioner.cluster.memory`); partial recomputation's counts are tried by their memory alone,
the one found timed. O(sizes x layouts) evaluations of O(1) each after the first forward time of
each microbatch size; ``progress`` hears how far it is.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Sequence

from partitioner.cluster.hardware import Cluster
from partitioner.cluster.knee import serving_knee
from partitioner.cluster.layouts import (
    Layout,
    LayoutResult,
    Memo,
    Workload,
    check_layout,
    evaluate,
    memory_fits,
    min_cut_label,
    over_by_states,
    shared_simulator,
)
from partitioner.cluster.model_profile import ModelProfile
from partitioner.cluster.rules import stage_layers
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import NO_SCHEDULE, searched_schedules
from partitioner.pipeline.steps import StepSimulator

__all__ = [
    "ClusterPlan",
    "SearchProgress",
    "search",
    "device_counts",
    "SCHEDULES",
    "pareto",
    "at_the_edge",
    "stops_paying",
]

SCHEDULES = tuple(s.name for s in searched_schedules())  # what the search tries, read from the one table
MICROBATCH_SIZES = (1, 2, 4, 8, 16, 32)
PROGRESS_EVERY = 2000  # layouts between two reports to a search's progress callback
MAX_MICROBATCHES = 512  # more is a simulation of little use (and slow): larger microbatches win
LONG_SEQUENCE = 16384  # context parallelism is searched from this sequence length on


@dataclass(frozen=True)
class ClusterPlan:
    """The search's outcome: every fitting layout, the answers, what was searched and how long."""

    fitting: tuple[LayoutResult, ...]  # every layout that fits, fastest first
    fewest_devices: LayoutResult | None  # the fewest devices; the fastest among them
    fastest: LayoutResult | None
    cheapest: LayoutResult | None  # the least cost per million tokens
    front: tuple[LayoutResult, ...]  # Pareto front: devices against step time
    by_devices: dict[int, LayoutResult]  # the fastest fitting layout at each size
    evaluated: int
    search_s: float
    refused: dict[str, int]  # why layouts were not evaluated (batch does not divide, ...)
    # serving: past it a user's tokens a second gain little for much more cost (NOTE: [Serving
    # knee] in partitioner.cluster.knee); None for training
    knee: LayoutResult | None = None

    def best(self, n: int = 10) -> tuple[LayoutResult, ...]:
        return self.fitting[:n]


def device_counts(
    devices_per_node: int, max_nodes: int, min_devices: int = 1, max_devices: int | None = None
) -> list[int]:
    counts = {d for d in (1, 2, 4, 8, 16, 32, 64) if d < devices_per_node}
    nodes = 1
    while nodes <= max_nodes:
        counts.add(nodes * devices_per_node)
        nodes *= 2
    top = max_devices or max(counts)
    return sorted(c for c in counts if min_devices <= c <= top)


def _powers(limit: int) -> list[int]:
    out, k = [], 1
    while k <= limit:
        out.append(k)
        k *= 2
    return out


def _count(refused: dict[str, int], why: str) -> None:
    refused[why] = refused.get(why, 0) + 1


def _tp_divides(p: ModelProfile, tp: int) -> bool:
    try:
        check_layout(p, Layout(tp=tp))
    except PartitionError:
        return False
    return True


def _context_degrees(p: ModelProfile, w: Workload, rest: int) -> list[int]:
    """Context parallelism for long sequences (16k tokens and more, where Llama 3 used it): powers
    of two up to 16 dividing the sequence and the devices left after tensor parallelism."""
    if w.kind != "training" or w.seq_len < LONG_SEQUENCE or not p.kv_bytes_per_token:
        return [1]
    return [cp for cp in _powers(min(16, rest)) if rest % cp == 0 and w.seq_len % cp == 0]


def _layouts(
    p: ModelProfile,
    w: Workload,
    c: Cluster,
    devices: int,
    refused: dict[str, int],
    check: Callable[[str, int, int], None],
) -> list[Layout]:
    found: list[Layout] = []
    recompute = _recompute_choices(p)
    for tp, cp, pp, dp in _degrees(p, w, c, devices, refused):
        if w.kind == "inference":
            if cp == 1:
                found.append(Layout(dp, tp, pp))
            continue
        eps = [e for e in range(1, dp + 1) if dp % e == 0 and p.experts % e == 0] if p.experts else [1]
        shards = _shard_groups(c, tp, dp, cp)
        for mb, m in _microbatchings(w.global_batch // dp):
            for sched, v in _schedules(p, pp, m, refused, check):
                for zero in (0, 1, 2, 3) if dp * cp > 1 else (0,):
                    for rc in recompute:
                        for shard in shards if zero else [0]:
                            found.extend(
                                Layout(dp, tp, pp, mb, sched, zero, rc, ep, cp=cp, virtual=v, shard=shard) for ep in eps
                            )
    return found


def _recompute_choices(p: ModelProfile) -> tuple[str, ...]:
    """The recomputations searched: none, selective (Megatron's, the scores, where the model keeps
    them; torchtitan's per-op policy where attention is fused), full, and min-cut at each budget
    measured."""
    saved = getattr(p, "saved", None)
    return (
        "none",
        *(("selective",) if saved is not None else ()),
        "full",
        *(min_cut_label(b) for b, _, _ in p.min_cut),
    )


def _degrees(
    p: ModelProfile, w: Workload, c: Cluster, devices: int, refused: dict[str, int]
) -> Iterator[tuple[int, int, int, int]]:
    """(tp, cp, pp, dp) over ``devices``: tp a power of two within a node that divides the
    model's heads and widths, cp the sequence, pp up to the layers (uneven stages run), dp the
    rest, dividing the global batch; each refusal counted in ``refused`` as it is met."""
    for tp in _powers(min(devices, c.devices_per_node)):
        if devices % tp:
            continue
        if tp > 1 and not _tp_divides(p, tp):
            _count(refused, "tensor parallelism does not divide the heads or widths")
            continue
        for cp in _context_degrees(p, w, devices // tp):
            rest = devices // (tp * cp)
            for pp in (d for d in range(1, min(rest, p.layers) + 1) if rest % d == 0):  # uneven stages run
                dp = rest // pp
                if w.global_batch % dp:
                    _count(refused, "global batch does not divide over data parallelism")
                    continue
                yield tp, cp, pp, dp


def _microbatchings(per_replica: int) -> Iterator[tuple[int, int]]:
    """(microbatch size, microbatches) that split a replica's ``per_replica`` sequences, at most
    ``MAX_MICROBATCHES`` of them."""
    for mb in MICROBATCH_SIZES:
        if per_replica % mb:
            continue
        m = per_replica // mb
        if m > MAX_MICROBATCHES:
            continue
        yield mb, m


def _schedules(
    p: ModelProfile, pp: int, m: int, refused: dict[str, int], check: Callable[[str, int, int], None]
) -> Iterator[tuple[str, int]]:
    """(schedule, chunks a rank) of ``pp`` stages running ``m`` microbatches: none without stages,
    else each searched schedule (interleaved ones at each searched chunk count the layers hold)
    that ``check`` accepts; each refusal counted in ``refused`` as it is met."""
    if pp == 1:
        yield NO_SCHEDULE, Layout.virtual
        return
    for s in searched_schedules():
        for v in s.searched_virtual or (Layout.virtual,):
            if s.interleaved and v * pp > p.layers:
                continue
            try:
                check(s.name, pp, m)
            except PartitionError:
                _count(refused, "microbatch count the schedule refuses")
                continue
            yield s.name, v


def _shard_groups(c: Cluster, tp: int, dp: int, cp: int) -> list[int]:
    """ZeRO's sharding groups searched: the whole data-parallel group (0), and HSDP's (shard
    inside a node, replicate across nodes) where the group spans nodes."""
    node_shard = c.devices_per_node // tp
    return [0] + (
        [node_shard]
        if tp * dp * cp > c.devices_per_node and node_shard > 1 and (dp * cp) % node_shard == 0 and node_shard % cp == 0
        else []
    )


def _partial_recompute(
    p: ModelProfile, w: Workload, c: Cluster, none: LayoutResult, sim: StepSimulator, memo: Memo
) -> LayoutResult | None:
    """The layout of ``none`` (no recomputation, over the memory) with the fewest of each rank's
    layers recomputed whole that fits (Megatron-LM's ``--recompute-num-layers``): each layer
    recomputed trades its saved values for its input in every microbatch in flight, so the count
    follows from ``none``'s memory and that of all but one layer recomputed; from that estimate the
    count goes down while it fits, else up until it does. None when even all but one layer
    recomputed does not fit (full recomputation is searched on its own). O(layers) memory checks
    at most, a few in practice (:func:`~partitioner.cluster.layouts.memory_fits`), and the count
    found timed once."""
    layers = int(stage_layers(p, none.layout))
    if layers < 2 or "activations" not in none.memory:
        return None
    activations = ("activations", "loss logits", "weight-gradient stash", "recomputed layer")
    if none.memory_bytes - sum(none.memory.get(k, 0.0) for k in activations) >= c.accelerator.memory_bytes:
        return None  # the states alone are over: no recomputation helps

    def fits(k: int) -> tuple[dict[str, float], bool]:
        return memory_fits(p, w, c, none.layout, sim, memo, recompute=f"layers-{k}")

    full, full_fits = fits(layers - 1)
    saved_a_layer = (none.memory["activations"] - full["activations"]) / (layers - 1)
    if not full_fits or saved_a_layer <= 0:
        return None
    over = none.memory_bytes - c.accelerator.memory_bytes + full.get("recomputed layer", 0.0)
    k = max(1, min(layers - 1, math.ceil(over / saved_a_layer)))
    best = None
    for _ in range(layers):  # from the estimate, down while it fits, else up until it does
        if fits(k)[1]:
            best = k
            if k == 1:
                break
            k -= 1
        elif best is not None or k >= layers - 1:
            break
        else:
            k += 1
    chosen = replace(none.layout, recompute=f"layers-{best if best is not None else layers - 1}")
    return evaluate(p, w, c, chosen, sim, time_unfit=False, memo=memo)


def _evaluate_one(
    p: ModelProfile, w: Workload, c: Cluster, lay: Layout, sim: StepSimulator, memo: Memo, fitting: list[LayoutResult]
) -> int:
    """Evaluate ``lay`` as the search does, what fits appended to ``fitting``: the layout (over the
    memory: no time), else the fewest of its layers recomputed that fit where it has no
    recomputation, and ZeRO-Offload for ZeRO 2-3 where the devices are short. A layout whose states
    alone are over (:func:`~partitioner.cluster.memory.over_by_states`) is over whatever its
    activations, and partial recomputation finds nothing for it: neither is computed. Returns the
    evaluations beyond the layout's own (1 for a partial recomputation found)."""
    training, extra = w.kind == "training", 0
    check_layout(p, lay, w)  # what evaluate refuses, refused here too
    if not (training and over_by_states(p, w, c, lay, memo)):
        r = evaluate(p, w, c, lay, sim, time_unfit=False, memo=memo)
        if r.fits:
            fitting.append(r)
            return 0
        if lay.recompute == "none" and training:
            partial = _partial_recompute(p, w, c, r, sim, memo)  # the fewest layers recomputed that fit
            if partial is not None:
                extra = 1
                fitting.append(partial)
    if training and lay.zero >= 2 and not over_by_states(p, w, c, lay, memo, offload=True):
        # ZeRO-Offload, where the devices are short: its optimizer moved
        r = evaluate(p, w, c, replace(lay, offload=True), sim, time_unfit=False, memo=memo)
        if r.fits:
            fitting.append(r)
    return extra


def pareto(results: Sequence[LayoutResult]) -> tuple[LayoutResult, ...]:
    """The layouts no other beats on both devices and step time, fewest devices first."""
    front: list[LayoutResult] = []
    for r in sorted(results, key=lambda r: (r.devices, r.step_s)):
        if not front or r.step_s < front[-1].step_s:
            front.append(r)
    return tuple(front)


@dataclass(frozen=True)
class SearchProgress:
    """Where a search stands, as :func:`search` reports it to its ``progress`` callback."""

    tried: int  # layouts of the sizes searched taken so far
    total: int  # layouts of every size (each may add its partial recomputation or offload variant)
    evaluated: int  # layouts evaluated so far, the variants included
    fitting: int  # of them, those that fit
    devices: int  # the size being searched
    elapsed_s: float


def search(
    p: ModelProfile,
    w: Workload,
    c: Cluster,
    device_range: Sequence[int],
    progress: Callable[[SearchProgress], None] | None = None,
) -> ClusterPlan:
    """Evaluate every layout at each device count of ``device_range`` (see the module doc);
    ``progress`` is told where the search stands every :data:`PROGRESS_EVERY` layouts and at the
    end (a page's progress bar: ``tried / total``)."""
    if not device_range:
        raise PartitionError("no device count to search; give at least one node")
    began = time.perf_counter()
    sim = shared_simulator()  # one cache for every search of the process (the app's pages, the CLI)
    refused: dict[str, int] = {}
    fitting: list[LayoutResult] = []
    evaluated = 0
    memo: Memo = {}  # the parts layouts share (NOTE: [A search's memo] in partitioner.cluster.memory)
    sizes = [(devices, _layouts(p, w, c, devices, refused, sim.check)) for devices in device_range]
    total, tried, reported = sum(len(found) for _, found in sizes), 0, 0
    for devices, found in sizes:
        for lay in found:
            tried += 1
            evaluated += 1 + _evaluate_one(p, w, c, lay, sim, memo, fitting)
            if progress is not None and (tried - reported >= PROGRESS_EVERY or tried == total):
                reported = tried
                progress(SearchProgress(tried, total, evaluated, len(fitting), devices, time.perf_counter() - began))
    fitting.sort(key=lambda r: (r.step_s, r.devices))
    by_devices: dict[int, LayoutResult] = {}
    for r in fitting:
        by_devices.setdefault(r.devices, r)
    fewest = min(fitting, key=lambda r: (r.devices, r.step_s)) if fitting else None
    cheapest = min(fitting, key=lambda r: (r.cost_per_million_tokens, r.step_s)) if fitting else None
    return ClusterPlan(
        tuple(fitting),
        fewest,
        fitting[0] if fitting else None,
        cheapest,
        pareto(fitting),
        dict(sorted(by_devices.items())),
        evaluated,
        time.perf_counter() - began,
        refused,
        serving_knee(fitting) if w.kind == "inference" else None,
    )


def at_the_edge(found: ClusterPlan, device_range: Sequence[int]) -> tuple[str, ...]:
    """The answers (``"fastest"``, ``"cheapest"``, ``"fewest devices"``) that sit at the largest
    size searched: more devices might beat them, so a page says so."""
    if not device_range:
        return ()
    top = max(device_range)
    answers = (("fewest devices", found.fewest_devices), ("fastest", found.fastest), ("cheapest", found.cheapest))
    return tuple(name for name, r in answers if r is not None and r.devices == top)


def stops_paying(found: ClusterPlan, gain: float = 0.10) -> int | None:
    """The device count from which the next size searched (the fastest layout at each) cuts the
    step by less than ``gain`` or costs more per token: where adding devices stops paying. None when
    every step up still pays. O(sizes)."""
    sizes = list(found.by_devices.items())
    for (n, r), (_, nxt) in zip(sizes, sizes[1:]):
        if nxt.step_s > r.step_s * (1 - gain) or nxt.cost_per_million_tokens > r.cost_per_million_tokens * 1.5:
            return n
    return None
