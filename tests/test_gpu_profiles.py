"""The GPU presets' profiles against the kernel curves measured on real cards (an H100 80GB HBM3
and an H200, torch 2.11 + CUDA 13, CUDA events), and the hardware table every page reads."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

import partitioner
from partitioner import cluster, kernels
from partitioner.device_profile import DeviceProfile, find_profile
from partitioner.errors import DeviceSpecError, PartitionError
from partitioner.gpu_kernels_json import gpu_kernels_from_json
from partitioner.hardware import ACCELERATOR_NAMES, HARDWARE
from partitioner.kernels import KernelOp
from partitioner.profiles import MEASURED, gpu_kernels, gpu_profile
from partitioner.profiles.build import from_rows

CARRIED = Path(partitioner.__file__).parent / "profiles"
# sha256 of the measured files as recorded beside the script that measured them (h100-80gb-hbm3.jsonl,
# h200.jsonl): the package carries them byte for byte.
MEASURED_SHA256 = {
    "h100-80gb": "4f0460bae763ceaaaa409dd29b5c999e9be3f32387868031030895950ea968af",
    "h200-141gb": "9294284b5d3f0a58ed4c761aa1321f8592282cf884182afa6259b2bde2057def",
}


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (CARRIED / MEASURED[name]).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_the_package_carries_the_measured_curves_unchanged(name):
    assert hashlib.sha256((CARRIED / MEASURED[name]).read_bytes()).hexdigest() == MEASURED_SHA256[name]


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_a_recorded_profile_reproduces_its_own_curves_within_2_percent(name):
    gpu = gpu_kernels(name)
    checked = 0
    rows = _rows(name)
    repeated: dict[tuple, list[float]] = {}  # one shape measured twice (F.linear and a @ a): their mean
    for row in rows:
        if row["kind"] == "matmul":
            repeated.setdefault((row["dtype"], row["m"], row["k"], row["n"]), []).append(row["s"])
    for row in rows:
        kind = row["kind"]
        if kind == "matmul" and row["dtype"] != "tf32":
            got = gpu.timed_matmul_s(row["m"], row["k"], row["n"], row["dtype"])
        elif kind == "elementwise":
            got = gpu.timed_elementwise_s(row["op"], row["bytes"])
        elif kind == "attention":
            got = gpu.timed_attention_s(row["heads"], row["head_dim"], row["seq"], row["causal"])
        else:
            continue
        expected = row["s"]
        if kind == "matmul":
            same = repeated[(row["dtype"], row["m"], row["k"], row["n"])]
            expected = sum(same) / len(same)
        assert got == pytest.approx(expected, rel=0.02), row
        checked += 1
    assert checked > 200


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_between_measured_shapes_the_curves_stay_between_their_neighbours(name):
    gpu = gpu_kernels(name)
    for m0, m1 in ((64, 256), (256, 1024), (1024, 4096)):
        lo, hi = gpu.timed_matmul_s(m0, 4096, 4096, "bfloat16"), gpu.timed_matmul_s(m1, 4096, 4096, "bfloat16")
        mid = gpu.timed_matmul_s(math.sqrt(m0 * m1), 4096, 4096, "bfloat16")
        assert min(lo, hi) <= mid <= max(lo, hi)
    # A larger problem never takes less time than a smaller one of the same shape beyond the curve.
    assert gpu.timed_matmul_s(65536, 4096, 4096) == pytest.approx(4 * gpu.timed_matmul_s(16384, 4096, 4096))


@pytest.mark.parametrize("name", sorted(MEASURED))
@pytest.mark.parametrize("causal", [True, False])
def test_attention_beyond_the_longest_measured_sequence_keeps_its_flop_rate(name, causal):
    """A sequence's attention does s^2 work (torch's own FLOP count of SDPA): past the longest
    sequence measured (16k), the time keeps the last point's FLOP rate, so Llama 3's 131k-token
    context is not priced at 16k's time a token (8x too fast)."""
    from torch.utils.flop_counter import sdpa_flop_count

    gpu = gpu_kernels(name)
    rows = [r for r in _rows(name) if r["kind"] == "attention" and r["causal"] == causal]
    last = max(rows, key=lambda r: r["seq"])

    def rate(seq: int) -> float:
        shape = (1, last["heads"], seq, last["head_dim"])
        flops = sdpa_flop_count(shape, shape, shape) / (2 if causal else 1)  # causal: half the scores
        return flops / gpu.timed_attention_s(last["heads"], last["head_dim"], seq, causal)

    at_last = rate(last["seq"])
    assert at_last == pytest.approx(last["tflops"] * 1e12, rel=0.02)  # the row's own figure
    for seq in (2 * last["seq"], 8 * last["seq"]):
        assert rate(seq) == pytest.approx(at_last, rel=1e-9)


