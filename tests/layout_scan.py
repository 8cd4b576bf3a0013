"""Readers of the source tree for tests/test_layout.py: its modules, their imports (typing-only and
in-function ones included) and the import circles they make, and literal tables of names that have
one home (dtypes in partitioner.units, optimizers in partitioner.cost.training, schedules in
partitioner.pipeline.schedules). Each works on any root, so the tests can show it finds a planted one."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("partitioner", "cli", "explorer", "sample_models")


def modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of ``packages`` under ``root``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
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


def circles(found: dict[str, Path]) -> list[list[str]]:
    """Every import circle among ``found`` (sorted). A package importing its own submodules (its
    front door) is none, nor a submodule importing an ancestor package to reach a sibling."""
    graph = nx.DiGraph()
    for name, path in found.items():
        graph.add_node(name)
        for target in imports(name, path, set(found)):
            if not target.startswith(name + ".") and not name.startswith(target + "."):
                graph.add_edge(name, target)
    return sorted(sorted(c) for c in nx.simple_cycles(graph))


def _literal_strings(node: ast.AST) -> set[str]:
    """The string constants directly inside a literal collection (a dict's keys and values)."""
    if isinstance(node, ast.Dict):
        items = [k for k in node.keys if k is not None] + list(node.values)
    elif isinstance(node, (ast.Set, ast.Tuple, ast.List)):
        items = list(node.elts)
    else:
        return set()
    return {x.value for x in items if isinstance(x, ast.Constant) and isinstance(x.value, str)}


def tables_in(source: str, words: set[str], lower: bool = False) -> list[tuple[int, list[str]]]:
    """(line, names) of each literal collection in ``source`` naming two of ``words`` or more."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = {n.lower() for n in _literal_strings(node)} if lower else _literal_strings(node)
        hits = sorted(names & words)
        if len(hits) >= 2:
            found.append((node.lineno, hits))  # type: ignore[attr-defined]
    return found


def second_tables(words: set[str], homes: tuple[str, ...], root: Path = ROOT, lower: bool = False) -> list[str]:
    """``path:line names`` of every literal table of ``words`` outside the files ``homes``.
    O(source size)."""
    out = []
    for path in modules(root).values():
        rel = path.relative_to(root).as_posix()
        if rel not in homes:
            out += [f"{rel}:{line} {names}" for line, names in tables_in(path.read_text(), words, lower)]
    return sorted(out)
