"""The Plan a cluster page's pure builders (no Streamlit): the Pareto chart, a layout's memory and
time, the layouts table and the engine files, on a small hand-made profile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.builders import cluster_figures
from partitioner import cluster, format_seconds
from partitioner.interop.engines import engine_file
from partitioner.pipeline.steps import step_simulator

GiB = 2**30


def _profile() -> cluster.ModelProfile:
    """A 1 B-parameter, 8-layer model: 2 GFLOP and 100 kB of activations a token."""
    return cluster.ModelProfile(
        name="toy",
        tokens0=1,
        seq0=1,
        weight_bytes=2 * 10**9,
        param_count=10**9,
        element_bytes=2,
        layers=8,
        hidden_bytes_per_token=4096.0,
        kv_bytes_per_token=1e4,
        act_bytes_per_token=1e5,
        flops_per_token=2e9,
        attention_flops_per_token=0.0,
        node_weight_bytes=(2 * 10**9,),
        node_act_bytes=(1e5,),
        node_flops=(2e9,),
        node_attention=(False,),
    )


def _found(kind: str = "training") -> cluster.ClusterPlan:
    work = cluster.Workload(kind, global_batch=32, seq_len=1024)
    return cluster.search(_profile(), work, cluster.cluster("a100-40gb"), cluster.device_counts(8, 4))


@pytest.fixture(scope="module")
def found() -> cluster.ClusterPlan:
    return _found()


def test_pareto_has_the_fastest_at_each_size_coloured_by_cost_on_log_axes(found):
    fig = cluster_figures.pareto_figure(found)
    assert fig.layout.title.text == "Devices against step time (log scales)"
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.layout.xaxis.title.text == "devices (count, log)" and fig.layout.yaxis.title.text == "step time (s, log)"
    line = next(t for t in fig.data if t.name.startswith("fastest at each size"))
    assert list(line.x) == sorted(found.by_devices) and list(line.y) == [r.step_s for r in found.by_devices.values()]
    assert list(line.marker.color) == [r.cost_per_million_tokens for r in found.by_devices.values()]
    assert line.marker.colorbar.title.text == "$ / million tokens"
    names = [t.name for t in fig.data]
    for title, r in (
        ("fewest devices", found.fewest_devices),
        ("fastest", found.fastest),
        ("cheapest", found.cheapest),
    ):
        answer = fig.data[names.index(f"{title}: {r.layout.label()}")]
        assert (answer.x[0], answer.y[0]) == (r.devices, r.step_s)


def test_pareto_thins_the_grey_cloud_to_a_bound_per_size(found):
    per_size = 3
    cloud = cluster_figures.pareto_figure(found, per_size=per_size).data[0]
    sizes = {d: sum(1 for r in found.fitting if r.devices == d) for d in found.by_devices}
    assert len(cloud.x) == sum(min(per_size, n) for n in sizes.values()) < len(found.fitting)
    for d in sizes:  # each size keeps its fastest and its slowest layout
        ys = [y for x, y in zip(cloud.x, cloud.y) if x == d]
        steps = [r.step_s for r in found.fitting if r.devices == d]
        assert min(ys) == min(steps) and max(ys) == max(steps)
    full = cluster_figures.pareto_figure(found, per_size=10**6).data[0]
    assert len(full.x) == len(found.fitting)


def test_inference_pareto_reads_time_to_first_token():
    fig = cluster_figures.pareto_figure(_found("inference"), "time to first token")
    assert fig.layout.yaxis.title.text == "time to first token (s, log)"


def test_memory_bar_stacks_every_kind_against_the_device(found):
    best = found.fastest
    fig = cluster_figures.memory_figure(best, 40 * GiB)
    assert fig.layout.yaxis.title.text == "memory (GiB)" and fig.layout.barmode == "stack"
    assert [bar.name for bar in fig.data] == ["weights", "gradients", "optimizer", "activations", "headroom"]
    assert sum(bar.y[0] for bar in fig.data) * GiB == pytest.approx(sum(best.memory.values()))
    assert fig.layout.shapes[0].y0 == 40  # the device's capacity, in GiB
    assert best.layout.label() in fig.layout.title.text
    inference = _found("inference").fastest
    kinds = [bar.name for bar in cluster_figures.memory_figure(inference, 40 * GiB).data]
    assert kinds == ["weights", "activations", "kv cache", "headroom"]


def test_time_bar_has_one_bar_per_cause_in_seconds(found):
    r = found.fastest
    fig = cluster_figures.time_figure(r)
    assert fig.layout.yaxis.title.text == "time per step (s)" and fig.layout.xaxis.title.text == "cause"
    assert list(fig.data[0].x) == list(r.parts_s) and list(fig.data[0].y) == list(r.parts_s.values())
    assert "Time by cause" in fig.layout.title.text
    inference = cluster_figures.time_figure(_found("inference").fastest, inference=True)
    assert inference.layout.yaxis.title.text == "time (s)" and "prefill compute" in inference.data[0].x


def test_layouts_table_keeps_numbers_as_numbers(found):
    rows = found.best(5)
    table = cluster_figures.layouts_table(rows, 1e12)
    assert list(table["devices"]) == [r.devices for r in rows]
    assert list(table["layout"]) == [r.layout.label() for r in rows]
    for column in ("step_s", "mfu", "memory_gib", "usd_per_million_tokens", "train_days", "train_usd"):
        assert table[column].dtype.kind == "f", column
    assert (table["train_days"] > 0).all() and list(table["limit"]) == [r.limit for r in rows]
    assert table["train_usd"].iloc[0] == pytest.approx(rows[0].cost_per_million_tokens * 1e6)
    assert "train_days" not in cluster_figures.layouts_table(rows).columns


def test_engine_files_parse_back(found):
    layout = cluster.Layout(dp=4, tp=2, pp=2, microbatch_size=2, schedule="1f1b", zero=3, recompute="full")
    work = cluster.Workload(global_batch=32, seq_len=1024)
    name, text, _ = engine_file("torchtitan", layout, work)
    assert name.endswith(".toml") and "data_parallel_shard_degree = 4" in text
    assert 'pipeline_parallel_schedule = "1F1B"' in text
    name, text, _ = engine_file("megatron", layout, work)
    assert text.split()[:4] == ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"]
    name, text, _ = engine_file("deepspeed", layout, work)
    assert json.loads(text)["zero_optimization"]["stage"] == 3 and json.loads(text)["gradient_accumulation_steps"] == 4
    with pytest.raises(ValueError, match="engine must be one of"):
        engine_file("colossal", layout, work)


def test_the_builders_import_no_streamlit():
    code = "import sys, explorer.builders.cluster_figures; print('streamlit' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "False"


def test_an_opened_layout_draws_its_schedule_as_the_pipeline_simulator_does():
    from partitioner.pipeline.simulator import simulate

    p = cluster.ModelProfile(
        name="x",
        tokens0=1,
        seq0=1,
        weight_bytes=8_000_000,
        param_count=4_000_000,
        element_bytes=2,
        layers=4,
        hidden_bytes_per_token=64.0,
        kv_bytes_per_token=0.0,
        act_bytes_per_token=400.0,
        flops_per_token=8e6,
        attention_flops_per_token=0.0,
        node_weight_bytes=(2_000_000,) * 4,
        node_act_bytes=(100.0,) * 4,
        node_flops=(2e6,) * 4,
        node_attention=(False,) * 4,
    )
    c = cluster.Cluster(cluster.Accelerator.custom("t", 2**36, 1e12, 1e11, 1.0), devices_per_node=4)
    sim = step_simulator()
    r = cluster.evaluate(
        p, cluster.Workload(global_batch=8, seq_len=1), c, cluster.Layout(pp=4, microbatch_size=1, schedule="1f1b"), sim
    )
    fig = cluster_figures.layout_timeline(r)
    reference = simulate([r.stage_s[0]] * 4, 8, "1f1b", backward_s=[r.stage_s[1]] * 4)
    assert fig is not None and f"step {format_seconds(reference.step_time_s)}" in fig.layout.title.text
    # no data parallelism: the step is the schedule's, then the optimizer's step
    assert reference.step_time_s + r.parts_s["optimizer step"] == pytest.approx(r.step_s)
    assert r.parts_s["optimizer step"] > 0
    assert sum(len(t.x) for t in fig.data[1:]) == 2 * 4 * 8  # a forward and a backward per stage and microbatch
    flat = cluster.evaluate(p, cluster.Workload(global_batch=8, seq_len=1), c, cluster.Layout(dp=4), sim)
    assert cluster_figures.layout_timeline(flat) is None


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.sampled_from(["gpipe", "1f1b", "interleaved_1f1b"]), st.integers(1, 16))
def test_no_pipeline_rank_holds_more_than_the_planner_checked(pp, schedule, m):
    from partitioner import PartitionError

    p = cluster.ModelProfile(
        name="hand",
        tokens0=1,
        seq0=1,
        weight_bytes=20_000_000,
        param_count=10_000_000,
        element_bytes=2,
        layers=16,
        hidden_bytes_per_token=64.0,
        kv_bytes_per_token=0.0,
        act_bytes_per_token=1600.0,
        flops_per_token=2e7,
        attention_flops_per_token=0.0,
        node_weight_bytes=(20_000_000,),
        node_act_bytes=(1600.0,),
        node_flops=(2e7,),
        node_attention=(False,),
    )
    c = cluster.Cluster(cluster.Accelerator.custom("x", 80 * 2**30, 1e14, 1e12, 1.0), devices_per_node=8)
    w = cluster.Workload(global_batch=m, seq_len=128)
    try:
        r = cluster.evaluate(p, w, c, cluster.Layout(pp=pp, schedule=schedule), step_simulator())
    except PartitionError:
        return  # a microbatch count the schedule refuses
    stash = cluster_figures.rank_stash(r)
    assert stash is not None and len(stash) == pp and max(stash) == stash[0] <= m
    figure = cluster_figures.rank_memory_figure(r, c.accelerator.memory_bytes)
    totals = [sum(trace.y[k] for trace in figure.data) for k in range(pp)]
    assert max(totals) == pytest.approx(r.memory_bytes / 2**30)  # rank 0's is the planner's figure


def test_the_cost_axis_has_round_dollar_ticks(found):
    """Issue 56: the right axis read 0.021, 0.232, 0.443 (Plotly's ticks synced to the left axis)."""
    from explorer.builders.figures import dollars, round_ticks

    assert round_ticks(0.443) == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert round_ticks(1280) == [0.0, 500.0, 1000.0, 1500.0]
    assert round_ticks(0.0) == [0.0, 1.0]
    assert [dollars(v) for v in (0.0, 0.05, 1.5, 1280.0)] == ["$0", "$0.05", "$1.5", "$1,280"]
    fig = cluster_figures.scaling_figure(found)
    axis = fig.layout.yaxis2
    top = max(r.cost_per_million_tokens for r in found.by_devices.values())
    assert axis.tickmode == "array" and axis.tickvals[0] == 0 and axis.tickvals[-1] >= top
    steps = {round(b - a, 9) for a, b in zip(axis.tickvals, axis.tickvals[1:])}
    assert len(steps) == 1 and f"{steps.pop():.0e}"[0] in "125"  # one round step
    assert all(t.startswith("$") for t in axis.ticktext)