def test_the_measured_figures_stay_under_the_datasheet():
    for name in MEASURED:
        card, gpu = HARDWARE[name], gpu_kernels(name)
        assert 0.5 * card.peak_for("bfloat16") < gpu.best_flops("bfloat16") < card.peak_for("bfloat16")
        assert (
            0.5 * card.memory_bandwidth_bytes_per_s < gpu.best_bandwidth_bytes_per_s < card.memory_bandwidth_bytes_per_s
        )
        # eager fp32 (TF32 off, torch's default) runs on the fp32 units: under their datasheet figure
        assert gpu.best_flops("float32") < card.peak_for("float32") < 0.1 * card.peak_for("bfloat16")


def test_every_card_of_the_table_is_a_device_type_everywhere():
    for name in HARDWARE:
        devices = partitioner.parse_devices(f"2x{name}")
        assert [d.kind for d in devices] == [name, name]
        assert devices[0].memory_bytes == HARDWARE[name].memory_bytes
        assert partitioner.Device.from_dict(devices[0].to_dict()) == devices[0]
        if HARDWARE[name].accelerator:
            assert devices[0].profile is not None and devices[0].profile.gpu is not None
            c = cluster.cluster(name)
            assert c.accelerator.kernels is not None and c.intra.name == HARDWARE[name].link
    assert set(ACCELERATOR_NAMES) == set(cluster.ACCELERATORS)
    assert "h200-141gb" in partitioner.PRESETS and "v100-16gb" in cluster.ACCELERATORS


def test_cards_nobody_measured_say_their_curves_are_derived():
    for name in ACCELERATOR_NAMES:
        gpu = gpu_kernels(name)
        if name in MEASURED:
            assert gpu.derived_from == "" and "measured on NVIDIA" in gpu_profile(name).assumes
        else:
            assert gpu.derived_from.startswith("derived from the measured")
            assert "derived" in cluster.cluster(name).accelerator.assumes
    # The derivation follows the datasheet: an A100's large bf16 matmul is the H100's time x 989/312.
    a100, h100 = gpu_kernels("a100-80gb"), gpu_kernels("h100-80gb")
    ratio = a100.kernel_s(KernelOp("matmul", "bfloat16", 16384, 8192, 8192)) / h100.kernel_s(
        KernelOp("matmul", "bfloat16", 16384, 8192, 8192)
    )
    assert ratio == pytest.approx(989 / 312, rel=0.1)


def test_each_dtype_runs_at_its_own_speed():
    gpu = gpu_kernels("h100-80gb")
    big = dict(m=4096, k=8192, n=8192)
    bf16 = gpu.kernel_s(KernelOp("matmul", "bfloat16", **big))
    fp32 = gpu.kernel_s(KernelOp("matmul", "float32", **big))
    assert 10 < fp32 / bf16 < 20  # 50 against 730 TFLOP/s measured; the datasheet's 67 against 989


