"""Test markers are set where each test is defined, and every one is declared in pyproject.toml.

``make test-fast`` leaves tests out by marker (``slow``, ``fuse``, ``throttled``, ...). A marker
added by a hook from a list of test names is lost without a word when a test is renamed, and an
undeclared marker is a typo that selects nothing (``--strict-markers`` in addopts refuses it too).
"""

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

#: pytest's own markers, which need no declaration.
BUILTIN = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}
#: Hooks that could mark collected tests by name, away from their definitions.
ITEM_HOOKS = {"pytest_collection_modifyitems", "pytest_itemcollected", "pytest_runtest_setup"}


def _trees() -> dict[str, ast.Module]:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(), str(p))
            for p in sorted(TESTS.rglob("*.py"))}


def _declared() -> set[str]:
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    return {m.split(":")[0].strip() for m in ini["markers"]}


def _used() -> dict[str, list[str]]:
    """Marker name -> ``file:line`` of each ``pytest.mark.NAME`` in tests/."""
    used: dict[str, list[str]] = {}
    for file, tree in _trees().items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "mark" and isinstance(node.value.value, ast.Name)
                    and node.value.value.id == "pytest"):
                used.setdefault(node.attr, []).append(f"{file}:{node.lineno}")
    return used


def test_no_marker_is_added_away_from_its_test():
    """Mark a test with ``@pytest.mark.NAME`` (or a module with ``pytestmark``), never from a
    hook or ``add_marker``: those find tests by name."""
    found = []
    for file, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in ITEM_HOOKS:
                found.append(f"{file}:{node.lineno}: hook {node.name}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("add_marker", "applymarker")):
                found.append(f"{file}:{node.lineno}: {node.func.attr}(...)")
    assert not found, "markers set away from the tests they mark:\n" + "\n".join(found)


def test_every_marker_used_is_declared_in_pyproject():
    undeclared = {name: where for name, where in _used().items()
                  if name not in _declared() | BUILTIN}
    assert not undeclared, (f"markers not in pyproject.toml [tool.pytest.ini_options] markers: "
                            f"{undeclared}")


def test_make_test_fast_leaves_out_declared_markers_that_mark_tests():
    fast = re.search(r"^FAST\s*:?=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert fast, "no FAST := ... in the Makefile"
    left_out = set(re.findall(r"\bnot\s+(\w+)", fast.group(1)))
    assert {"slow", "fuse", "throttled", "fuzz"} <= left_out
    assert left_out <= _declared(), left_out - _declared()
    unused = left_out - set(_used())
    assert not unused, f"make test-fast leaves out markers no test carries: {sorted(unused)}"
