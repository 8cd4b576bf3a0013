"""The cluster planner: hand-checked layouts, the ZeRO paper's and Megatron-LM's published
figures, the schedules' closed forms against the simulator, and never a fitting layout over
capacity."""

from __future__ import annotations

import json
import math
import tomllib

import pytest
from cluster_helpers import hand_profile
from hypothesis import given, settings
from hypothesis import strategies as st

import partitioner
import sample_models
from partitioner import cluster
from partitioner.cluster.layouts import ring_allreduce_s
from partitioner.interop.engines import to_deepspeed, to_megatron, to_torchtitan, toml_text
from partitioner.pipeline.schedules import check_microbatches
from partitioner.pipeline.simulator import simulate
from partitioner.pipeline.steps import closed_form, step_simulator

GiB = 2**30


ACC = cluster.Accelerator.custom("toy", 64 * GiB, 1e12, 1e11, 2.0)
LINK = cluster.Link("toy-link", 1e10, 0.0)
TOY = cluster.Cluster(ACC, devices_per_node=2, intra=LINK, inter=cluster.Link("slow", 1e9, 0.0), headroom_bytes=GiB)


def test_a_two_layer_mlp_on_two_by_two_devices_by_hand():
    p = hand_profile()
    w = cluster.Workload(global_batch=8, seq_len=1, element_bytes=2, optimizer="adam")
    sim = step_simulator()
    # dp2 tp2: psi = 1e6 / 2 parameters a device; mixed-precision Adam: 2 + 2 + 12 bytes each.
    r = cluster.evaluate(p, w, TOY, cluster.Layout(dp=2, tp=2, pp=1, microbatch_size=2), sim)
    assert r.memory["weights"] == 2 * 500_000 and r.memory["optimizer"] == 12 * 500_000
    assert r.memory["activations"] == pytest.approx(100 * 2 * 2 / 2)  # 2 tokens x 200 B / tp
    # Forward of 2 tokens: per node max((500 kB + 200 B) / 1e11, 2 MFLOP... ) summed, split 2 ways.
    node = max((1_000_000 + 100 * 2) / 1e11, 1e6 * 2 / 1e12)
    fwd = 2 * node / 2
    tp = 2 * 2 * ring_allreduce_s(64 * 2, 2, 1e10, 0.0)  # 2 all-reduces a layer, 2 layers
    # Gradients (2 B each) reduced over dp = 2; tp x dp = 4 devices span two nodes: the slow link.
    dp = 2 * (2 - 1) / 2 * 2 * 500_000 / 1e9
    m = 2  # 4 sequences a replica in microbatches of 2
    # Adam's step on the device's 500k parameters (no ZeRO): it reads the fp16 gradient, reads and
    # writes the fp32 master and both moments, writes the fp16 weight: 2 + 2 x 12 + 4 + 2 bytes each.
    optimizer = 500_000 * (2 + 2 * 12 + 4 + 2) / 1e11
    expected = m * (fwd + tp + 2 * fwd + tp) + max(0.0, dp - 2 * fwd) + optimizer
    # Two nodes step together: the engine's loss at scale, 2 % a doubling of the nodes (Megatron-LM's
    # H100 strong scaling; NOTE: [Engine costs] in partitioner.cluster.engine)
    expected *= 1 + 0.02 * 1
    assert r.step_s == pytest.approx(expected)
    assert r.parts_s["optimizer step"] == pytest.approx(optimizer)
    assert r.microbatches == 2
    # pp2 across the node boundary: one stage a device pair, the hidden state crosses the slow link.
    r = cluster.evaluate(p, w, TOY, cluster.Layout(dp=1, tp=2, pp=2, microbatch_size=1, schedule="gpipe"), sim)
    stage = 2 * max((1_000_000 + 100) / 1e11, 1e6 / 1e12) / 2 / 2  # 1 token, split over tp and pp
    hop = 64 / 1e9
    per_f = stage + 2 * 1 * ring_allreduce_s(64, 2, 1e10, 0.0) + hop
    per_b = 2 * stage + 2 * 1 * ring_allreduce_s(64, 2, 1e10, 0.0) + hop
    optimizer = 250_000 * (2 + 2 * 12 + 4 + 2) / 1e11  # a quarter of the parameters a device
    # GPipe: (m + p - 1) slots; two nodes: the loss at scale
    assert r.step_s == pytest.approx(((8 + 2 - 1) * (per_f + per_b) + optimizer) * 1.02)
    assert r.memory["activations"] == pytest.approx(100 * 2 / 2 / 2 * 8)  # GPipe stashes all 8