def test_the_eager_queue_is_launch_bound_on_small_ops_and_gpu_bound_on_large_ones():
    host = [10e-6] * 100
    assert sum(kernels.eager_increments(host, [1e-6] * 100)) == pytest.approx(100 * 10e-6 + 1e-6)
    assert sum(kernels.eager_increments(host, [1e-3] * 100)) == pytest.approx(10e-6 + 100 * 1e-3)
    # a large kernel lets the host run ahead: the small ops after it cost nothing more
    mixed = kernels.eager_increments([10e-6] * 11, [5e-3] + [1e-6] * 10)
    assert sum(mixed) == pytest.approx(10e-6 + 5e-3 + 10 * 1e-6)


def test_a_small_forward_is_priced_by_its_launches_and_the_engine_says_so():
    from sample_models._loading import load, trace_loaded

    ov = dict(num_hidden_layers=2, seq_len=128, dtype="bf16")
    graph = trace_loaded("hf:llama-3-8b", ov, load("hf:llama-3-8b", ov), "llama")
    eager = partitioner.parse_devices("1xh100-80gb")
    plan = partitioner.partition(graph, eager, "size_based")
    ops = len(graph.op_indices)
    host = eager[0].profile.gpu.host_per_op_s
    assert plan.latency_s >= ops * host  # every op is launched from Python
    graphs = [partitioner.Device.from_dict({**eager[0].to_dict(), "profile": "h100-80gb@graphs"})]
    fast = partitioner.partition(graph, graphs, "size_based")
    assert fast.latency_s < 0.5 * plan.latency_s
    # the weights must still be read once: no engine beats the memory roof
    assert fast.latency_s > graph.parameter_bytes * 0.5 / HARDWARE["h100-80gb"].memory_bandwidth_bytes_per_s


def test_the_planner_gives_the_same_answer_whatever_shape_the_model_was_traced_at():
    from partitioner.cluster.run.compose import parse_layout
    from partitioner.pipeline.steps import step_simulator
    from sample_models._loading import load, trace_loaded

    steps, decodes = [], []
    for batch, seq in ((1, 32), (1, 512), (8, 2048)):
        ov = dict(num_hidden_layers=4, batch_size=batch, seq_len=seq)
        p = cluster.profile(trace_loaded("hf:llama-3-8b", ov, load("hf:llama-3-8b", ov), "llama"))
        c = cluster.cluster("h100-80gb")
        r = cluster.evaluate(
            p, cluster.Workload(global_batch=8, seq_len=2048), c, parse_layout("dp1 tp1 pp1 mb1"), step_simulator()
        )
        steps.append(r.step_s)
        inf = cluster.evaluate(
            p,
            cluster.Workload(kind="inference", global_batch=1, seq_len=2048),
            c,
            parse_layout("dp1 tp1 pp1"),
            step_simulator(),
        )
        decodes.append(inf.extra["seconds_per_token"])
    for values in (steps, decodes):
        assert max(values) <= 1.05 * min(values), values


def test_hostile_profiles_are_refused_whole_and_fast(tmp_path):
    good = gpu_profile("h100-80gb").to_dict()
    for field, value in (("training_step_factor", float("nan")), ("training_step_factor", -1.0), ("cores", -4)):
        with pytest.raises(DeviceSpecError, match=field):
            DeviceProfile.from_dict({**good, field: value})
    bad = {**good, "collectives": [{"kind": "p2p", "processes": 2, "latency_s": 1e-6, "bandwidth_bytes_per_s": -1e9}]}
    with pytest.raises(DeviceSpecError, match="bandwidth"):
        DeviceProfile.from_dict(bad)
    with pytest.raises(DeviceSpecError, match="points"):  # its length read, never a point of it
        DeviceProfile.from_dict({**good, "copy": _Unread([[1.0, 1e-6]] * 50_000)})
    with pytest.raises(DeviceSpecError, match="launch_s"):
        gpu_kernels_from_json({**good["gpu"], "launch_s": float("inf")})


