"""The cluster search's shortcuts answer as the long way does, to the bit: one replayed schedule order
for every backward ratio (NOTE: [Replaying one order]), the search's memo of the parts layouts
share (NOTE: [A search's memo]), memory checks without the time for partial recomputation, each
distinct op priced once; and the search says how far it is."""

from __future__ import annotations

import dataclasses
import random

import pytest

import partitioner
import sample_models
from partitioner import cluster, kernels
from partitioner.cluster.layout_search import SearchProgress
from partitioner.cluster.layouts import memory_fits
from partitioner.cluster.rules import stage_layers
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import virtual_stages
from partitioner.pipeline.simulator import simulate
from partitioner.pipeline.steps import step_simulator
from partitioner.units import dtype_for_bytes

GiB = 2**30


@pytest.fixture(scope="module")
def small() -> cluster.PlannerProfile:
    """The sample transformer (4 blocks, 19 distinct ops among 111), counted at 16 layers."""
    module, inputs, kwargs = sample_models.load("transformer")
    p = cluster.profile(partitioner.trace(module, inputs, example_kwargs=kwargs), "transformer")
    return dataclasses.replace(p, layers=16, _cache={})


def _tight(headroom_gib: float) -> cluster.Cluster:
    """H100 nodes of 8 with most of each device's memory held back: some layouts fit, some not."""
    return cluster.cluster("h100-80gb", 8, None, "infiniband-ndr", int(headroom_gib * GiB))


@pytest.mark.parametrize(("schedule", "v"), [("interleaved_1f1b", 2), ("interleaved_1f1b", 4), ("zero_bubble", 2)])
def test_one_replayed_order_gives_the_simulators_step_stash_and_pending_at_every_ratio(schedule, v):
    sim = step_simulator()
    checked = 0
    for pp in (2, 3, 4, 8):
        for m in (1, 2, 3, 4, 6, 8, 12, 16, 32):
            try:
                sim.check(schedule, pp, m)
            except PartitionError:
                continue
            chunks = virtual_stages(schedule, v)
            for ratio in (1.0, 2.0, 2.4, 3.1, 1.37):
                out = simulate(
                    [1.0 / chunks] * (pp * chunks), m, schedule, backward_s=[ratio / chunks] * (pp * chunks), virtual=v
                )
                ratio_asked = ratio if pp * m <= 8 else float(f"{ratio:.2g}")
                if ratio_asked != ratio:
                    continue  # the simulator caches beyond 8 stage-microbatches under the rounded ratio
                assert sim(schedule, pp, m, ratio, v) == (out.step_time_s, out.bubble_fraction, out.rank_peak_stash[0])
                assert sim.pending_weight(schedule, pp, m, ratio, v) == out.rank_peak_pending_weight[0]
                assert sim.stash(schedule, pp, m, v) == (out.rank_peak_stash[0], out.rank_peak_pending_weight[0])
                checked += 1
    assert checked > 20


def _reference_seconds(p, gpu, tokens: float, seq: int, tp: int, backward: bool) -> float:
    """The eager forward or backward priced op by op, every op on its own (the long way)."""
    r, q = tokens / p.tokens0, seq / p.seq0
    dtype = dtype_for_bytes(2).peak_key
    ops = []
    for op in p.node_ops:
        if op.kind != "view":
            op = dataclasses.replace(
                op,
                dtype=dtype,
                nbytes=op.nbytes * 2 / p.element_bytes,
                fixed_bytes=op.fixed_bytes * 2 / p.element_bytes,
            )
        ops.append(op.scaled(r, q, tp))
    if backward:
        pairs = kernels.backward_times(ops, gpu)[::-1]
        return sum(kernels.eager_increments([h for h, _ in pairs], [k for _, k in pairs]))
    return sum(
        kernels.eager_increments([gpu.host_per_op_s * op.launches for op in ops], [gpu.kernel_s(op) for op in ops])
    )


@pytest.mark.parametrize(("tokens", "tp"), [(4096.0, 1), (8192.0, 2), (32768.0, 8)])
def test_each_distinct_op_priced_once_prices_the_model_as_op_by_op(small, tokens, tp):
    acc = cluster.cluster("h100-80gb").accelerator
    distinct, at = small._unique_ops()
    assert len(distinct) < len(small.node_ops) and [distinct[i] for i in at] == list(small.node_ops)
    seq = 2048
    assert small.forward_seconds(tokens, seq, acc, tp, element_bytes=2) == _reference_seconds(
        small, acc.kernels, tokens, seq, tp, False
    )
    assert small.backward_seconds(tokens, seq, acc, tp, element_bytes=2) == _reference_seconds(
        small, acc.kernels, tokens, seq, tp, True
    )


def test_every_layout_the_search_finds_is_evaluated_alone_to_the_same_figures(small):
    """Each fitting layout, evaluated on its own with a fresh simulator and no memo, gives the
    search's result field for field; each partial recomputation is the fewest layers that fit."""
    w = cluster.Workload(global_batch=64, seq_len=8192)
    c = _tight(79.6)
    found = cluster.search(small, w, c, cluster.device_counts(8, 2))
    assert found.fitting and found.evaluated > len(found.fitting)
    assert any(r.layout.recompute.startswith("layers-") for r in found.fitting)
    for r in found.fitting:
        assert r == cluster.evaluate(small, w, c, r.layout, step_simulator(), time_unfit=False)
        if r.layout.recompute.startswith("layers-") and r.layout.recompute != "layers-1":
            k = int(r.layout.recompute.removeprefix("layers-"))
            fewer = dataclasses.replace(r.layout, recompute=f"layers-{k - 1}")
            assert not cluster.evaluate(small, w, c, fewer, step_simulator(), time_unfit=False).fits


def test_the_memory_check_answers_as_the_evaluation(small):
    w = cluster.Workload(global_batch=64, seq_len=8192)
    c = _tight(79.6)
    found = cluster.search(small, w, c, cluster.device_counts(8, 2))
    rng = random.Random(7)
    layouts = [r.layout for r in found.fitting]
    layouts = rng.sample(layouts, min(60, len(layouts)))
    layouts += [dataclasses.replace(lay, recompute="none", zero=0, shard=0, offload=False) for lay in layouts]
    sim = step_simulator()
    for lay in layouts:
        full = cluster.evaluate(small, w, c, lay, step_simulator(), time_unfit=False)
        assert memory_fits(small, w, c, lay, sim) == (full.memory, full.fits)
        if lay.recompute == "none" and stage_layers(small, lay) >= 2:  # another recomputation, asked without its layout
            one = cluster.evaluate(
                small, w, c, dataclasses.replace(lay, recompute="layers-1"), step_simulator(), time_unfit=False
            )
            assert memory_fits(small, w, c, lay, sim, {}, recompute="layers-1") == (one.memory, one.fits)


def test_the_search_says_how_far_it_is(small):
    seen: list[SearchProgress] = []
    w = cluster.Workload(global_batch=64, seq_len=2048)
    found = cluster.search(small, w, _tight(70), cluster.device_counts(8, 4), progress=seen.append)
    assert seen and seen[-1].tried == seen[-1].total and seen[-1].evaluated == found.evaluated
    assert seen[-1].fitting == len(found.fitting)
    assert [s.tried for s in seen] == sorted(s.tried for s in seen)
    assert all(b.tried - a.tried <= 2000 for a, b in zip(seen, seen[1:]))
