"""The host calibration's steps after its ranks return, on made-up measurements: the shared-core
factor (NOTE: [A robust shared-core factor]), the collectives' fits at the slower rank, and the
profile they make."""

from __future__ import annotations

from partitioner.calibration import host
from partitioner.calibration.distributed import EngineCosts
from partitioner.curves import fit_alpha_beta


def test_one_disturbed_repeat_moves_no_shared_core_factor_and_none_falls_below_one():
    alone = [1.0, 1.0, 1.0, 1.0, 1.0]
    busy = [
        {1: alone, 2: [2.0, 2.0, 9.0, 2.0, 2.0], 4: [0.5] * 5},  # repeat 2 met another job
        {2: [2.0, 2.0, 2.0, 2.0, 2.0], 4: [0.5] * 5},
        {4: [0.5] * 5},
        {4: [0.5] * 5},
    ]
    assert host._shared_core_factors(busy) == ((1, 1.0), (2, 2.0), (4, 1.0))


def _rank(collectives, engines, ops=None):
    return host.CalibrationRank({1: [1.0], 2: [1.5]}, engines, ops, collectives, 2e-5 if ops else 0.0)


def test_each_collective_is_fitted_to_the_slower_of_the_two_ranks_that_timed_it():
    sizes = (1e3, 1e6)
    fast = {"all_reduce:2": [(x, 1e-5 + x / 1e10) for x in sizes]}
    slow = {"all_reduce:2": [(x, 2e-5 + x / 1e9) for x in sizes]}
    engines = EngineCosts(handoff={2: [(x, 3e-5 + x / 1e9) for x in sizes]}, barrier={2: 4e-5})
    fits = host._collective_fits([_rank(fast, engines), _rank(slow, EngineCosts(barrier={2: 5e-5}))])
    assert [(k, n) for k, n, _ in fits] == [("all_reduce", 2), ("handoff", 2)]
    assert fits[0][2] == fit_alpha_beta(slow["all_reduce:2"]) != fit_alpha_beta(fast["all_reduce:2"])
    assert fits[1][2] == fit_alpha_beta(engines.handoff[2])  # one rank measured it: its own
    assert host._slowest([engines, EngineCosts(barrier={2: 5e-5})], "barrier") == ((2, 5e-5),)


def test_the_ranks_measurements_make_the_profile():
    ops = {
        "launch": 1e-6,
        "module": 2e-6,
        "backward": 2.5,
        "elementwise": {"gelu": [(1e6, 2e-4), (1e3, 3e-6)]},
        "host_per_op": 4e-6,
        "matmul": {"float32": [(2e6, 2e-4), (2e3, 3e-6)]},
        "copy": [(1e6, 1e-4), (1e3, 2e-6)],
    }
    engines = EngineCosts(action={2: 7e-5}, column={2: 6e-5})
    profile = host._profile("box", [_rank({}, engines, ops), _rank({}, engines)], "gloo", 1.5, 0.0)
    assert (profile.launch_s, profile.host_per_op_s, profile.module_overhead_s) == (1e-6, 4e-6, 2e-6)
    assert profile.copy == ((1e3, 2e-6), (1e6, 1e-4)) and profile.elementwise == (("gelu", ((1e3, 3e-6), (1e6, 2e-4))),)
    assert profile.slowdown == ((1, 1.0), (2, 1.5)) and profile.sharded_module_overhead_s == 2e-5
    assert profile.pipeline_action_s == ((2, 7e-5),) and profile.dtensor_module_s == ((2, 6e-5),)
    assert (profile.training_step_factor, profile.load_average, profile.backend) == (2.5, 1.5, "gloo")
