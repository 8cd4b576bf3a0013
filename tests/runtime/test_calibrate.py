"""Device profiles: the JSON round trip, a profile as a device type everywhere one is asked, the
cost model's prices from it, and a real calibration (slow)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import partitioner
from partitioner.cost.model import profile_latencies, roofline_latencies
from partitioner.device_profile import AlphaBeta, DeviceProfile, find_profile, fit_alpha_beta, load_profile
from partitioner.devices import Device, parse_devices, with_profile
from partitioner.errors import DeviceSpecError
from partitioner.graph import Graph, Node

ROOT = Path(__file__).resolve().parents[2]


def _profile(name: str = "box") -> DeviceProfile:
    # Linear ops: 1 GFLOP/s at 2 kFLOP, 10 GFLOP/s at 2 MFLOP; an elementwise op moves 1 GB/s at
    # 1 KB, 10 GB/s at 1 MB; 1 us an op, 2 us more a module call.
    return DeviceProfile(
        name=name,
        memory_bytes=8 * 2**30,
        launch_s=1e-6,
        module_overhead_s=2e-6,
        matmul=(("float32", ((2e3, 1e-6 + 2e-6), (2e6, 1e-6 + 2e-4))),),
        copy=((1e3, 1e-6 + 1e-6), (1e6, 1e-6 + 1e-4)),
        collectives=(("all_reduce", 2, AlphaBeta(50e-6, 1e9)), ("p2p", 2, AlphaBeta(20e-6, 2e9))),
        slowdown=((1, 1.0), (2, 1.5), (4, 3.0)),
        cores=2,
        load_average=1.5,
        measured_at="2026-01-01T00:00:00+00:00",
    )


def test_profile_json_round_trip(tmp_path):
    profile = _profile()
    path = profile.save(tmp_path / "box.json")
    again = load_profile(path)
    assert again == profile
    assert json.loads(path.read_text())["kind"] == "device-profile"
    device = with_profile([Device("d0", 2**30, 0)], profile)[0]
    assert Device.from_dict(json.loads(json.dumps(device.to_dict()))) == device


def test_the_curves_interpolate_between_measured_points():
    p = _profile()
    assert p.flops_per_s(2e3) == pytest.approx(1e9)
    assert p.flops_per_s(2e6) == pytest.approx(1e10)
    assert 1e9 < p.flops_per_s(2e4) < 1e10  # between the two points
    assert p.bandwidth_bytes_per_s(1e6) == pytest.approx(1e10)
    assert p.collective_s("all_reduce", 1e6, 2) == pytest.approx(50e-6 + 1e-3)
    assert p.collective_s("all_reduce", 1e6, 4) == pytest.approx(50e-6 + 1e-3)  # the nearest count measured
    assert p.collective_s("all_gather", 1e6, 2) == 0.0  # not measured
    assert p.slowdown_for(3) == pytest.approx(2.25) and p.slowdown_for(8) == pytest.approx(6.0)
    assert p.peak_flops == pytest.approx(1e10)


def test_alpha_beta_fit_recovers_a_line_and_resists_one_slow_message():
    line = [(b, 30e-6 + b / 2e9) for b in (4, 1024, 16384, 1 << 20, 1 << 21, 1 << 22)]
    fit = fit_alpha_beta(line)
    assert fit.latency_s == pytest.approx(30e-6, rel=0.3)
    assert fit.bandwidth_bytes_per_s == pytest.approx(2e9, rel=0.05)
    noisy = line[:-1] + [(line[-1][0], line[-1][1] * 3)]
    assert fit_alpha_beta(noisy).latency_s < 60e-6


def test_a_profile_is_a_device_type(tmp_path, monkeypatch):
    monkeypatch.setenv("PARTITION_EXPLORER_CACHE", str(tmp_path / "cache"))
    profile = _profile("box")
    path = profile.save(tmp_path / "box.json")
    by_file = parse_devices(f"2x{path}")
    assert [d.profile for d in by_file] == [profile, profile] and [d.logical_id for d in by_file] == [0, 1]
    assert parse_devices(str(path))[0].profile == profile  # a profile file alone is one device
    with pytest.raises(DeviceSpecError, match="neither a size .* nor a preset .* nor a measured profile"):
        parse_devices("2xbox")
    profile.save(tmp_path / "cache" / "profiles" / "box.json")
    assert find_profile("box") == profile
    named = parse_devices("2xbox")
    assert named[1].profile == profile and named[1].memory_bytes == 8 * 2**30 and named[1].kind == "box"
    assert named[0].peak_flops == pytest.approx(1e10)
    listed = tmp_path / "devs.json"
    listed.write_text(json.dumps([{"memory_bytes": "1GiB", "profile": "box"}]))
    assert parse_devices(str(listed))[0].profile == profile


def test_a_broken_profile_names_the_fix(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**_profile().to_dict(), "copy": [[0, 1]]}))
    with pytest.raises(DeviceSpecError, match="positive, finite .*partition-explorer calibrate"):
        load_profile(bad)
    bad.write_text(json.dumps({**_profile().to_dict(), "schema_version": 99}))
    with pytest.raises(DeviceSpecError, match="schema_version must be 1"):
        load_profile(bad)
    with pytest.raises(DeviceSpecError, match="does not exist"):
        load_profile(tmp_path / "none.json")


def _chain() -> Graph:
    return Graph(
        [
            Node("x", "placeholder", "x", output_bytes=4000),
            Node(
                "fc",
                "call_module",
                "fc",
                (0,),
                output_bytes=4000,
                param_bytes=1000,
                flops=2_000_000,
                dtype="torch.float32",
            ),
            Node("relu", "call_function", "relu", (1,), output_bytes=4000),
            Node("view", "call_method", "view", (2,), output_bytes=4000),
            Node("out", "output", "output", (3,)),
        ],
        name="chain",
    )


def test_the_cost_model_prices_ops_from_the_profile():
    p = _profile()
    graph = _chain()
    lat = roofline_latencies(graph, with_profile([Device("d0", 2**30, 0)], p))
    assert lat == profile_latencies(graph, p)
    # fc: a module call: 3 us of overhead; 2 MFLOP at 10 GFLOP/s = 200 us; 9 kB moved.
    mem_s, compute_s = lat[1]
    assert compute_s == pytest.approx(3e-6 + 2e6 / 1e10)
    assert mem_s == pytest.approx(3e-6 + 9000 / p.bandwidth_bytes_per_s(9000))
    assert lat[2][0] == pytest.approx(1e-6 + 8000 / p.bandwidth_bytes_per_s(8000))  # relu: bytes, one op's overhead
    assert lat[3] == (1e-6, 1e-6)  # a view moves nothing
    plan = partitioner.evaluate_plan(
        graph, with_profile(parse_devices("2x1MiB"), p), {"fc": 0, "relu": 1, "view": 1}, {0: [0], 1: [1]}
    )
    edge = plan.edges[0]
    assert edge.latency_s == pytest.approx(20e-6 + 4000 / 2e9)  # the measured p2p alpha-beta
    assert math.isclose(plan.latency_s, max(lat[1]) + edge.latency_s + max(lat[2]) + max(lat[3]), rel_tol=1e-9)


@pytest.mark.slow
def test_calibrate_measures_this_machine_and_the_cli_accepts_it(tmp_path):
    env = {"PARTITION_EXPLORER_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=240
        )

    done = cli("calibrate", "--name", "here", "--processes", "2", "--out", str(tmp_path / "here.json"))
    assert done.returncode == 0, done.stderr
    profile = load_profile(tmp_path / "here.json")
    assert profile == load_profile(tmp_path / "profiles" / "here.json")
    assert profile.launch_s > 0 and profile.peak_flops > 1e8 and profile.memory_bandwidth_bytes_per_s > 1e8
    assert {k for k, n, _ in profile.collectives} == {
        "p2p",
        "handoff",
        "all_reduce",
        "all_gather",
        "dtensor_all_reduce",
    }
    assert [n for n, _ in profile.barrier_s] == [2] and [n for n, _ in profile.dtensor_module_s] == [2]
    assert (
        profile.training_step_factor > 1
        and {k for k, _ in profile.elementwise} == {"gelu", "layer_norm", "softmax", "silu", "sigmoid", "tanh"}
        and profile.host_per_op_s > 0
    )
    done = cli("plan", "mlp", "--devices", "2xhere", "--out", str(tmp_path / "plan.json"))
    assert done.returncode == 0, done.stderr
    plan = partitioner.Plan.from_json((tmp_path / "plan.json").read_text())
    assert plan.devices[0].profile == profile
