"""Imports inside lmdbio run one way: the module graph, read from the source, has no cycle.

Every ``import`` counts, at module level and inside functions (a lazy import
that closes a circle is still a circle: it only moves the failure to run
time). The graph is built with :mod:`ast`, nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "lmdbio"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}`` for every .py file under ``root``."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    known = set(files)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                # ``from . import x`` / ``from .a import b``: x or b may be a module.
                targets = [f"{stem}.{a.name}" for a in node.names] + [stem]
            for t in targets:
                # The deepest known module the name points into (a function
                # imported from a module is an edge to that module).
                while t and t not in known:
                    t = t.rpartition(".")[0]
                if t and t != mod and not mod.startswith(t + "."):
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycle_in_lmdbio():
    graph = import_graph(PKG)
    assert "lmdbio.reader" in graph and "lmdbio.format" in graph["lmdbio.index"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_sees_lazy_and_relative_imports(tmp_path):
    # A package whose only cycle goes through a function-level import.
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n    return a\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.a"]
    (pkg / "sub" / "b.py").write_text("def f():\n    return 1\n")
    assert find_cycle(import_graph(pkg)) is None


@pytest.mark.parametrize("line, target", [("from .. import a", "pkg.a"),
                                          ("from ..a import x", "pkg.a"),
                                          ("import pkg.a", "pkg.a")])
def test_edges_point_at_modules(tmp_path, line, target):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for f in ("__init__.py", "a.py", "sub/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "sub" / "c.py").write_text(line + "\n")
    assert target in import_graph(pkg)["pkg.sub.c"]
