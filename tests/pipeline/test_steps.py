"""One step formula: :func:`partitioner.pipeline.steps.step_slots` (read by ``closed_form``, the
cluster planner and the composed runs' prediction) equals the event simulator for every schedule
the registry says it is exact or checked for, and bounds it for the rest; every other table reads
the registry."""

from __future__ import annotations

import pytest

from partitioner import PartitionError
from partitioner.pipeline.schedules import (
    NO_SCHEDULE,
    SCHEDULES,
    StepForm,
    check_microbatches,
    get_schedule,
    searched_schedules,
    virtual_stages,
)
from partitioner.pipeline.simulator import simulate
from partitioner.pipeline.steps import closed_form, step_slots


def _simulated(schedule: str, pp: int, m: int, ratio: float) -> tuple[float, float]:
    v = get_schedule(schedule).stages_per_rank
    out = simulate([1.0 / v] * (pp * v), m, schedule, backward_s=[ratio / v] * (pp * v))
    return out.step_time_s, out.bubble_fraction


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("pp", [2, 3, 4])
def test_the_one_formula_is_the_simulators_step(schedule, pp):
    form = SCHEDULES[schedule].step_form
    for m in range(1, 13):
        try:
            check_microbatches(schedule, pp, m)
        except PartitionError:
            continue
        step, bubble = _simulated(schedule, pp, m, 2.0)
        ours, our_bubble, _ = closed_form(schedule, pp, m, 2.0)
        assert ours == pytest.approx(step_slots(schedule, pp, m) * 3.0)
        if form == StepForm.BOUND:  # the split backward fills part of the bubble: a bound
            assert ours >= step - 1e-9, (schedule, pp, m)
        else:
            assert ours == pytest.approx(step), (schedule, pp, m)
            assert our_bubble == pytest.approx(bubble), (schedule, pp, m)


def test_flush_slots_are_the_gpipe_papers():
    # Huang et al. 2019: a GPipe step over p stages and m microbatches lasts m + p - 1 slots.
    assert [step_slots("gpipe", p, m) for p, m in ((4, 8), (1, 5), (8, 1))] == [11, 5, 8]
    assert closed_form("gpipe", 4, 8, 2.0)[1] == pytest.approx(3 / 11)  # TORCH_NOTES: 0.273 for p=4, m=8


def test_the_composed_prediction_prices_the_same_slots():
    """The composed runs' prediction (cluster/run/predict.py) reads the bubble from step_slots."""
    from partitioner.cluster.layouts import Layout
    from partitioner.cluster.run.pipelined import run_schedule

    assert run_schedule(Layout(pp=2, schedule=NO_SCHEDULE)) is SCHEDULES["gpipe"]
    assert run_schedule(Layout(pp=2, schedule="1f1b")) is SCHEDULES["1f1b"]
    import inspect

    from partitioner.cluster.run import predict

    source = inspect.getsource(predict)
    assert "step_slots(" in source and "m + pp - 1" not in source


def test_every_other_table_reads_the_registry():
    from partitioner.cluster import layout_search as search
    from partitioner.cluster.layout_types import SCHEDULE_CHOICES
    from partitioner.cluster.layouts import Layout, Workload
    from partitioner.interop.engines import to_torchtitan
    from partitioner.pipeline.runner import RUNNABLE

    assert SCHEDULE_CHOICES == (NO_SCHEDULE, *SCHEDULES)
    assert search.SCHEDULES == tuple(s.name for s in searched_schedules())
    assert search.SCHEDULES[:2] == ("1f1b", "gpipe")  # ties go to 1F1B: the same step, less stashed
    assert set(RUNNABLE) == {n for n, s in SCHEDULES.items() if s.runs}
    for name, record in SCHEDULES.items():
        config = to_torchtitan(Layout(pp=2, schedule=name), Workload(global_batch=8))
        assert config["parallelism"]["pipeline_parallel_schedule"] == record.torch_name
    assert virtual_stages("interleaved_1f1b", 4) == 4 and virtual_stages("zero_bubble", 4) == 2
    assert virtual_stages(NO_SCHEDULE) == 1 == virtual_stages("gpipe", 4)
