"""The declared dependency range, tested at its floor: a fresh virtualenv with the lowest
transformers and accelerate ``pyproject.toml`` accepts (and the pinned torch: any other torch is a
multi-GB CUDA download here) runs the model and tracing tests, which build and trace every sample
model and every ``hf:`` preset."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _floors() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {}
    for spec in project["optional-dependencies"]["hf"]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+).*", spec.replace(" ", ""))
        assert m, f"{spec!r} names no floor"
        out[m.group(1)] = m.group(2)
    return out


def test_the_floor_is_declared_for_every_optional_library():
    assert set(_floors()) == {"transformers", "accelerate"}


@pytest.mark.slow
def test_the_models_build_and_trace_on_the_lowest_versions_accepted(tmp_path):
    venv = tmp_path / "floor"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pins = [f"{name}=={version}" for name, version in _floors().items()]
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        "-c",
        str(ROOT / "constraints.txt"),
    ]
    subprocess.run([*pip, "-e", str(ROOT), *pins, "pytest>=8", "hypothesis>=6.100"], check=True, timeout=1200)
    versions = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import transformers, accelerate; print(transformers.__version__, accelerate.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    floors = _floors()
    assert [Version(v) for v in versions] == [Version(floors["transformers"]), Version(floors["accelerate"])]
    run = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow",
            "tests/models",
            "tests/tracing",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-3000:]
