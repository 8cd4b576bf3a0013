"""functorch's min-cut as a recomputation choice of the cluster planner: shares measured by
remat.sweep on the traced graph, priced by hand, searched beside none and full, exported as
torchtitan's memory_budget mode."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch
from cluster_helpers import hand_profile

import partitioner
from partitioner import PartitionError, cluster, remat
from partitioner.interop.engines import to_torchtitan
from partitioner.pipeline.steps import step_simulator

GiB = 2**30
ACC = cluster.Accelerator.custom("toy", 64 * GiB, 1e12, 1e11, 2.0)
TOY = cluster.Cluster(ACC, devices_per_node=2, intra=cluster.Link("l", 1e10, 0.0), headroom_bytes=0)


def test_a_min_cut_budget_keeps_and_recomputes_its_measured_shares():
    p = dataclasses.replace(hand_profile(), min_cut=((0.5, 0.4, 0.3),))
    w = cluster.Workload(global_batch=4, seq_len=1)
    sim = step_simulator()
    none = cluster.evaluate(p, w, TOY, cluster.Layout(microbatch_size=2), sim)
    cut = cluster.evaluate(p, w, TOY, cluster.Layout(microbatch_size=2, recompute="min-cut-0.5"), sim)
    assert cut.memory["activations"] == pytest.approx(0.4 * none.memory["activations"])
    fwd = none.parts_s["compute"] / none.microbatches / 3  # forward + a backward of twice it
    assert cut.parts_s["recomputation"] == pytest.approx(none.microbatches * 0.3 * fwd)
    assert cut.step_s == pytest.approx(none.step_s + none.microbatches * 0.3 * fwd)
    with pytest.raises(
        PartitionError,
        match="recompute-min-cut-0.25 reads functorch's min-cut at that budget and this profile measured 0.5",
    ):
        cluster.evaluate(p, w, TOY, cluster.Layout(recompute="min-cut-0.25"), sim)


def test_shares_come_from_functorchs_min_cut_on_the_traced_graph():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(3) for m in (torch.nn.Linear(64, 64), torch.nn.GELU())])
    x = torch.randn(32, 64)
    graph = partitioner.trace(model, (x,))
    prof = cluster.profile(graph)
    results = remat.sweep(graph, (x,), (0.0, 1.0), timeout_s=None)
    measured = cluster.with_min_cut(prof, results)
    outputs = sum(graph.nodes[v].output_bytes for v in graph.op_indices)  # every op output of the forward
    flops = sum(graph.nodes[v].flops for v in graph.op_indices)
    for (budget, kept, redo), r in zip(measured.min_cut, results):
        assert budget == r.budget
        assert kept == pytest.approx(r.saved_activation_bytes / outputs)
        assert redo == pytest.approx(r.recompute_flops / flops)
    (_, kept0, redo0), (_, kept1, redo1) = measured.min_cut
    assert kept0 < kept1 <= 1 and redo0 > redo1 >= 0  # budget 0 recomputes the GELUs that budget 1 saves


def test_the_search_offers_min_cut_where_it_fits_and_is_faster_than_full():
    p = dataclasses.replace(
        hand_profile(params=1_000_000, layers=2), act_bytes_per_token=1e6, min_cut=((0.0, 0.1, 0.2),)
    )
    acc = cluster.Accelerator.custom("x", 16_000_000 + 600_000, 1e12, 1e11, 1.0)  # model states + 0.6 of a token
    c = cluster.Cluster(acc, devices_per_node=1, headroom_bytes=0)
    w = cluster.Workload(global_batch=8, seq_len=1)
    found = cluster.search(p, w, c, [1])
    kinds = {r.layout.recompute for r in found.fitting}
    # Every op output of one token does not fit; full keeps half of them (one layer of two), min-cut 10 %.
    assert kinds == {"min-cut-0", "full"}
    best = {k: min(r.step_s for r in found.fitting if r.layout.recompute == k) for k in kinds}
    assert best["min-cut-0"] < best["full"]  # it recomputes 20 % of the forward, full all of it


def test_torchtitan_runs_a_min_cut_budget_as_its_memory_budget_mode():
    config = to_torchtitan(cluster.Layout(recompute="min-cut-0.5"), cluster.Workload(global_batch=8))
    assert config["activation_checkpoint"] == {"mode": "memory_budget", "memory_budget": 0.5}
    assert config["compile"]["enable"] is True


@pytest.mark.slow
def test_the_command_line_measures_min_cut_then_searches():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "cluster",
            "gpt2_small",
            "--set",
            "n_layer=2",
            "--max-nodes",
            "1",
            "--global-batch",
            "8",
            "--seq-len",
            "64",
            "--min-cut-budgets",
            "0,0.5",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "min-cut-0 keeps" in done.stdout and "min-cut-0.5 keeps" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "cli", "cluster", "mlp", "--min-cut-budgets", "half"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "--min-cut-budgets takes numbers" in bad.stderr