@pytest.mark.parametrize("stage, expected_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.88)])
def test_model_states_reproduce_the_zero_papers_table(stage, expected_gb):
    """Rajbhandari et al. 2020, Figure 1: 7.5 B parameters, 64 data-parallel devices,
    mixed-precision Adam: 120, 31.4, 16.6 and 1.88 GB per device."""
    p = cluster.ModelProfile(
        name="7.5B",
        tokens0=1,
        seq0=1,
        weight_bytes=15 * 10**9,
        param_count=75 * 10**8,
        element_bytes=2,
        layers=1,
        hidden_bytes_per_token=0.0,
        kv_bytes_per_token=0.0,
        act_bytes_per_token=0.0,
        flops_per_token=0.0,
        attention_flops_per_token=0.0,
    )
    w = cluster.Workload(global_batch=64, seq_len=1)
    big = cluster.Cluster(cluster.Accelerator.custom("big", 2**50, 1e15, 1e12, 1.0), devices_per_node=8)
    r = cluster.evaluate(p, w, big, cluster.Layout(dp=64, zero=stage), step_simulator())
    states = r.memory["weights"] + r.memory["gradients"] + r.memory["optimizer"]
    assert states / 1e9 == pytest.approx(expected_gb, abs=0.05)


def test_flops_per_step_match_megatrons_formula():
    """Narayanan et al. 2021 (Megatron-LM), eq. 3 without recomputation: a GPT model of l layers,
    hidden h, vocabulary V at batch B x s costs 72 B s l h^2 (1 + s / (6 h) + V / (12 l h)) FLOPs
    a step (forward and backward). Its assumptions hold for GPT-2 (MLP of 4h, no biases counted)."""
    h, layers, vocab, s = 256, 4, 1000, 128
    module, inputs, kwargs = sample_models.load(
        "hf:gpt2", overrides={"n_layer": layers, "n_embd": h, "n_head": 4, "vocab_size": vocab}
    )
    graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
    p = cluster.profile(graph)
    batch = 1
    ours = 3 * p.forward_flops(batch * s, s)
    megatron = 72 * batch * s * layers * h**2 * (1 + s / (6 * h) + vocab / (12 * layers * h))
    assert ours == pytest.approx(megatron, rel=0.12)


@pytest.mark.parametrize(
    "schedule, v",
    [
        ("gpipe", 1),
        ("1f1b", 1),
        ("interleaved_1f1b", 2),
        ("interleaved_1f1b", 3),
        ("interleaved_1f1b", 4),
        ("zero_bubble", 2),
    ],
)
@pytest.mark.parametrize("pp", [2, 3, 4, 8])
def test_closed_forms_equal_the_simulator(schedule, v, pp):
    """The step and the first rank's stash in closed form against torch's own order replayed by the
    simulator, interleaved 1F1B 2 to 4 chunks a rank deep (NOTE: [Interleaved stash]); zero-bubble's
    step is bounded by interleaved 1F1B's, its stash exact."""
    for m in range(1, 4 * pp + 1):
        try:
            check_microbatches(schedule, pp, m)
        except partitioner.PartitionError:
            continue
        out = simulate([1.0 / v] * (pp * v), m, schedule, backward_s=[2.0 / v] * (pp * v), virtual=v)
        step, bubble, stash = closed_form(schedule, pp, m, 2.0, v)
        if schedule == "zero_bubble":
            assert step >= out.step_time_s - 1e-9
        else:
            assert step == pytest.approx(out.step_time_s)
            assert bubble == pytest.approx(out.bubble_fraction)
        assert out.rank_peak_stash[0] == max(out.rank_peak_stash)  # the first rank holds the most
        assert stash == pytest.approx(out.rank_peak_stash[0])
        if schedule == "gpipe":  # the GPipe paper's bubble
            assert bubble == pytest.approx((pp - 1) / (m + pp - 1))


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 4),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2, 4]),
    st.integers(0, 3),
    st.sampled_from(["none", "full"]),
    st.sampled_from([64, 4 * GiB, 20 * GiB]),
    st.sampled_from(["adam", "sgd", "none"]),
)
def test_a_layout_fits_exactly_when_every_part_is_within_the_device(dp, tp, pp, mb, zero, rc, memory, opt):
    p = hand_profile(params=3_000_000_000, layers=4)
    acc = cluster.Accelerator.custom("x", memory + GiB, 1e14, 1e12, 1.0)
    c = cluster.Cluster(acc, devices_per_node=4, headroom_bytes=GiB)
    w = cluster.Workload(global_batch=16, seq_len=512, optimizer=opt)
    lay = cluster.Layout(dp, tp, pp, mb, "1f1b" if pp > 1 else "none", zero if dp > 1 else 0, rc)
    try:
        r = cluster.evaluate(p, w, c, lay, step_simulator())
    except partitioner.PartitionError:
        return  # a microbatch count the schedule refuses
    psi = p.param_count / (tp * pp)
    k = {"adam": 12, "sgd": 8, "none": 4}[opt]
    states = {0: 16, 1: 4 + k / dp, 2: 2 + (2 + k) / dp, 3: (4 + k) / dp}[lay.zero] * psi
    if opt != "adam":
        states = {0: 4 + k, 1: 4 + k / dp, 2: 2 + (2 + k) / dp, 3: (4 + k) / dp}[lay.zero] * psi
    assert r.memory["weights"] + r.memory["gradients"] + r.memory["optimizer"] == pytest.approx(states)
    assert r.fits == (sum(r.memory.values()) <= acc.memory_bytes)


