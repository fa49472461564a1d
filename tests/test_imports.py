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
    assert "lmdbio.reader" in graph and "lmdbio.format" in graph["lmdbio.recordindex"]
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


# ---------------------------------------------------------------- the library and the lab
#: The lab: everything that measures, models and explains the reader (``lmdbio[lab]``).
LAB = "lmdbio.lab"


def reverse_imports(graph: dict[str, set[str]], lab: str = LAB) -> list[tuple[str, str]]:
    """``(library module, lab module)`` for every import from the library into the lab."""
    inside = lambda m: m == lab or m.startswith(lab + ".")
    return sorted((m, t) for m, targets in graph.items() if not inside(m)
                  for t in targets if inside(t))


def test_the_library_imports_nothing_from_the_lab():
    graph = import_graph(PKG)
    assert any(m.startswith(LAB + ".") for m in graph) and "lmdbio.reader" in graph
    bad = reverse_imports(graph)
    assert not bad, "library modules import the lab: " + ", ".join(f"{a} -> {b}" for a, b in bad)


def test_a_reverse_import_is_found(tmp_path):
    # The same check on a small package: a lazy import from the library into the lab fails it.
    pkg = tmp_path / "lmdbio"
    (pkg / "lab").mkdir(parents=True)
    for f in ("__init__.py", "reader.py", "lab/__init__.py", "lab/bench.py"):
        (pkg / f).write_text("")
    (pkg / "lab" / "bench.py").write_text("from ..reader import x\n")   # lab -> library: fine
    assert reverse_imports(import_graph(pkg)) == []
    (pkg / "reader.py").write_text("def f():\n    from .lab import bench\n")
    assert ("lmdbio.reader", "lmdbio.lab.bench") in reverse_imports(import_graph(pkg))


#: Packages only the lab needs (``lmdbio[lab]``): the library must read without them.
LAB_ONLY = ("pandas", "matplotlib", "seaborn", "ipyparallel", "papermill", "nbformat", "nbclient",
            "jupyterlab", "ipykernel", "tqdm", "mfusepy", "yaml", "PIL", "hypothesis", "pytest")

BLOCKER = """
import importlib.abc, sys
BLOCKED = set(sys.argv.pop(1).split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
sys.meta_path.insert(0, Refuse())
for m in list(sys.modules):
    if m.split(".")[0] in BLOCKED:
        del sys.modules[m]
import runpy
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

READ = """
import sys
from mpi4py import MPI
import lmdbio
from lmdbio import make_dataset, Reader
path = sys.argv[1]
if MPI.COMM_WORLD.rank == 0:
    make_dataset(path, "cifar10", 300, commit_every=100, seed=5, progress=False)
MPI.COMM_WORLD.Barrier()
seen = []
with Reader(path, batch_size=32, variant="lmdbio-lmm-dio-prov-coal", build_provenance=True) as r:
    for b in r.epoch(0):
        seen += b.indices.tolist()
allseen = MPI.COMM_WORLD.gather(seen)
if MPI.COMM_WORLD.rank == 0:
    got = sorted(i for s in allseen for i in s)
    assert got == list(range(300)), got[:10]
    lab = sorted(m for m in sys.modules if m.startswith("lmdbio.lab"))
    print("read", len(got), "records; lab modules loaded:", lab)
"""


def test_the_library_reads_without_the_labs_packages(tmp_path):
    """Every lab-only package refused at import: lmdbio still writes, reads and ends cleanly,
    and the ``lmdbio`` command names the extra to install for a lab subcommand."""
    from conftest import run_mpi

    (tmp_path / "block.py").write_text(BLOCKER)
    (tmp_path / "read.py").write_text(READ)
    proc = run_mpi(tmp_path / "block.py", 2, ",".join(LAB_ONLY), tmp_path / "read.py",
                   tmp_path / "db", timeout=120)
    assert "read 300 records; lab modules loaded: []" in proc.stdout, proc.stdout + proc.stderr
    import subprocess
    import sys
    (tmp_path / "cli.py").write_text("import sys\nfrom lmdbio.cli import main\n"
                                     f"sys.exit(main(['bench', '--report', {str(tmp_path)!r}]))\n")
    out = subprocess.run([sys.executable, str(tmp_path / "block.py"), ",".join(LAB_ONLY),
                          str(tmp_path / "cli.py")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "pip install 'lmdbio[lab]'" in out.stderr, out.stderr


def lmdb_importers(root: Path) -> list[str]:
    """Library modules (not the lab) that import py-lmdb (``lmdb``) themselves."""
    out = []
    for path in sorted(root.rglob("*.py")):
        mod = module_name(path, root)
        if mod == LAB or mod.startswith(LAB + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            if any(n == "lmdb" or n.startswith("lmdb.") for n in names):
                out.append(mod)
                break
    return out


def test_every_py_lmdb_call_of_the_library_is_in_lmdbenv():
    """The lmdbenv package is where the library meets py-lmdb (one Environment per file per
    process, error translation, snapshots, cursor walks, writes): no other module imports it."""
    found = lmdb_importers(PKG)
    assert "lmdbio.lmdbenv.env" in found
    assert [m for m in found if not m.startswith("lmdbio.lmdbenv.")] == []


#: What left the library for the lab: (library module, names, their new module).
MOVED = [("lmdbio.metrics", ("evict", "residency", "resident_pages"), "lmdbio.lab.pagecache"),
         ("lmdbio.metrics", ("host_meta", "git_commit", "results_meta", "write_results_meta"),
          "lmdbio.lab.meta"),
         ("lmdbio.shuffle", ("mean_batch_distance", "adjacent_fraction", "mean_share_distance",
                             "position_correlation", "randomness_table", "format_table",
                             "mode_table", "format_mode_table", "REFERENCE_SEED", "gap_entropy",
                             "uniform_gap_entropy", "batch_class_shares", "order_quality",
                             "node_reader_bytes", "quality_table", "format_quality_table"),
          "lmdbio.lab.shuffle_quality"),
         ("lmdbio.provenance", ("arithmetic_offsets", "model_parameters"),
          "lmdbio.lab.prov_offsets")]


def defined_names(path: Path) -> set[str]:
    """Names a module binds at its top level (functions, classes, assignments, imports)."""
    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


@pytest.mark.parametrize("module, names, home", MOVED, ids=[m[2] for m in MOVED])
def test_lab_code_left_the_library_and_its_old_names_warn(module, names, home):
    """The moved names are defined in the lab only; the library module neither defines nor lists
    them, and reading one there warns with the new spelling and gives the lab's object."""
    import importlib
    import warnings

    path = PKG.parent / (module.replace(".", "/") + ".py")
    lib = importlib.import_module(module)
    assert not set(names) & defined_names(path), f"{module} still defines lab code"
    assert not set(names) & set(lib.__all__)
    new = importlib.import_module(home)
    for name in names:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = getattr(lib, name)
        assert got is getattr(new, name)
        assert [w.category for w in caught] == [DeprecationWarning]
        assert f"{home}.{name}" in str(caught[0].message)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = lib.no_such_name
