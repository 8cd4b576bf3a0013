"""The architecture holds: no import circle of any kind, one home for each table of names (dtypes,
optimizers, schedules), small modules, torch and the UI at the edges."""

from __future__ import annotations

import subprocess
import sys

import layout_scan
import pytest

from partitioner.pipeline.schedules import SCHEDULES

ROOT = layout_scan.ROOT

MAX_LINES = 400
DTYPE_WORDS = {"bf16", "bfloat16", "fp16", "float16", "fp32", "float32"}
OPTIMIZER_WORDS = {"adam", "adamw", "sgd"}
# The hardware table's datasheet figures are data keyed by dtype (units.DType.peak_key names the keys).
DTYPE_HOMES = ("partitioner/units.py", "partitioner/hardware.py")
SCHEDULE_WORDS = {w for s in SCHEDULES.values() for w in (s.name, s.torch_name, s.torch_class)}


def test_no_import_circle_of_any_kind():
    """Imports made only for type checkers (under ``if TYPE_CHECKING:``) and imports inside
    functions count as much as those at the top of a module."""
    found = layout_scan.circles(layout_scan.modules())
    assert found == [], f"import circles: {found[:5]}"


def test_the_circle_finder_finds_one_made_only_for_type_checkers(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "records.py").write_text("from pkg.rules import check\n")
    (package / "rules.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.records import Plan\n"
    )
    (package / "other.py").write_text("def f():\n    from . import records\n")
    assert layout_scan.circles(layout_scan.modules(tmp_path, ("pkg",))) == [["pkg.records", "pkg.rules"]]


def test_one_home_for_dtypes_optimizers_and_schedules():
    """A literal dict, set, tuple or list naming two dtypes, optimizers or schedules outside their
    one table is a second table that will drift from the first: read partitioner.units (DTYPES,
    dtype(), PRECISIONS), partitioner.cost.training.OPTIMIZERS or
    partitioner.pipeline.schedules (SCHEDULES, get_schedule, virtual_stages) instead."""
    found = (
        layout_scan.second_tables(DTYPE_WORDS, DTYPE_HOMES, lower=True)
        + layout_scan.second_tables(OPTIMIZER_WORDS, ("partitioner/cost/training.py",), lower=True)
        + layout_scan.second_tables(SCHEDULE_WORDS, ("partitioner/pipeline/schedules.py",))
    )
    assert found == [], "second tables:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ('SIZES = {"float32": 4, "bfloat16": 2}', DTYPE_WORDS),
        ('CHOICES = ["bf16", "FP32"]', DTYPE_WORDS),
        ('p.add_argument("--optimizer", choices=["adam", "sgd", "none"])', OPTIMIZER_WORDS),
        ('def f():\n    return {"Adam": "adam", "SGD": "sgd"}', OPTIMIZER_WORDS),
        ('RUN = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}', SCHEDULE_WORDS),
        ('NAMES = ["GPipe", "Interleaved1F1B"]', SCHEDULE_WORDS),
    ],
)
def test_the_table_finder_finds_a_planted_second_table(tmp_path, source, words):
    for package in layout_scan.PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "cli" / "extra.py").write_text(source + "\n")
    found = layout_scan.second_tables(words, (), tmp_path, lower=words is not SCHEDULE_WORDS)
    assert [line.split(" ")[0] for line in found] == [f"cli/extra.py:{source.count(chr(10)) + 1}"]
    assert layout_scan.tables_in('if s == "gpipe":\n    pass', SCHEDULE_WORDS) == []  # one name is no table


def test_no_source_file_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in layout_scan.modules().values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these modules: {long}"


def _fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return out.stdout.strip()


def test_no_test_file_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these test files: {long}"


def test_no_module_named_like_a_public_function():
    """``partitioner.trace`` must stay the function: no module is named like one of the library's
    public functions where importing it would shadow that function (in ``partitioner`` itself, or
    in a package that exports a function of that name). ``partitioner.cluster.run`` is fine:
    ``partitioner.run`` is the function and ``partitioner.cluster`` exports none of that name."""
    import importlib

    import partitioner

    public = {name for name in partitioner.__all__ if callable(getattr(partitioner, name))}
    clash = []
    for name in sorted(layout_scan.modules()):
        parent, _, leaf = name.rpartition(".")
        if leaf not in public:
            continue
        if parent == "partitioner" or leaf in getattr(importlib.import_module(parent), "__all__", ()):
            clash.append(name)
    assert clash == [], f"rename these modules: {clash}"


TORCH_FREE = (
    "partitioner.accelerator",
    "partitioner.cost",
    "partitioner.plan",
    "partitioner.draw",
    "partitioner.pipeline",
    "partitioner.remat",
    "partitioner.sharding",
    "partitioner.runtime",
    "partitioner.accelerator.steps",
    "partitioner.accelerator.compare",
    "partitioner.pipeline.stages",
    "partitioner.pipeline.simulator",
    "partitioner.remat.memory",
    "partitioner.sharding.tensor_parallel",
    "partitioner.processes.worker",
    "partitioner.interop.readers",
    "partitioner.cluster",
    "partitioner.cluster.layout_search",
    "partitioner.cluster.run",
    "partitioner.processes",
    "partitioner.interop.engines",
)


def test_algorithm_packages_import_no_torch():
    assert _fresh(f"import sys, {', '.join(TORCH_FREE)}; print('torch' in sys.modules)") == "False"


@pytest.fixture(scope="module")
def fresh_library() -> list[str]:
    """One fresh interpreter for both tests below (each imports torch: seconds): the UI libraries
    the library's modules import, then the ops of a trace after importing its package."""
    code = (
        "import sys, partitioner, partitioner.draw.dag, partitioner.accelerator.compare, "
        "partitioner.plan.diff, partitioner.interop.export, partitioner.tracing; "
        "import partitioner.remat, partitioner.sharding.tensor_parallel, partitioner.runtime.execute; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'streamlit', 'plotly', 'graphviz', 'pandas'})); "
        "import torch; "
        "g = partitioner.trace(torch.nn.Linear(2, 2), (torch.randn(1, 2),)); print(len(g.op_names))"
    )
    return _fresh(code).splitlines()


def test_library_imports_no_ui_library(fresh_library):
    assert fresh_library[0] == "[]"


def test_trace_is_the_function_after_importing_its_package(fresh_library):
    assert fresh_library[1] == "1"
