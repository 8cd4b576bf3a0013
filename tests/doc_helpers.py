"""What the tests of the documentation share: a page's bash block run as a reader runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_bash(script: str, folder: Path) -> subprocess.CompletedProcess:
    """Run a documentation bash block in ``folder`` with this interpreter's venv as ``.venv``; it
    must exit 0 (the message ends with its output)."""
    (folder / ".venv").symlink_to(Path(sys.executable).parents[1])
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done
