"""Every exercise's solution (``notebooks/solutions/``) runs and its own checks hold.

A solution is a script a student could have written: it makes its tiny
dataset (:func:`lmdbio.lab.lessons.demo.dataset`), runs the Reader under
``mpiexec -n N`` (its first line says ``# nprocs: N``), prints its table and
asserts the property the exercise asks about, so a solution whose answer
no longer holds fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lmdbio.lab.lessons import demo

SOLUTIONS = sorted((Path(__file__).resolve().parents[1] / "notebooks" / "solutions").glob("[0-9][0-9]_*.py"))


def _nprocs(path: Path) -> int:
    m = re.match(r"#\s*nprocs:\s*(\d+)", path.read_text())
    assert m, f"{path.name}: first line must be '# nprocs: N'"
    return int(m[1])


def test_there_are_solutions():
    assert len(SOLUTIONS) >= 9, [p.name for p in SOLUTIONS]


@pytest.mark.mpi
@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_solution_runs_and_its_checks_hold(path):
    assert "assert" in path.read_text(), f"{path.name} checks nothing"
    out = demo.mpirun(path, _nprocs(path), timeout=120)
    assert out.strip(), f"{path.name} printed nothing"
