"""Exercises that teach: each part of an exercise in 02-10 has an attempt cell and a solution it reveals.

The Dask tutorial's shape: under the exercise, each part has an attempt cell
(a script with TODOs that runs nothing while a TODO is left, so Run All
stays safe), then a reveal cell that ``%load``s the solution from
``notebooks/solutions/`` (``tests/test_solutions.py`` runs every one). The
notebook ends with "Key points", and its time says the teaching and the
exercise apart. Static: the notebooks' JSON is read, nothing runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "notebooks" / "solutions"
LESSONS = [p for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")) if 2 <= int(p.name[:2]) <= 10]
LOAD = re.compile(r"^%load solutions/([\w.]+\.py)$", re.M)


def exercise_problems(path: Path) -> list[str]:
    """What the exercise of the notebook at ``path`` lacks."""
    cells = nbformat.read(path, as_version=4).cells
    starts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.lstrip().startswith("## Exercise")]
    if len(starts) != 1:
        return [f"{len(starts)} '## Exercise' cells; a lesson has one"]
    i = starts[0]
    parts = [int(n) for n in re.findall(r"^(\d+)\. ", cells[i].source, re.M)] or [1]
    after = cells[i + 1:]
    problems = []
    attempts = {int(m[1]): c for c in after if c.cell_type == "code"
                for m in [re.search(r"^ATTEMPT_(\d+) = ", c.source, re.M)] if m}
    for n in parts:
        c = attempts.get(n)
        if c is None:
            problems.append(f"part {n} has no attempt cell (ATTEMPT_{n} = r'''...''')")
        elif "TODO" not in c.source or f'if "TODO" not in ATTEMPT_{n}:' not in c.source:
            problems.append(f"part {n}'s attempt cell has no TODO, or runs while a TODO is left")
    loads = [m for c in after if c.cell_type == "code" for m in LOAD.findall(c.source)]
    if not loads:
        problems.append("no reveal cell (%load solutions/NN_part.py)")
    problems += [f"reveal cell loads solutions/{n}, which does not exist" for n in loads if not (SOLUTIONS / n).exists()]
    last = max((k for k, c in enumerate(after) if LOAD.search(c.source)), default=-1)
    if attempts and last < max(k for k, c in enumerate(after) if c in attempts.values()):
        problems.append("the last part's attempt comes after the last reveal: its solution is not revealed")
    if not any(c.cell_type == "markdown" and c.source.startswith("## Key points") for c in cells[-2:]):
        problems.append("no '## Key points' cell at the end")
    if not re.search(r"\*\*Time:\*\* about \d+ minutes to read and about \d+ minutes for the exercise",
                     "\n".join(c.source for c in cells if c.cell_type == "markdown")):
        problems.append("the time does not give teaching and exercise apart")
    return problems


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name[:2])
def test_each_exercise_part_has_an_attempt_and_a_revealed_solution(path):
    problems = exercise_problems(path)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_every_solution_is_revealed_somewhere():
    loaded = {n for p in sorted((REPO / "notebooks").glob("*.ipynb"))
              for c in nbformat.read(p, as_version=4).cells for n in LOAD.findall(c.source)}
    named = {n for p in sorted((REPO / "notebooks").glob("*.ipynb"))
             for c in nbformat.read(p, as_version=4).cells if c.cell_type == "markdown"
             for n in re.findall(r"notebooks/solutions/([\w.]+\.py)", c.source)}
    lessons = {p.name for p in SOLUTIONS.glob("[0-9][0-9]_*.py") if 2 <= int(p.name[:2]) <= 10}
    assert lessons <= loaded, f"solutions no reveal cell loads: {sorted(lessons - loaded)}"
    others = {p.name for p in SOLUTIONS.glob("[0-9][0-9]_*.py")} - lessons
    assert others <= loaded | named, f"solutions no notebook names: {sorted(others - loaded - named)}"


def test_the_check_finds_a_part_without_an_attempt(tmp_path):
    src = next(p for p in LESSONS if p.name.startswith("09"))
    nb = nbformat.read(src, as_version=4)
    nb.cells = [c for c in nb.cells if "ATTEMPT_2 = " not in c.source]
    nbformat.write(nb, tmp_path / src.name)
    assert exercise_problems(tmp_path / src.name) == ["part 2 has no attempt cell (ATTEMPT_2 = r'''...''')"]
