"""One home each for the dtype table and the optimizer list: a literal collection (dict, set, tuple,
list) naming two or more dtypes, or two or more optimizers, anywhere in the library, the command
line, the app or the sample models outside :mod:`partitioner.units` (dtypes) and
:mod:`partitioner.cost.training` (optimizers) is a second table that will drift from the first."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("partitioner", "cli", "explorer", "sample_models")
NAMES = {
    "dtype": {"bf16", "bfloat16", "fp16", "float16", "fp32", "float32"},
    "optimizer": {"adam", "adamw", "sgd"},
}
HOMES = {"dtype": "partitioner/units.py", "optimizer": "partitioner/cost/training.py"}
# (file, innermost function or class, kind) -> why it is no table of dtypes. The accelerators'
# datasheet figures are data keyed by dtype (DType.peak_key names their keys).
ALLOWED = {
    ("partitioner/hardware.py", "<module>", "dtype"): "the datasheet columns and figures of each card",
    ("partitioner/hardware.py", "_peaks", "dtype"): "a card's datasheet figures by dtype",
}
# Second tables in files this change does not own, each with the line that removes it; an entry
# is deleted with its table (test_pending_tables_still_exist fails on one left behind).
PENDING: dict[tuple[str, str, str], str] = {}


def _strings(node: ast.AST) -> set[str]:
    """The string constants directly inside a literal collection (a dict's keys and values)."""
    if isinstance(node, ast.Dict):
        items = [*node.keys, *node.values]
    elif isinstance(node, (ast.Set, ast.Tuple, ast.List)):
        items = list(node.elts)
    else:
        return set()
    return {x.value.lower() for x in items if isinstance(x, ast.Constant) and isinstance(x.value, str)}


def _visit(node: ast.AST, rel: str, scope: str, found: dict[tuple[str, str, str], list[str]]) -> None:
    for child in ast.iter_child_nodes(node):
        inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else scope
        names = _strings(child)
        for kind, known in NAMES.items():
            hits = sorted(names & known)
            if len(hits) >= 2 and rel != HOMES[kind]:
                found.setdefault((rel, scope, kind), []).append(f"{rel}:{child.lineno} ({scope}) {kind}s {hits}")
        _visit(child, rel, inner, found)


def second_tables(root: Path = ROOT) -> dict[tuple[str, str, str], list[str]]:
    """(file, scope, kind) -> ``path:line`` of each literal naming two or more dtypes or
    optimizers outside their home. O(size of the sources)."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            _visit(ast.parse(path.read_text(encoding="utf-8"), rel), rel, "<module>", found)
    return found


def test_one_dtype_table_and_one_optimizer_list():
    found = second_tables()
    new = [line for key, lines in found.items() if key not in ALLOWED and key not in PENDING for line in lines]
    assert not new, (
        "a second dtype table or optimizer list; read partitioner.units (DTYPES, dtype(), find_dtype(), "
        "PRECISIONS) or partitioner.cost.training.OPTIMIZERS instead:\n" + "\n".join(new)
    )


def test_pending_tables_still_exist():
    found = second_tables()
    gone = [f"{key}: {fix}" for key, fix in PENDING.items() if key not in found]
    assert not gone, "these second tables are gone; delete their PENDING entries:\n" + "\n".join(gone)


@pytest.mark.parametrize(
    "source",
    [
        'SIZES = {"float32": 4, "bfloat16": 2}',
        'CHOICES = ["bf16", "fp32"]',
        'p.add_argument("--optimizer", choices=["adam", "sgd", "none"])',
        'def f():\n    return {"Adam": "adam", "SGD": "sgd"}',
    ],
)
def test_the_scan_finds_a_second_table(tmp_path, source):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "cli" / "extra.py").write_text(source + "\n")
    found = second_tables(tmp_path)
    assert [line.split(" ")[0] for lines in found.values() for line in lines] == [
        f"cli/extra.py:{source.count(chr(10)) + 1}"
    ]
