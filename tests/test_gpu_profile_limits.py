"""Bounded profiles (NOTE: [Bounded profiles] in partitioner.curves): the largest profile each
section accepts loads within a bound on the Python lines it runs (not on wall time: the machine is
shared); a list one longer than its limit, too many points together, a value of the wrong type or
a file over its size limit is refused by name, before the work."""

from __future__ import annotations

import json

import pytest

from partitioner.device_profile import DeviceProfile
from partitioner.errors import DeviceSpecError
from partitioner.gpu_kernels_json import gpu_kernels_from_json
from partitioner.profiles import gpu_profile


def _traced_lines(fn, limit):
    """Run ``fn`` counting the Python lines and calls it executes; stop it past ``limit``."""
    import sys

    count = 0

    class TooMuchWork(Exception):
        pass

    def tracer(frame, event, arg):
        nonlocal count
        count += 1
        if count > limit:
            raise TooMuchWork(f"more than {limit:,} lines")
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def _points(d: dict) -> int:
    return (
        sum(len(c) for c in d["matmul"].values())
        + len(d["copy"])
        + sum(len(c) for c in d["elementwise"].values())
        + sum(len(d[f]) for f in ("collectives", "slowdown", "pipeline_action_s", "barrier_s", "dtensor_module_s"))
    )


def _gpu_points(g: dict) -> int:
    return sum(len(r) for s in ("matmul", "elementwise", "attention") for r in g[s].values()) + 6


def _curve(n: int, start: float = 1.0) -> list[list[float]]:
    return [[start + i, 1e-6 * (start + i)] for i in range(n)]


