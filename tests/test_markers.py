"""Test markers are set where each test is defined, and every one is declared in pyproject.toml.

The tiers are chosen by marker (``gate``: make check only; ``long``: make test-all only). A marker
added by a hook from a list of test names is lost without a word when a test is renamed, and an
undeclared marker is a typo that selects nothing (``--strict-markers`` in addopts refuses it too).
"""

import ast
import re
import subprocess
import sys
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


def _make_recipe(target: str) -> str:
    """The recipe lines of ``target:`` in the Makefile, joined."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
    assert m, f"no {target}: rule in the Makefile"
    return m.group(1)


def test_the_three_tiers_are_marker_expressions_and_each_includes_the_one_before():
    """make test: neither gate nor long; make check: not long (so it runs make test's tests
    too); make test-all: every test."""
    assert {"gate", "long"} <= _declared()
    assert '-m "not gate and not long" tests' in _make_recipe("test")
    assert '-m "not long" tests' in _make_recipe("check")
    assert re.search(r"\$\(PYTEST\) tests\n", _make_recipe("test-all"))
    assert {"gate", "long"} <= set(_used()), "a tier marker that no test carries"
    assert re.search(r"^make check$", (ROOT / ".ci" / "run").read_text(), re.M), "CI runs make check"


def test_machine_bound_tests_are_in_the_gate_and_no_test_is_in_two_tiers():
    """Slurm, throttled devices and the torch install never run in make test; no test carries
    both tier markers."""
    wrong = "(gate and long) or (not gate and not long and (slurm or throttled or torch))"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only",
                           "-q", "-m", wrong, str(TESTS)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 5, f"tests in the wrong tier:\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