class _Unread(list):
    """A list whose values must not be read (a refusal by its length reads none)."""

    def __iter__(self):
        raise AssertionError("a value of an over-long list was read")

    def __getitem__(self, index):
        raise AssertionError("a value of an over-long list was read")


class _Walked(tuple):
    """A curve that counts the walks over its points (a lookup by bisection walks none)."""

    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()


def test_a_long_curve_is_interpolated_in_logarithmic_time():
    curve = _Walked((float(i + 1), 1e-6 * (i + 1)) for i in range(9000))
    profile = DeviceProfile("long", 2**30, 1e-6, 0.0, (("float32", curve),), curve)
    _Walked.walks = 0
    for x in range(1, 20000, 7):
        profile.bandwidth_bytes_per_s(float(x))
    assert _Walked.walks <= 1  # its x values read once, then a bisection a lookup (O(log n))


def test_the_cache_switch_off_reads_no_profile(monkeypatch, tmp_path):
    folder = tmp_path / "profiles"
    gpu_profile("h100-80gb").save(folder / "mine.json")
    monkeypatch.setenv("PARTITION_EXPLORER_CACHE", str(tmp_path))
    assert find_profile("mine") is not None
    monkeypatch.setenv("PARTITION_EXPLORER_CACHE", "off")
    assert find_profile("mine") is None
    with pytest.raises(DeviceSpecError, match="nor a measured profile"):
        partitioner.parse_devices("2xmine")


@pytest.mark.slow
def test_gpu_calibration_measures_the_carried_format(tmp_path):
    """The measurement behind ``calibrate --gpu`` (run on this CPU with small shapes): rows of the
    carried format, a profile that round-trips and is a device type."""
    from partitioner.runtime.calibrate_gpu import calibrate_gpu

    profile = calibrate_gpu("here", timeout_s=300, device="cpu", quick=True)
    assert profile.gpu is not None and profile.gpu.launch_s > 0
    assert {k for k, _ in profile.gpu.elementwise} >= {"add", "copy", "gelu", "softmax", "rms_norm"}
    path = profile.save(tmp_path / "here.json")
    assert DeviceProfile.from_dict(json.loads(path.read_text())) == profile
    devices = partitioner.parse_devices(f"2x{path}")
    assert devices[0].profile == profile


def test_rows_build_the_same_kernels_as_the_carried_profile():
    """Each measured row lands where the cost model reads it: a tiny exact case, then the carried
    profile read row by row from its file (tf32 rows are torch's fp32 with TF32 on: left out)."""
    rows = [
        {"kind": "info", "gpu": "Test GPU"},
        {"kind": "overhead", "what": "add 1 element, back to back", "per_op_s": 5e-6},
        {"kind": "overhead", "what": "host wall per tiny op", "per_op_s": 7e-6},
        {"kind": "matmul", "dtype": "bfloat16", "m": 64, "k": 32, "n": 16, "s": 2e-5},
        {"kind": "matmul", "dtype": "bfloat16", "m": 8, "k": 32, "n": 16, "s": 1e-5},
        {"kind": "matmul", "dtype": "tf32", "m": 8, "k": 8, "n": 8, "s": 1e-5},
        {"kind": "elementwise", "op": "add", "bytes": 4096, "s": 6e-6},
        {"kind": "elementwise", "op": "add", "bytes": 1 << 20, "s": 9e-6},
        {"kind": "attention", "seq": 128, "causal": True, "s": 3e-5},
        {"kind": "attention", "seq": 256, "causal": True, "s": 5e-5},
        {"kind": "embedding", "tokens": 128, "dim": 64, "s": 8e-6},
        {"kind": "cross_entropy", "tokens": 128, "vocab": 1000, "s": 9e-6},
    ]
    tiny = from_rows(rows, source="here")
    assert (tiny.gpu, tiny.launch_s, tiny.host_op_s, tiny.source) == ("Test GPU", 5e-6, 7e-6, "here")
    assert tiny.matmul == (("bfloat16", ((8.0, 32.0, 16.0, 1e-5), (64.0, 32.0, 16.0, 2e-5))),)
    assert tiny.elementwise == (("add", ((4096.0, 6e-6), (1048576.0, 9e-6))),)
    assert tiny.attention == ((True, ((128.0, 3e-5), (256.0, 5e-5))),)
    assert tiny.embedding == ((2.0 * 2 * 128 * 64, 8e-6),)  # bytes moved: 2-byte rows read and written
    assert tiny.loss == ((128.0 * 1000, 9e-6),)  # logit elements

    carried, kernels = _rows("h200-141gb"), gpu_kernels("h200-141gb")
    assert kernels is not None
    by_dtype: dict[str, list[tuple[float, ...]]] = {}
    for r in carried:
        if r["kind"] == "matmul" and r["dtype"] != "tf32":
            by_dtype.setdefault(r["dtype"], []).append((r["m"], r["k"], r["n"], r["s"]))
    assert {d: sorted(points) for d, points in by_dtype.items()} == {d: list(points) for d, points in kernels.matmul}
    assert sum(len(points) for _, points in kernels.matmul) == 56 + 56 + 49
    overhead = {r["what"]: r["per_op_s"] for r in carried if r["kind"] == "overhead"}
    assert kernels.launch_s == overhead["add 1 element, back to back"]
    assert kernels.host_op_s == overhead["host wall per tiny op"]