def _largest(section: str) -> dict:
    """The H100 profile with ``section`` as long as the schema accepts."""
    from partitioner.curves import MAX_CURVE_POINTS, MAX_PROFILE_POINTS
    from partitioner.kernels import GPU_LIMITS, MAX_WEIGHT_SHAPES
    from partitioner.profile_schema import LIMITS

    good = gpu_profile("h100-80gb").to_dict()
    gpu = dict(good["gpu"])
    room = MAX_PROFILE_POINTS - _points(good)
    if section == "matmul":
        per = min(MAX_CURVE_POINTS, (room + sum(len(c) for c in good["matmul"].values())) // LIMITS["matmul"])
        good["matmul"] = {f"d{i}": _curve(per) for i in range(LIMITS["matmul"])}
    elif section == "copy":
        good["copy"] = _curve(min(MAX_CURVE_POINTS, room + len(good["copy"])))
    elif section == "elementwise":
        per = (room + sum(len(c) for c in good["elementwise"].values())) // LIMITS["elementwise"]
        good["elementwise"] = {f"k{i}": _curve(per) for i in range(LIMITS["elementwise"])}
    elif section == "collectives":
        good["collectives"] = [
            {"kind": f"k{i}", "processes": 2, "latency_s": 1e-5, "bandwidth_bytes_per_s": 1e9}
            for i in range(LIMITS["collectives"])
        ]
    elif section in ("slowdown", "pipeline_action_s", "barrier_s", "dtensor_module_s"):
        good[section] = [[i + 1, 1.0 + i / 1e4] for i in range(LIMITS[section])]
    elif section.startswith("gpu."):
        room = MAX_PROFILE_POINTS - _gpu_points(gpu)
        part = section[4:]
        if part in ("matmul", "matmul_shapes"):  # one weight shape: the rows the merge groups
            dtypes = GPU_LIMITS["matmul"]
            per = min(MAX_CURVE_POINTS, (room + sum(len(r) for r in gpu["matmul"].values())) // dtypes)
            shapes = MAX_WEIGHT_SHAPES if part == "matmul_shapes" else 1
            gpu["matmul"] = {
                f"d{i}": [[float(j // shapes + 1), 4096.0 + j % shapes, 4096.0, 1e-5] for j in range(per)]
                for i in range(dtypes)
            }
        elif part == "elementwise":
            per = (room + sum(len(c) for c in gpu["elementwise"].values())) // GPU_LIMITS["elementwise"]
            gpu["elementwise"] = {f"k{i}": _curve(per) for i in range(GPU_LIMITS["elementwise"])}
        elif part in ("embedding", "loss"):
            gpu[part] = _curve(min(MAX_CURVE_POINTS, room + len(gpu[part])))
        elif part == "derived_dtypes":
            gpu["derived_dtypes"] = {f"d{i}": 2.0 for i in range(GPU_LIMITS["derived_dtypes"])}
        good["gpu"] = gpu
    return good


SECTIONS = [
    "matmul",
    "copy",
    "elementwise",
    "collectives",
    "slowdown",
    "pipeline_action_s",
    "barrier_s",
    "dtensor_module_s",
    "gpu.matmul",
    "gpu.matmul_shapes",
    "gpu.elementwise",
    "gpu.embedding",
    "gpu.loss",
    "gpu.derived_dtypes",
]


@pytest.mark.parametrize("section", SECTIONS)
def test_the_largest_accepted_profile_of_each_section_loads_in_linear_work(section):
    from partitioner.curves import MAX_PROFILE_POINTS

    data = json.loads(json.dumps(_largest(section)))
    # Two full budgets of points (the host's curves, the GPU's) at a few dozen lines each: the
    # quadratic merge this replaces ran 10^8 comparisons on one dtype's 10,000 rows of a shape.
    bound = 60 * 2 * MAX_PROFILE_POINTS
    lines = _traced_lines(lambda: DeviceProfile.from_dict(data), bound)
    assert lines < bound
    profile = DeviceProfile.from_dict(data)
    assert profile.to_dict()["kind"] == data["kind"]


@pytest.mark.parametrize(
    "section",
    ["matmul", "elementwise", "collectives", "slowdown", "pipeline_action_s", "gpu.matmul", "gpu.elementwise"],
)
def test_a_list_one_longer_than_its_limit_is_refused_by_name(section):
    from partitioner.kernels import GPU_LIMITS
    from partitioner.profile_schema import LIMITS

    data = _largest(section)
    owner, field = (data["gpu"], section[4:]) if section.startswith("gpu.") else (data, section)
    limit = (GPU_LIMITS if owner is not data else LIMITS)[field]
    value = owner[field]
    if isinstance(value, dict):
        value = {**value, "one_more": next(iter(value.values()))}
    else:
        value = [*value, value[-1]]
    owner[field] = value
    with pytest.raises(DeviceSpecError) as info:
        DeviceProfile.from_dict(data)
    message = str(info.value)
    assert f"{field} has {limit + 1:,}" in message and f"at most {limit:,}" in message, message
    assert "calibrate" in message and "got 'eager'" not in message


def test_all_of_a_profiles_points_together_are_bounded():
    data = _largest("copy")
    data["elementwise"] = {"gelu": _curve(6000), "silu": _curve(6000)}
    with pytest.raises(DeviceSpecError, match=r"points together \(at most 20,000"):
        DeviceProfile.from_dict(data)
    gpu = _largest("gpu.embedding")["gpu"]
    with pytest.raises(DeviceSpecError, match=r"points together \(at most 20,000"):
        gpu_kernels_from_json({**gpu, "loss": _curve(10_000)})
    too_many_shapes = {"bfloat16": [[1.0, 8.0 + j, 8.0, 1e-5] for j in range(257)]}
    with pytest.raises(DeviceSpecError, match=r"257 weight shapes.*at most 256"):
        gpu_kernels_from_json({**gpu, "matmul": too_many_shapes})


def test_repeated_rows_of_one_shape_average_as_before():
    gpu = gpu_profile("h100-80gb").to_dict()["gpu"]
    rows = [[64.0, 4096.0, 4096.0, 1e-5], [64.0, 4096.0, 4096.0, 3e-5], [128.0, 4096.0, 4096.0, 4e-5]]
    kernels = gpu_kernels_from_json({**gpu, "matmul": {"bfloat16": rows}})
    assert kernels.timed_matmul_s(64, 4096, 4096) == pytest.approx(2e-5)
    assert kernels.timed_matmul_s(128, 4096, 4096) == pytest.approx(4e-5)


@pytest.mark.parametrize(
    "where, field, value",
    [
        ((), "memory_bytes", True),
        ((), "memory_bytes", "80000000000"),
        ((), "memory_bytes", 1.5),
        ((), "cores", True),
        ((), "launch_s", False),
        ((), "copy", [[True, 1e-6]]),
        ((), "slowdown", [[True, 1.0]]),
        ((), "host", 7),
        (("gpu",), "launch_s", True),
        (("gpu",), "loss", [[1.0, "1e-6"]]),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_not_converted(where, field, value):
    data = gpu_profile("h100-80gb").to_dict()
    owner = data["gpu"] if where else data
    owner[field] = value
    with pytest.raises(DeviceSpecError, match=r"must be (a number|an integer|text)"):
        DeviceProfile.from_dict(data)


def test_a_profile_file_over_its_size_limit_is_refused_before_it_is_read(tmp_path):
    from partitioner.device_profile import load_profile
    from partitioner.profile_schema import MAX_PROFILE_BYTES

    path = tmp_path / "big.json"
    path.write_text(" " * (MAX_PROFILE_BYTES + 1))
    with pytest.raises(DeviceSpecError, match=r"bytes \(at most 16,777,216"):
        load_profile(path)
