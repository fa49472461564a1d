"""Every exercise's solution (``notebooks/solutions/``) runs and its own checks hold.

A solution is a script a student could have written: it makes its tiny
dataset (:func:`lmdbio.lab.lessons.demo.dataset`), runs the Reader under
``mpiexec -n N`` (its first line says ``# nprocs: N``), prints its table and
asserts the property the exercise asks about, so a solution whose answer
no longer holds fails here. A script that also answers another part of its
exercise, with other arguments, declares that run in a comment line under
the first, ``# run: N ARGS`` (e.g. ``# run: 8 --sizes 2,4,8``); every
declared run is executed, and every command line that a notebook or a
solution's docstring gives for a solution must be one of them.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import nbformat
import pytest

from lmdbio.lab.lessons import demo

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((REPO / "notebooks" / "solutions").glob("[0-9][0-9]_*.py"))
#: A command line that names a solution: ``mpiexec -n N .venv/bin/python notebooks/solutions/NAME.py ARGS``.
COMMAND = re.compile(r"mpiexec -n (\d+) \S*python notebooks/solutions/([\w.]+\.py)([^\n`\\]*)")


def _runs(path: Path) -> list[tuple[int, tuple[str, ...]]]:
    """The runs ``path`` declares: ``(N, ())`` from its first line ``# nprocs: N``, then ``(N, ARGS)``
    from each ``# run: N ARGS`` among the comment lines right under it."""
    lines = path.read_text().splitlines()
    m = re.fullmatch(r"#\s*nprocs:\s*(\d+)\s*", lines[0] if lines else "")
    assert m, f"{path.name}: first line must be '# nprocs: N'"
    runs = [(int(m[1]), ())]
    for line in lines[1:]:
        if not line.startswith("#"):
            break
        if re.match(r"#\s*run\b", line):
            r = re.fullmatch(r"#\s*run:\s*(\d+)(.*)", line)
            assert r, f"{path.name}: {line!r} is not '# run: N ARGS'"
            runs.append((int(r[1]), tuple(shlex.split(r[2]))))
    assert len(set(runs)) == len(runs), f"{path.name} declares a run twice"
    return runs


RUNS = [(path, n, args) for path in SOLUTIONS for n, args in _runs(path)]


def _run_id(run) -> str:
    path, n, args = run
    return path.stem if not args else f"{path.stem} -n {n} {shlex.join(args)}"


def test_there_are_solutions():
    assert len(SOLUTIONS) >= 9, [p.name for p in SOLUTIONS]
    # Parts 2 of exercises 08-10 are runs of their part 1's script with other arguments.
    assert len(RUNS) >= len(SOLUTIONS) + 3, [_run_id(r) for r in RUNS]


def test_every_command_line_given_for_a_solution_is_a_run_here():
    declared = {(path.name, n, args) for path, n, args in RUNS}
    texts = {p.name: "\n".join(c.source for c in nbformat.read(p, as_version=4).cells)
             for p in sorted((REPO / "notebooks").glob("*.ipynb"))}
    texts |= {p.name: p.read_text() for p in SOLUTIONS}
    given = {(name, m[2], int(m[1]), tuple(shlex.split(m[3])))
             for name, text in texts.items() for m in COMMAND.finditer(text)}
    assert given, "no command line names a solution: the pattern no longer matches the notebooks"
    missing = sorted(f"{where}: mpiexec -n {n} ... {script} {shlex.join(args)}"
                     for where, script, n, args in given if (script, n, args) not in declared)
    assert not missing, "command lines that test_solution_runs_and_its_checks_hold does not run:\n" + "\n".join(missing)


@pytest.mark.mpi
@pytest.mark.parametrize("path,nprocs,args", RUNS, ids=[_run_id(r) for r in RUNS])
def test_solution_runs_and_its_checks_hold(path, nprocs, args):
    assert "assert" in path.read_text(), f"{path.name} checks nothing"
    out = demo.mpirun(path, nprocs, *args, timeout=120)
    assert out.strip(), f"{path.name} printed nothing"
