"""The library is type-checked: mypy over partitioner/ reports no error."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_partitioner_is_mypy_clean():
    assert shutil.which("mypy", path=str(Path(sys.executable).parent)), "mypy is a dev dependency"
    out = subprocess.run([sys.executable, "-m", "mypy", "partitioner"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
