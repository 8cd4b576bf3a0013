"""What brings predictions toward measured runs: one statistic for runs and calibration, the
terms measured in place (barrier, hand-off, DTensor's dispatch, the training step's factor) kept
by the profile and used by the predictions, and the composed step's parts. No timing here: the
terms are given, and the tests check they are added where they belong."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
import torch

import partitioner
import sample_models
from examples import host_profile
from partitioner.cluster import Layout
from partitioner.cluster.run.compose import linear_pairs_plan
from partitioner.cluster.run.predict import composed_step
from partitioner.cost.runs import tp_forward
from partitioner.device_profile import AlphaBeta, DeviceProfile, load_profile
from partitioner.devices import with_profile
from partitioner.processes import timing
from partitioner.sharding import tensor_parallel


def _profile(**changes: object) -> DeviceProfile:
    base = host_profile(
        collectives=(
            ("all_reduce", 2, AlphaBeta(50e-6, 1e9)),
            ("dtensor_all_reduce", 2, AlphaBeta(300e-6, 1e8)),
            ("handoff", 2, AlphaBeta(120e-6, 1e9)),
            ("p2p", 2, AlphaBeta(20e-6, 2e9)),
        ),
        slowdown=((1, 1.0), (2, 1.5), (4, 3.0)),
        barrier_s=((2, 4e-4), (4, 2e-3)),
        dtensor_module_s=((2, 2.5e-4), (4, 6e-4)),
        training_step_factor=2.7,
        pipeline_action_s=((2, 5e-4),),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_runs_and_calibration_reduce_repeats_with_one_statistic():
    from partitioner.calibration import distributed, loops
    from partitioner.cluster.run import records as _records
    from partitioner.pipeline import runner
    from partitioner.runtime import walk
    from partitioner.sharding import tp_run

    for module in (walk, runner, _records, tp_run, distributed, loops):
        assert module.step_seconds is timing.step_seconds, module.__name__
    assert timing.STATISTIC == "median"
    times = [0.9, 0.3, 0.5, 4.0]  # the best (0.3) would sit 30 % below what calibration reports
    assert timing.step_seconds(times) == statistics.median(times) == 0.7
    assert timing.median_by_key([{"a": 1.0, "b": 5.0}, {"a": 3.0}, {"a": 2.0}]) == {"a": 2.0, "b": 5.0}


def test_the_profile_keeps_the_terms_measured_in_place(tmp_path):
    profile = _profile()
    assert load_profile(profile.save(tmp_path / "box.json")) == profile
    assert profile.barrier_for(2) == 4e-4 and profile.barrier_for(3) == 2e-3 and profile.barrier_for(1) == 0.0
    assert profile.dtensor_module_for(4) == 6e-4
    assert profile.link == AlphaBeta(120e-6, 1e9)  # the hand-off between computing ranks, over the ping-pong
    older = _profile(dtensor_module_s=(), sharded_module_overhead_s=1e-4)
    assert older.dtensor_module_for(4) == pytest.approx(1e-4 * 3.0)  # one rank's figure, slowed as compute is


def test_the_fx_walk_prediction_adds_the_measured_barrier():
    from partitioner.runtime.execute import predicted_walk_s

    model, inputs = sample_models.build("mlp", n_layer=4, hidden=32, in_features=32, out_features=32, batch_size=8)
    graph = partitioner.trace(model, inputs)
    devices = with_profile(partitioner.parse_devices(f"2x{graph.total_size_bytes}B"), _profile())
    plan = partitioner.partition(graph, devices, mode="size_based", force_partition=True)
    without = with_profile(plan.devices, _profile(barrier_s=()))
    base = predicted_walk_s(dataclasses.replace(plan, devices=tuple(without)), graph, 2)
    assert predicted_walk_s(plan, graph, 2) == pytest.approx(base + 4e-4)


@pytest.fixture(scope="module")
def small_mlp():
    model, inputs = sample_models.build("mlp", n_layer=4, hidden=32, in_features=32, out_features=32, batch_size=8)
    return model, inputs, partitioner.trace(model, inputs)


def test_the_dtensor_dispatch_term_is_in_the_tensor_parallel_prediction(small_mlp):
    _, _, graph = small_mlp
    plan = tensor_parallel.tp_plan(graph, {"layers.0.weight": "2,1", "layers.1.weight": "1,2"}, 2)
    with_dispatch = tp_forward(graph, plan, _profile())
    without = tp_forward(graph, plan, _profile(dtensor_module_s=((2, 0.0),)))
    # two sharded modules, one all-reduce: the row-parallel call's dispatch is inside the
    # all-reduce's fit, so one module's dispatch is charged on its own
    assert with_dispatch.part("dtensor dispatch") == pytest.approx(2.5e-4)
    assert with_dispatch.total_s - without.total_s == pytest.approx(2.5e-4)
    assert with_dispatch.total_s == pytest.approx(sum(s for _, s in with_dispatch.parts))
    (reduce_s,) = [s for name, s in with_dispatch.parts if name.startswith("all_reduce")]
    assert reduce_s == pytest.approx(_profile().collective_s("dtensor_all_reduce", 8 * 32 * 4, 2))


def test_a_composed_step_is_split_into_its_parts(small_mlp):
    model, _, graph = small_mlp
    profile = _profile()
    pairs = linear_pairs_plan(model, 2)
    tp_only = composed_step(graph, Layout(tp=2, microbatch_size=4), pairs, profile, batch=8)
    assert tp_only.total_s == pytest.approx(sum(s for _, s in tp_only.parts))
    # 2 microbatches x 2 column-parallel Linears x (forward + backward) dispatches at 2 ranks
    assert tp_only.part("dtensor dispatch") == pytest.approx(2 * 2 * 2 * 2.5e-4)
    assert tp_only.part("all_reduce tp forward") > 0 and tp_only.part("all_reduce tp backward") > 0
    mixed = composed_step(graph, Layout(dp=2, tp=2, microbatch_size=4), pairs, profile, batch=8)
    sync = mixed.part("all_reduce gradients dp")
    assert sync == pytest.approx(
        sum(
            profile.collective_s("all_reduce", b, 2)
            for b in (32 * 32 * 4 // 2, 32 * 4 // 2, 32 * 32 * 4 // 2, 32 * 4) * 2
        )
    )
    piped = composed_step(graph, Layout(pp=2, tp=2, microbatch_size=2, schedule="gpipe"), pairs, profile, batch=8)
    assert piped.part("bubble") > 0 and piped.part("pipeline actions") == pytest.approx(2 * (4 + 1) * 5e-4)
    more = composed_step(
        graph,
        Layout(pp=2, tp=2, microbatch_size=2, schedule="gpipe"),
        pairs,
        _profile(training_step_factor=5.4),
        batch=8,
    )
    assert more.part("compute") == pytest.approx(2 * piped.part("compute"))  # the measured factor scales it


@pytest.mark.slow
def test_check_layout_puts_a_real_two_by_two_step_beside_its_parts(small_mlp):
    from partitioner.cluster.run.checked import END_TO_END, REST, SYNC, check_layout

    model, inputs, _ = small_mlp
    check = check_layout(model, inputs, Layout(dp=2, tp=2, microbatch_size=2), profile=_profile(), timeout_s=240)
    assert check.run.outputs_equal and check.run.gradients_equal
    names = [p.name for p in check.parts]
    assert names[-3:] == [REST, SYNC, END_TO_END]
    assert check.parts[-1].measured_s == check.run.step_s and check.parts[-1].predicted_s == check.predicted.total_s
    sync = check.parts[-2]
    assert sync.measured_s is not None and 0 < sync.measured_s < check.run.step_s
    assert check.to_dict()["parts"][-1]["name"] == END_TO_END


def test_an_op_with_a_measured_curve_is_priced_by_it_not_by_the_copy_curve(tmp_path):
    gelu = ((1e3, 5e-6), (1e6, 5e-4))
    profile = _profile(elementwise=(("gelu", gelu), ("layer_norm", gelu)))
    assert profile.op_seconds(0, 1e6, op="call_function", target="torch._C._nn.gelu") == pytest.approx((5e-4, 5e-4))
    # a module is known by its type name: a call_module GELU pays the module call on top
    assert profile.op_seconds(0, 1e6, op="call_module", target="act", kind="GELU")[0] == pytest.approx(5e-4 + 2e-6)
    assert profile.op_seconds(0, 1e6, op="call_module", target="ln", kind="LayerNorm")[0] == pytest.approx(5e-4 + 2e-6)
    plain = profile.op_seconds(0, 1e6, op="call_function", target="relu")
    assert plain[0] == pytest.approx(1e-6 + 1e6 / profile.bandwidth_bytes_per_s(1e6))
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU())
    graph = partitioner.trace(model, (torch.randn(4, 16),))
    from partitioner.cost.measured import profile_latencies

    (v,) = [i for i, n in enumerate(graph.nodes) if n.op == "call_module" and n.target == "1"]
    moved = graph.activation_bytes(v)
    assert profile_latencies(graph, profile)[v][0] == pytest.approx(
        profile.op_seconds(0, moved, op="call_module", target="1", kind="GELU")[0]
    )
    assert load_profile(profile.save(tmp_path / "p.json")) == profile


def test_the_in_model_op_overhead_is_added_to_every_op(tmp_path):
    plain, inside = _profile(), _profile(host_per_op_s=4e-6)
    for args in (
        (0, 0, None, "call_method", "transpose"),
        (2e6, 1e4, None, "call_module", "fc"),
        (0, 1e6, None, "call_function", "relu"),
    ):
        (m0, c0), (m1, c1) = plain.op_seconds(*args), inside.op_seconds(*args)
        assert m1 - m0 == pytest.approx(3e-6) and c1 - c0 == pytest.approx(3e-6)  # beyond the tight loop's 1 us
    assert load_profile(inside.save(tmp_path / "p.json")) == inside


def test_engine_costs_are_a_typed_record_read_by_field():
    import dataclasses

    from partitioner.calibration.distributed import EngineCosts

    costs = EngineCosts(barrier={2: 4e-4}, row={2: [(4096.0, 1e-4)]})
    assert costs.barrier[2] == 4e-4 and costs.row == {2: [(4096.0, 1e-4)]}  # the calibration reads by field
    assert costs.action == {} and costs.concurrent_all_reduce == {}
    assert not hasattr(costs, "__getitem__")  # no reading by string keys
    with pytest.raises(dataclasses.FrozenInstanceError):
        costs.barrier = {}  # type: ignore[misc]
