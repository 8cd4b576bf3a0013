"""One name a quantity: a gibibyte is one constant, a device profile's per-op launch and host costs
are named as the kernel curves name them (its files' former keys still read), and "engines" name
the kernel engines while the frameworks a layout exports to are the export engines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from examples import host_profile
from partitioner import hardware, kernels, units
from partitioner.cluster import hardware as cluster_hardware
from partitioner.device_profile import DeviceProfile
from partitioner.errors import DeviceSpecError
from partitioner.interop import engines as export
from partitioner.profile_schema import KEY_ALIASES
from partitioner.profiles import gpu_profile

ROOT = Path(__file__).resolve().parents[1]
HOST = host_profile(host_per_op_s=4e-6)


def test_a_gibibyte_is_defined_once_in_the_package():
    assert units.GiB == 2**30 == units.BYTE_UNITS["GIB"]
    assert hardware.GiB is units.GiB and cluster_hardware.GiB is units.GiB
    spelled = re.compile(r"^GiB\s*=", re.M)
    homes = [p for p in sorted((ROOT / "partitioner").rglob("*.py")) if spelled.search(p.read_text())]
    assert [p.relative_to(ROOT).as_posix() for p in homes] == ["partitioner/units.py"]


def test_a_gpu_profile_carries_its_kernels_launch_and_host_costs_under_their_names():
    profile = gpu_profile("h100-80gb")
    assert profile is not None and profile.gpu is not None
    assert profile.launch_s == profile.gpu.launch_s
    assert profile.host_per_op_s == profile.gpu.host_per_op_s > profile.launch_s


def test_a_profile_is_written_under_the_current_keys_and_read_under_the_former_ones_too():
    data = HOST.to_dict()
    assert data["launch_s"] == 1e-6 and data["host_per_op_s"] == 4e-6
    assert not set(KEY_ALIASES.values()) & set(data)
    former = {KEY_ALIASES.get(k, k): v for k, v in data.items()}
    assert former["op_overhead_s"] == 1e-6 and former["graph_op_overhead_s"] == 4e-6
    assert DeviceProfile.from_dict(former) == DeviceProfile.from_dict(data) == HOST
    for gpu in (gpu_profile("h200-141gb"),):
        assert gpu is not None
        moved = {KEY_ALIASES.get(k, k): v for k, v in gpu.to_dict().items()}
        assert DeviceProfile.from_dict(moved) == gpu


def test_a_profile_without_its_launch_cost_names_the_current_key():
    data = {k: v for k, v in HOST.to_dict().items() if k != "launch_s"}
    with pytest.raises(DeviceSpecError, match=r"malformed \(KeyError: 'launch_s'\)"):
        DeviceProfile.from_dict(data)
    bare = {k: v for k, v in HOST.to_dict().items() if k != "host_per_op_s"}
    assert DeviceProfile.from_dict(bare).host_per_op_s == 0.0  # not measured


def test_kernel_engines_and_export_engines_are_two_names():
    assert set(kernels.ENGINES) == {"eager", "graphs"}
    assert set(export.EXPORT_ENGINES) == {"torchtitan", "torchtitan-args", "megatron", "deepspeed"}
    assert "ENGINES" not in export.__all__
