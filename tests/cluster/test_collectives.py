"""An opened layout's collectives: the rows sum to what the step's time charges for each group,
the counts are Megatron-LM's, GShard's and the ZeRO paper's, and the 2-layer MLP's by hand."""

from __future__ import annotations

import dataclasses
import json

import pytest
from cluster_helpers import hand_profile
from hypothesis import given, settings
from hypothesis import strategies as st

import partitioner
from partitioner import cluster
from partitioner.cluster.layouts import ring_allreduce_s
from partitioner.pipeline.steps import step_simulator

GiB = 2**30
TOY = cluster.Cluster(
    cluster.Accelerator.custom("toy", 64 * GiB, 1e12, 1e11, 2.0),
    devices_per_node=2,
    intra=cluster.Link("fast", 1e10, 0.0),
    inter=cluster.Link("slow", 1e9, 0.0),
    headroom_bytes=GiB,
)


def _by_group(rows: list[cluster.Collective]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        out[r.group] = out.get(r.group, 0.0) + r.seconds
    return out


def test_the_two_layer_mlp_on_two_by_two_devices_by_hand():
    p = hand_profile()
    w = cluster.Workload(global_batch=8, seq_len=1, element_bytes=2, optimizer="adam")
    rows = cluster.collectives(p, w, TOY, cluster.Layout(dp=2, tp=2, pp=1, microbatch_size=2))
    tp, dp = rows
    # 2 microbatches x 2 layers x (2 forward + 2 backward) all-reduces of 2 tokens x 64 B, in the node.
    assert (tp.group, tp.ranks, tp.link, tp.count, tp.bytes_each) == ("tp", 2, "fast", 16, 128)
    assert tp.seconds_each == ring_allreduce_s(128, 2, 1e10, 0.0)
    # One all-reduce of the 500k gradients of 2 B over dp = 2; tp x dp = 4 devices span two nodes.
    assert (dp.group, dp.ranks, dp.link, dp.count, dp.bytes_each) == ("dp", 2, "slow", 1, 1_000_000)
    assert dp.seconds_each == pytest.approx(1_000_000 / 1e9)


def test_zero3_moves_one_and_a_half_times_data_parallelisms_bytes():
    p = hand_profile()
    w = cluster.Workload(global_batch=8, seq_len=1)
    plain = _by_group(cluster.collectives(p, w, TOY, cluster.Layout(dp=4, microbatch_size=2)))["dp"]
    for zero in (1, 2):
        assert _by_group(cluster.collectives(p, w, TOY, cluster.Layout(dp=4, microbatch_size=2, zero=zero)))[
            "dp"
        ] == pytest.approx(plain)
    rows = cluster.collectives(p, w, TOY, cluster.Layout(dp=4, microbatch_size=2, zero=3))
    assert [r.name.split(" ")[0] for r in rows] == ["reduce-scatter", "all-gather"]
    assert sum(r.seconds for r in rows) == pytest.approx(1.5 * plain)  # ZeRO paper, sec. 7: 3 psi against 2 psi


def test_megatrons_count_four_all_reduces_per_layer_per_microbatch():
    p = hand_profile(layers=8)
    w = cluster.Workload(global_batch=16, seq_len=128)
    lay = cluster.Layout(dp=1, tp=4, pp=2, microbatch_size=2, schedule="1f1b")
    tp = next(r for r in cluster.collectives(p, w, TOY, lay) if r.group == "tp")
    assert tp.count == 8 * 4 * (8 / 2)  # 8 microbatches, each layer of a stage's 4


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2]),
    st.integers(0, 3),
    st.sampled_from(["none", "full"]),
    st.sampled_from([1, 2, 4]),
    st.booleans(),
    st.sampled_from(["training", "inference"]),
    st.sampled_from(["1f1b", "interleaved_1f1b"]),
    st.sampled_from([4, 6]),
)
def test_the_rows_sum_to_the_steps_communication(dp, tp, pp, mb, zero, rc, ep, moe, kind, schedule, layers):
    """Every layout's rows sum to its step's parts: uneven stages (6 layers over 4), interleaving's
    sends at each chunk, FSDP's every microbatch."""
    p = hand_profile(params=50_000_000, layers=layers)
    if moe:
        p = dataclasses.replace(p, expert_param_count=30_000_000, experts=4, experts_per_token=2, moe_layers=layers)
    w = cluster.Workload(kind=kind, global_batch=16, seq_len=64, generate_tokens=8)
    lay = cluster.Layout(
        dp, tp, pp, mb, schedule if pp > 1 else "none", zero if dp > 1 else 0, rc, ep if moe and dp % ep == 0 else 1
    )
    try:
        r = cluster.evaluate(p, w, TOY, lay, step_simulator())
    except partitioner.PartitionError:
        return  # a microbatch count the schedule refuses
    groups = _by_group(cluster.collectives(p, w, TOY, lay))
    if kind == "inference":
        per_token = sum(c.seconds for c in cluster.collectives(p, w, TOY, lay) if c.phase == "each token")
        assert per_token == pytest.approx(r.parts_s["communication per token"])
        return
    assert groups.get("tp", 0.0) == pytest.approx(r.parts_s["tensor-parallel communication"])
    assert groups.get("pp", 0.0) == pytest.approx(r.parts_s["pipeline transfers"])
    assert groups.get("ep", 0.0) == pytest.approx(r.parts_s["expert all-to-all"])
    # The reduction overlaps the last microbatch's backward (twice the forward, plus what it recomputes).
    m = r.microbatches
    backward = 2 * r.parts_s["compute"] / (3 * m) + r.parts_s.get("recomputation", 0.0) / m
    if lay.zero == 3 and lay.dp > 1:
        # FSDP gathers and reduces every microbatch, 3 ring collectives a layer of the stage, each
        # paying n - 1 steps of latency, hidden under that microbatch's forward and backward
        link = TOY.intra if lay.tp * lay.dp <= TOY.devices_per_node else TOY.inter
        chunks = 2 if lay.schedule == "interleaved_1f1b" else 1
        rank_layers = -(-p.layers // (lay.pp * chunks)) * chunks  # the busiest rank's (uneven stages)
        latency = 3 * rank_layers * (lay.dp - 1) * link.latency_s
        both = (r.parts_s["compute"] + r.parts_s.get("recomputation", 0.0)) / m
        expected = m * max(0.0, groups.get("dp", 0.0) / m + latency - both)  # the rows count every microbatch
    else:
        expected = max(0.0, groups.get("dp", 0.0) - backward)
    assert r.parts_s["gradient reduction (exposed)"] == pytest.approx(expected, abs=1e-15)


def test_the_command_line_opens_a_layout_with_its_collectives(tmp_path, capsys):
    from cli.main import main

    out = tmp_path / "plan.json"
    assert (
        main(
            [
                "cluster",
                "mlp",
                "--max-nodes",
                "1",
                "--global-batch",
                "16",
                "--seq-len",
                "1",
                "--open",
                "dp2 tp2 pp2 1f1b mb2 zero1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "dp2 tp2 pp2 1f1b mb2 zero1 on 8 x h100-80gb" in printed and "all-reduce of the hidden state" in printed
    opened = json.loads(out.read_text())["opened"]
    groups = {c["group"] for c in opened["collectives"]}
    assert groups == {"tp", "pp", "dp"}
    tp = sum(c["seconds"] for c in opened["collectives"] if c["group"] == "tp")
    assert tp == pytest.approx(opened["parts_s"]["tensor-parallel communication"])
    assert main(["cluster", "mlp", "--max-nodes", "1", "--open", "dp2 tq2"]) == 2  # a misspelt word: exit 2
    assert "a layout is words like" in capsys.readouterr().err
