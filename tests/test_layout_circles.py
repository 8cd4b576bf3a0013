"""No import circle of any kind: imports made only for type checkers (under ``if TYPE_CHECKING:``)
and imports inside functions count as much as those at the top of a module."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("partitioner", "cli", "explorer", "sample_models")


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of ``packages`` under ``root``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules ``name`` imports anywhere: at the top, in functions and under
    ``if TYPE_CHECKING:``; ``from pkg import mod`` counts as importing ``pkg.mod``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _circles(modules: dict[str, Path]) -> list[list[str]]:
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for target in _imports(name, path, set(modules)):
            # A package importing its own submodules (its front door) is not a circle, nor is a
            # submodule importing an ancestor package to reach a sibling (re-exported by design).
            if not target.startswith(name + ".") and not name.startswith(target + "."):
                graph.add_edge(name, target)
    return sorted(sorted(c) for c in nx.simple_cycles(graph))


def test_no_import_circle_even_for_type_checkers():
    circles = _circles(_modules(ROOT, PACKAGES))
    assert circles == [], f"import circles (typing-only imports included): {circles[:5]}"


def test_a_circle_made_only_for_type_checkers_is_found(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "records.py").write_text("from pkg.rules import check\n")
    (package / "rules.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.records import Plan\n"
    )
    (package / "other.py").write_text("def f():\n    from . import records\n")
    assert _circles(_modules(tmp_path, ("pkg",))) == [["pkg.records", "pkg.rules"]]
