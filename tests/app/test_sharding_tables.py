"""The Sharding page's tables without Streamlit: parameter bytes as torch counts them
(``numel() * element_size()``), the spec read back from the edited table, the collectives a spec
adds, the memory headline and a real run's verdict."""

from __future__ import annotations

from types import SimpleNamespace

import partitioner
from explorer.builders import sharding_tables
from partitioner import format_bytes, sharding
from partitioner.sharding import tensor_parallel


def test_the_parameter_table_lists_the_sharded_first_with_torchs_bytes(mlp):
    table = sharding_tables.parameter_table(mlp, {"layers.2.weight": "2,1"})
    assert table["parameter"].iloc[0] == "layers.2.weight" and table["spec"].iloc[0] == "2,1"
    torch_params = dict(mlp.graph_module.named_parameters())
    assert sorted(table["parameter"]) == sorted(torch_params)
    for _, row in table.iterrows():
        p = torch_params[row["parameter"]]
        assert row["bytes"] == format_bytes(p.numel() * p.element_size())
        assert row["shape"] == str(list(p.shape))


def test_the_spec_is_read_back_from_the_edited_rows():
    rows = [
        {"parameter": "a", "spec": " 2,1 "},
        {"parameter": "b", "spec": ""},
        {"parameter": "c", "spec": None},
        {"parameter": "d", "spec": float("nan")},  # a cell the editor left empty
    ]
    assert sharding_tables.spec_from_rows(rows) == {"a": "2,1"}


def test_collectives_and_memory_of_a_spec(mlp):
    devices = partitioner.parse_devices("2x24000B")
    plan = tensor_parallel.tp_plan(mlp, {"layers.0.weight": "2,1"}, 2, 25e9)
    table = sharding_tables.collectives_table(plan)
    assert len(table) == len(plan.collectives) >= 1
    assert table["Collective"].tolist() == [c.kind for c in plan.collectives]
    empty = sharding_tables.collectives_table(tensor_parallel.tp_plan(mlp, {}, 2, 25e9))
    assert empty.empty and list(empty.columns) == list(table.columns)
    before = sharding.device_memory(mlp, devices, {})
    after = sharding.device_memory(mlp, devices, plan.spec)
    head = sharding_tables.memory_headline(devices, before, after)
    assert head.largest_bytes == max(after.values())
    assert head.saved_bytes == max(before.values()) - max(after.values()) > 0
    assert head.over == ()  # 22,976 B a device once sharded, under 24,000
    unsharded = sharding_tables.memory_headline(devices, before, before)  # 25,088 B each: both over
    assert unsharded.over == tuple(d.name for d in devices) and unsharded.saved_bytes == 0


def test_a_run_verdict_says_what_differs():
    run = SimpleNamespace(outputs_equal=True, counts_match=False, max_abs_diff=3e-8)
    good, words = sharding_tables.run_verdict(run)
    assert not good and "Outputs equal" in words and "not as predicted" in words and "3e-08" in words
    assert "{counted}" in words  # the page puts the escaped counts there


def test_training_counts_the_gradients_and_adams_state_on_every_device(mlp):
    """Issue 56: the toggle counted no training memory. fp32 Adam: 4 copies of each device's
    weights (weights, gradients, two states) beside the same activations."""
    devices = partitioner.parse_devices("2x24000B")
    spec = {"layers.0.weight": "2,1"}
    before = sharding.device_memory(mlp, devices, {})
    after = sharding.device_memory(mlp, devices, spec)
    copies = sharding_tables.training_copies(mlp)
    assert copies == 4  # the sample is traced in fp32
    weights = sum(p.numel() * p.element_size() for p in mlp.graph_module.parameters())
    act = min(before.values()) - weights
    trained = sharding_tables.with_training_state(mlp, before, after, copies)
    assert trained == {d: act + 4 * (v - act) for d, v in after.items()}
    assert sharding_tables.with_training_state(mlp, before, before, copies) == {d: act + 4 * weights for d in before}
    # the devices a suggestion is asked with: a spec fits them exactly when it trains on the real ones
    asked = sharding_tables.devices_for_training(mlp, devices, before, copies)
    for d, a in zip(devices, asked):
        fits_asked = after[d.logical_id] <= a.memory_bytes
        assert fits_asked == (trained[d.logical_id] <= d.memory_bytes + 3)  # to the byte, less rounding
