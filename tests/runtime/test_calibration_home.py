"""Calibration has a package of its own (issue 55): partitioner.runtime is torch at the output
edge, imports nothing above it, and its old calibration paths still give the same names."""

from __future__ import annotations

import subprocess
import sys

import layout_scan

KEPT_PATHS = {"partitioner.runtime.calibrate", "partitioner.runtime.calibrate_gpu"}


def test_the_old_import_paths_give_the_same_objects():
    from partitioner import calibration
    from partitioner.calibration import gpu, host
    from partitioner.runtime import calibrate as old_host
    from partitioner.runtime import calibrate_gpu as old_gpu

    for name in old_host.__all__:
        assert getattr(old_host, name) is getattr(host, name), name
    for name in old_gpu.__all__:
        assert getattr(old_gpu, name) is getattr(gpu, name), name
    assert calibration.local_profile is host.local_profile and calibration.calibrate_gpu is gpu.calibrate_gpu


def test_runtime_imports_neither_calibration_nor_the_planner_above_it():
    found = layout_scan.modules()
    runtime = {n: p for n, p in found.items() if n.startswith("partitioner.runtime") and n not in KEPT_PATHS}
    assert "partitioner.runtime.execute" in runtime
    above = ("partitioner.calibration", "partitioner.pipeline", "partitioner.cluster")
    reached = {
        n: sorted(t for t in layout_scan.imports(n, p, set(found)) if t.startswith(above)) for n, p in runtime.items()
    }
    assert {n: t for n, t in reached.items() if t} == {}
    calibration = {n: p for n, p in found.items() if n.startswith("partitioner.calibration")}
    assert len(calibration) == 7  # the package, host, ops, distributed, loops, gpu, naming
    assert not any(
        t.startswith("partitioner.runtime")
        for n, p in calibration.items()
        for t in layout_scan.imports(n, p, set(found))
    )


def test_importing_calibration_imports_no_torch():
    code = "import sys, partitioner.calibration, partitioner.runtime.calibrate; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=layout_scan.ROOT
    )
    assert done.stdout.strip() == "False"
