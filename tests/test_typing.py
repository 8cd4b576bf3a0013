"""The project is type-checked: mypy over every package (the library, the CLI, the app, the sample
models; pyproject.toml's [tool.mypy] files) reports no error."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_every_package_is_mypy_clean():
    assert shutil.which("mypy", path=str(Path(sys.executable).parent)), "mypy is a dev dependency"
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "partitioner", "cli", "explorer", "sample_models"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
