"""The architecture holds: no import circle, small modules, torch and the UI at the edges."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("partitioner", "cli", "explorer", "sample_models")
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules ``name`` imports anywhere (functions included), except under
    ``if TYPE_CHECKING:``; ``from pkg import mod`` counts as importing ``pkg.mod``."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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


def test_no_import_circle():
    modules = _modules()
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for target in _imports(name, path, set(modules)):
            # A package importing its own submodules (its front door) is not a circle.
            if not target.startswith(name + "."):
                graph.add_edge(name, target)
    # A submodule importing its package's __init__ only to reach a sibling counts as that
    # sibling: drop edges to an ancestor package, which re-exports by design.
    for a, b in list(graph.edges):
        if a.startswith(b + "."):
            graph.remove_edge(a, b)
    cycles = list(nx.simple_cycles(graph))
    assert cycles == [], f"import circles: {cycles[:5]}"


def test_no_source_file_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in _modules().values() if (n := len(p.read_text().splitlines())) > MAX_LINES
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
    for name in sorted(_modules()):
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
    "partitioner.pipeline.simulate",
    "partitioner.remat.memory",
    "partitioner.sharding.tensor_parallel",
    "partitioner.processes.worker",
    "partitioner.interop.readers",
    "partitioner.cluster",
    "partitioner.cluster.search",
    "partitioner.cluster.run",
    "partitioner.processes",
    "partitioner.interop.engines",
)


def test_algorithm_packages_import_no_torch():
    assert _fresh(f"import sys, {', '.join(TORCH_FREE)}; print('torch' in sys.modules)") == "False"


def test_library_imports_no_ui_library():
    code = (
        "import sys, partitioner, partitioner.draw.dag, partitioner.accelerator.compare, "
        "partitioner.plan.diff, partitioner.interop.export, partitioner.tracing; "
        "import partitioner.remat, partitioner.sharding.tensor_parallel, partitioner.runtime.execute; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'streamlit', 'plotly', 'graphviz', 'pandas'}))"
    )
    assert _fresh(code) == "[]"


def test_trace_is_the_function_after_importing_its_package():
    code = (
        "import partitioner, partitioner.tracing, torch; "
        "g = partitioner.trace(torch.nn.Linear(2, 2), (torch.randn(1, 2),)); print(len(g.op_names))"
    )
    assert _fresh(code) == "1"
