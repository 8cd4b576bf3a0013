"""bench/bench_gpu.py stays runnable where no GPU is (its numbers are for a GPU machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_bench_runs_its_cases_dry_on_the_cpu(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_gpu.py"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "PARTITION_EXPLORER_CACHE": "off"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for kind in ("forward", "train", "decode"):
        assert f" {kind} " in out.stdout
    assert "3 cases" in out.stdout and "assumes: eager PyTorch" in out.stdout
    assert (tmp_path / "bench_gpu.json").is_file()


def test_without_a_gpu_the_bench_says_where_to_run_it():
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_gpu.py")], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 2 and "no CUDA GPU here" in out.stdout
