"""The commands that read only JSON start without torch (its import costs seconds on every run):
the parser and ``--help``, ``diff``, ``render --format dot``, ``export`` without a model, and
``check`` up to the trace of its model (a plan file it cannot read is refused before it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli_helpers import DEVICES

import partitioner
from partitioner import Plan

ROOT = Path(__file__).resolve().parents[2]
# Runs each command line of argv in turn in one fresh interpreter; after each, prints
# "@@ [command line, exit status, whether torch is imported]".
DRIVER = """
import json, shlex, sys
from cli.main import main
for line in sys.argv[1:]:
    try:
        code = main(shlex.split(line))
    except SystemExit as exc:
        code = exc.code
    print("@@ " + json.dumps([line, code, "torch" in sys.modules]), flush=True)
"""


def test_commands_that_read_json_do_not_import_torch(tmp_path, graph: partitioner.Graph, base_plan: Plan):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(base_plan.to_json())
    devices = partitioner.parse_devices(DEVICES)
    b.write_text(partitioner.partition(graph, devices, mode="cost_aware", transfer_rate_bytes_per_s=1e9).to_json())
    (tmp_path / "broken.json").write_text('{"schema_version": 1, "partitions": [')
    expected = {  # command line -> exit status; none of them imports torch
        "--help": 0,
        "--version": 0,
        "check --help": 0,
        "diff --help": 0,
        "export --help": 0,
        f"diff {a} {b}": 0,
        f"diff {a} {b} --json --exit-code": 1,
        f"export {a} --kind fx-aot": 0,
        f"render {a} --format dot": 0,
        f"check {tmp_path / 'broken.json'} mlp": 2,
        f"check {tmp_path / 'absent.json'} mlp": 2,
    }
    control = "plan --help"  # lists the sample models: imports them, and torch, which the probe must see
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, *expected, control],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    rows = [json.loads(line[3:]) for line in done.stdout.splitlines() if line.startswith("@@ ")]
    assert [r[0] for r in rows] == [*expected, control]
    assert {line: code for line, code, _ in rows[:-1]} == expected
    assert [line for line, _, torch in rows[:-1] if torch] == []
    assert rows[-1] == [control, 0, True]
