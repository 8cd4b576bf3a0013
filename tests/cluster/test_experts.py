"""Expert parallelism in the cluster planner: the experts found in a traced mixture of experts
(checked against the model's own parameters), their memory split over ep and ZeRO's dp / ep
group, the all-to-alls priced by hand, and the layouts the search offers."""

from __future__ import annotations

import dataclasses

import pytest
import tiny_hf
from cluster_helpers import hand_profile

import partitioner
import sample_models
from partitioner import PartitionError, cluster
from partitioner.cluster.layouts import all_to_all_s, ring_allreduce_s
from partitioner.interop.engines import to_deepspeed, to_megatron, to_torchtitan
from partitioner.pipeline.steps import step_simulator

GiB = 2**30
TINY = {**tiny_hf.DECODER, "num_local_experts": 4, "num_experts_per_tok": 2}


def test_the_profile_finds_the_experts_the_model_has():
    module, inputs, kwargs = sample_models.load("hf:mixtral", overrides=TINY)
    prof = cluster.profile(partitioner.trace(module, inputs, example_kwargs=kwargs))
    experts = sum(p.numel() for n, p in module.named_parameters() if ".experts." in n)
    assert prof.expert_param_count == experts > 0
    assert (prof.experts, prof.experts_per_token, prof.moe_layers) == (
        module.config.num_local_experts,
        module.config.num_experts_per_tok,
        module.config.num_hidden_layers,
    )


def test_a_dense_model_has_no_experts_and_refuses_ep():
    module, inputs, kwargs = sample_models.load(
        "hf:llama", overrides={k: v for k, v in TINY.items() if "expert" not in k}
    )
    prof = cluster.profile(partitioner.trace(module, inputs, example_kwargs=kwargs))
    assert (prof.expert_param_count, prof.experts, prof.moe_layers) == (0, 0, 0)
    w = cluster.Workload(global_batch=8, seq_len=16)
    with pytest.raises(PartitionError, match="ep2 must divide the experts"):
        cluster.evaluate(prof, w, cluster.cluster("h100-80gb"), cluster.Layout(dp=2, ep=2), step_simulator())


def moe_profile() -> cluster.ModelProfile:
    """The hand profile with 3/4 of its parameters in 8 experts of 2 MoE layers, top-2."""
    p = hand_profile(params=1_000_000, layers=2)
    return dataclasses.replace(p, expert_param_count=750_000, experts=8, experts_per_token=2, moe_layers=2)


ACC = cluster.Accelerator.custom("toy", 64 * GiB, 1e12, 1e11, 2.0)
INTRA, INTER = cluster.Link("fast", 1e10, 1e-6), cluster.Link("slow", 1e9, 1e-5)
TOY = cluster.Cluster(ACC, devices_per_node=4, intra=INTRA, inter=INTER, headroom_bytes=GiB)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_expert_states_split_over_ep_and_zero_over_dp_over_ep(zero):
    p = moe_profile()
    w = cluster.Workload(global_batch=8, seq_len=1)
    r = cluster.evaluate(p, w, TOY, cluster.Layout(dp=4, microbatch_size=2, zero=zero, ep=2), step_simulator())
    dense, expert = 250_000, 750_000 / 2  # experts over ep = 2; ZeRO over dp = 4 and dp / ep = 2
    shard = {0: (1, 1, 1), 1: (1, 1, 0), 2: (1, 0, 0), 3: (0, 0, 0)}[zero]  # 0: sharded
    for kind, per, i in (("weights", 2, 0), ("gradients", 2, 1), ("optimizer", 12, 2)):
        expected = per * (dense / (1 if shard[i] else 4) + expert / (1 if shard[i] else 2))
        assert r.memory[kind] == pytest.approx(expected)


def test_the_all_to_alls_and_the_expert_gradients_by_hand():
    p = moe_profile()
    w = cluster.Workload(global_batch=8, seq_len=1)
    sim = step_simulator()
    base = cluster.evaluate(p, w, TOY, cluster.Layout(dp=4, microbatch_size=2), sim)
    r = cluster.evaluate(p, w, TOY, cluster.Layout(dp=4, microbatch_size=2, ep=4), sim)
    # 2 tokens a microbatch, 64 B of hidden state each, sent to 2 experts and back in each of the
    # 2 MoE layers, forward and backward; ep = 4 fits in the node.
    exchange = 2 * 2 * all_to_all_s(2 * 64 * 2, 4, 1e10, 1e-6)
    assert r.parts_s["expert all-to-all"] == pytest.approx(base.microbatches * 2 * exchange)
    assert r.parts_s["compute"] == pytest.approx(base.parts_s["compute"])
    # Gradients: dense over dp = 4, experts over dp / ep = 1 (nothing to reduce), in the node.
    dp_s = ring_allreduce_s(2 * 250_000, 4, 1e10, 1e-6)
    bwd = 2 * p.forward_seconds(2, 1, ACC)
    assert r.parts_s["gradient reduction (exposed)"] == pytest.approx(max(0.0, dp_s - bwd))
    assert r.memory["weights"] < base.memory["weights"]


def test_the_search_offers_every_ep_that_divides_and_only_those():
    p = moe_profile()
    w = cluster.Workload(global_batch=16, seq_len=1)
    found = cluster.search(p, w, TOY, [8])
    eps = {(r.layout.dp, r.layout.ep) for r in found.fitting}
    assert {ep for _, ep in eps} == {1, 2, 4, 8}
    assert all(dp % ep == 0 for dp, ep in eps)


def test_the_engines_take_the_expert_parallel_degree():
    lay, w = cluster.Layout(dp=8, tp=2, ep=4), cluster.Workload(global_batch=64, seq_len=128)
    assert to_torchtitan(lay, w)["parallelism"]["expert_parallel_degree"] == 4
    args = to_megatron(lay, w)
    assert args[args.index("--expert-model-parallel-size") + 1] == "4"
    assert "ep_size=4" in to_deepspeed(lay, w)["comment"]


def test_torchtitans_expert_mesh_rule_is_kept_or_said():
    """torchtitan places the experts inside data_parallel_shard x tensor_parallel (its
    ParallelismConfig: dp_shard x cp x tp == expert FSDP x ep)."""
    from partitioner.interop.engines import engine_file

    w = cluster.Workload(global_batch=64, seq_len=128)
    for zero in (2, 3):
        par = to_torchtitan(cluster.Layout(dp=8, tp=2, ep=8, zero=zero), w)["parallelism"]
        assert par["data_parallel_shard_degree"] * par["tensor_parallel_degree"] % par["expert_parallel_degree"] == 0
    replicated = cluster.Layout(dp=8, tp=2, ep=8, zero=1)
    assert "must divide by ep 8" in to_torchtitan(replicated, w)["note"]
    assert engine_file("torchtitan-args", replicated, w)[1].startswith("# torchtitan has no ZeRO-1")