def test_an_unknown_engine_is_refused_by_the_cluster():
    with pytest.raises(PartitionError, match="engine"):
        cluster.cluster("h100-80gb", engine="turbo")


def test_an_engine_is_named_in_the_device_type_and_refused_where_it_cannot_apply():
    devices = partitioner.parse_devices("2xh100-80gb@graphs,1xh200-141gb")
    assert [d.profile.engine for d in devices] == ["graphs", "graphs", "eager"]
    assert devices[0].to_dict()["profile"] == "h100-80gb@graphs"
    assert cluster.cluster("h200-141gb@graphs").accelerator.engine == "graphs"
    with pytest.raises(DeviceSpecError, match="unknown engine 'turbo'"):
        partitioner.parse_devices("2xh100-80gb@turbo")
    with pytest.raises(DeviceSpecError, match="not to a size"):
        partitioner.parse_devices("2x16GiB@graphs")


def test_a_solver_time_limit_is_bounded_in_the_library_too():
    from partitioner.options import MAX_TIME_LIMIT_S, PartitionOptions

    for bad in (1e12, float("inf"), float("nan"), 0.0, -1.0):
        with pytest.raises(PartitionError, match="time_limit_s must be seconds"):
            PartitionOptions(time_limit_s=bad)
    assert PartitionOptions(time_limit_s=MAX_TIME_LIMIT_S).time_limit_s == MAX_TIME_LIMIT_S


def test_a_symbolically_traced_models_layers_are_priced_by_their_type():
    """A sample model traced with call_module nodes: its Linear layers are matrix products in Explore
    and in the planner alike, priced from the bf16 or fp32 curves, never as a copy of their bytes."""
    import sample_models

    model, inputs = sample_models.build("mlp")
    graph = partitioner.trace(model, inputs)
    linears = [v for v in graph.op_indices if graph.nodes[v].op == "call_module" and graph.nodes[v].flops > 0]
    assert linears
    ops = cluster.profile(graph).node_ops
    kinds = {graph.op_indices[i]: op.kind for i, op in enumerate(ops)}
    assert all(kinds[v] == "matmul" for v in linears)
    from partitioner.cost import ops as gpu_ops

    explore, _ = gpu_ops.op_times(graph, gpu_kernels("h100-80gb"), lambda node: gpu_ops.module_kind(graph, node))
    assert all(explore[v].kind == "matmul" for v in linears)