def test_the_search_reports_only_layouts_within_capacity_and_its_answers_agree():
    p = hand_profile(params=2_000_000_000, layers=8)
    acc = cluster.Accelerator.custom("x", 24 * GiB, 1e14, 1e12, 1.0)
    c = cluster.Cluster(acc, devices_per_node=4, headroom_bytes=GiB)
    w = cluster.Workload(global_batch=32, seq_len=1024)
    found = cluster.search(p, w, c, cluster.device_counts(4, 4))
    assert found.fitting and found.evaluated > len(found.fitting)  # some do not fit at 1 device
    assert all(sum(r.memory.values()) <= acc.memory_bytes for r in found.fitting)
    assert found.fastest.step_s == min(r.step_s for r in found.fitting)
    assert found.fewest_devices.devices == min(r.devices for r in found.fitting)
    assert found.cheapest.cost_per_million_tokens == min(r.cost_per_million_tokens for r in found.fitting)
    steps = [r.step_s for r in found.front]
    assert steps == sorted(steps, reverse=True) and len({r.devices for r in found.front}) == len(found.front)


def test_engine_configs_read_back():
    lay = cluster.Layout(dp=4, tp=8, pp=2, microbatch_size=2, schedule="interleaved_1f1b", zero=3, recompute="full")
    w = cluster.Workload(global_batch=256, seq_len=4096)
    titan = tomllib.loads(toml_text(to_torchtitan(lay, w)))
    assert titan["parallelism"] == {
        "data_parallel_replicate_degree": 1,
        "data_parallel_shard_degree": 4,
        "tensor_parallel_degree": 8,
        "pipeline_parallel_degree": 2,
        "expert_parallel_degree": 1,
        "context_parallel_degree": 1,
        "enable_sequence_parallel": True,
        "fsdp_reshard_after_forward": "always",
        "pipeline_parallel_schedule": "Interleaved1F1B",
        "pipeline_parallel_microbatch_size": 2,
    }
    assert titan["activation_checkpoint"]["mode"] == "full" and titan["training"]["local_batch_size"] == 64
    ds = json.loads(json.dumps(to_deepspeed(lay, w)))
    # DeepSpeed's rule: train_batch_size = micro batch x accumulation steps x data-parallel size.
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 4
    args = to_megatron(lay, w)
    assert args[args.index("--tensor-model-parallel-size") + 1] == "8"
    assert "--use-distributed-optimizer" in args and "--sequence-parallel" in args


def test_the_command_line_plans_a_small_cluster_and_exports_torchtitan(tmp_path, capsys: pytest.CaptureFixture[str]):
    from cli.main import main

    out = tmp_path / "titan.toml"
    code = main(
        [
            "cluster",
            "hf:llama",
            "--set",
            "num_hidden_layers=2",
            "--global-batch",
            "16",
            "--seq-len",
            "256",
            "--max-nodes",
            "1",
            "--export",
            "torchtitan",
            "--out",
            str(out),
        ]
    )
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert "fewest devices:" in stdout and "fastest:" in stdout
    config = tomllib.loads(out.read_text())
    dims = config["parallelism"]
    assert math.prod(
        [
            dims["data_parallel_replicate_degree"],
            dims["data_parallel_shard_degree"],
            dims["tensor_parallel_degree"],
            dims["pipeline_parallel_degree"],
        ]
    ) in (1, 2, 4, 8)
