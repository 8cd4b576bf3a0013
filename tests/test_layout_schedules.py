"""One home for pipeline schedules: :data:`partitioner.pipeline.schedules.SCHEDULES` is the only
table of schedule names. A literal ``dict``, ``tuple``, ``list`` or ``set`` naming two schedules or
more (ours, torch's names or torch's class names) anywhere else in the source is a second table."""

from __future__ import annotations

import ast
from pathlib import Path

from partitioner.pipeline.schedules import SCHEDULES

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("partitioner", "cli", "explorer", "sample_models")
HOME = Path("partitioner/pipeline/schedules.py")

# Files that still hold a literal list of schedule names, each with the registry call that replaces
# it (partitioner.pipeline.schedules: SCHEDULES, get_schedule, virtual_stages, searched_schedules).
# Remove a file here when its literal goes; then the check is `second_schedule_tables() == []`.
NOT_YET = {}


def schedule_words() -> set[str]:
    """Every name a schedule goes by: ours, torch's ``get_schedule_class`` name, its class."""
    return {w for s in SCHEDULES.values() for w in (s.name, s.torch_name, s.torch_class)}


def tables_in(source: str, words: set[str]) -> list[tuple[int, list[str]]]:
    """(line, names) of each literal collection in ``source`` naming two schedules or more."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None] + list(node.values)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = list(node.elts)
        else:
            continue
        names = sorted({e.value for e in items if isinstance(e, ast.Constant) and e.value in words})
        if len(names) >= 2:
            found.append((node.lineno, names))
    return found


def second_schedule_tables(skip: set[str] | None = None) -> list[str]:
    """``path:line names`` of every literal schedule table outside the registry's module."""
    words = schedule_words()
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel == HOME or str(rel) in (skip or set()):
                continue
            out += [f"{rel}:{line} {names}" for line, names in tables_in(path.read_text(), words)]
    return out


def test_the_scan_finds_a_second_table():
    words = schedule_words()
    assert tables_in('RUN = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}', words) == [
        (1, ["1f1b", "Schedule1F1B", "ScheduleGPipe", "gpipe"])
    ]
    assert tables_in('if s in ("interleaved_1f1b", "zero_bubble"):\n    pass', words) == [
        (1, ["interleaved_1f1b", "zero_bubble"])
    ]
    assert tables_in('NAMES = ["GPipe", "Interleaved1F1B"]', words)  # torch's names count too
    assert tables_in('if s == "gpipe":\n    pass', words) == []  # one name is a comparison, not a table


def test_no_second_schedule_table():
    assert second_schedule_tables(skip=NOT_YET) == []
