"""Every notebook's prose agrees with the committed results, and each claim notebook teaches.

:mod:`lmdbio.lab.lessons.prose` checks each number or comparison word that
carries a fact marker against the fact computed from ``data/results/``, and
refuses a measured-looking number with no marker and no stated source. The
first tests here show the checker itself catches a wrong number, a wrong
word and an unbacked number; the others run it over every notebook.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from lmdbio.lab.lessons import prose
from lmdbio.lab.notebook_runner import notebooks

NOTEBOOKS = notebooks()
CLAIM_NOTEBOOKS = [p for p in NOTEBOOKS if 2 <= int(p.name[:2]) <= 10]
SOLUTIONS = Path(__file__).resolve().parents[1] / "notebooks" / "solutions"


# --- the checker ------------------------------------------------------------------------------

@pytest.mark.parametrize("stated, value, ok", [
    ("5.3", 5.27, True), ("5.3", 5.36, False), ("27", 26.6, True), ("27", 27.6, False),
    ("0.19", 0.185, True), ("1,828", 1828.4, True), ("1,828", 1829, False), ("9.4e5", 936_062, True),
    ("9.4e5", 960_000, False), ("slower", "slower", True), ("slower", "faster", False),
    ("Slower", "slower", True), ("5.3", "5.3", False), ("slower", 1.0, False), ("3", True, False),
    ("3", float("nan"), False),
])
def test_agrees_rounds_to_the_digits_written(stated, value, ok):
    assert prose.agrees(stated, value) is ok


def test_token_takes_the_number_before_a_unit_and_strips_markdown():
    assert prose._token("DM is **5.3x") == "5.3x"
    assert prose._token("a copy of 2.2 GB/s") == "2.2"
    assert prose._token("it is (slower") == "slower"
    assert prose._token("I/O is 27%") == "27%"


def _notebook(tmp_path: Path, name: str, *texts: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(t) for t in texts]
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


@pytest.fixture
def facts07(monkeypatch):
    """Notebook 07's facts replaced by two known ones (the checker, not the notebook, is under test)."""
    mod = prose.module("07_coal")
    monkeypatch.setattr(mod, "FACTS", {"ratio": lambda root: 5.27, "how": lambda root: "slower"})
    monkeypatch.setattr(mod, "STATIC", {"1 ms per request": "profiles.toml"})
    return mod


def test_checker_passes_backed_prose(tmp_path, facts07):
    path = _notebook(tmp_path, "07_coal.ipynb",
                     "DM is 5.3x<!-- =ratio --> slower<!-- =how --> than LMM; 1 ms per request.",
                     "Code is not prose: `0.25` and\n```\nx = 9.9\n```")
    assert prose.check_notebook(path) == []


def test_checker_reports_a_wrong_number_a_wrong_word_and_an_unbacked_number(tmp_path, facts07):
    path = _notebook(tmp_path, "07_coal.ipynb",
                     "DM is 6.1x<!-- =ratio --> faster<!-- =how --> than LMM.",
                     "The sweep is flat at 92.9 MB/s, and a fact that is not there: 3x<!-- =nope -->.")
    problems = [p.detail for p in prose.check_notebook(path)]
    assert any("states '6.1x', the results give 5.27" in p for p in problems), problems
    assert any("states 'faster', the results give slower" in p for p in problems), problems
    assert any("'92.9' reads as measured" in p for p in problems), problems
    assert any("no fact named 'nope'" in p for p in problems), problems
    assert len(problems) == 4, problems


def test_checker_reports_a_fact_whose_results_are_missing(tmp_path, facts07, monkeypatch):
    monkeypatch.setattr(facts07, "FACTS", {"ratio": lambda root: prose.csv(root, "07_coal/absent.csv")})
    path = _notebook(tmp_path, "07_coal.ipynb", "COAL is 5.3x<!-- =ratio --> faster.")
    (problem,) = prose.check_notebook(path, tmp_path)
    assert "could not be computed" in problem.detail and "absent.csv" in problem.detail


def test_a_changed_committed_number_fails_the_notebook_it_backs(tmp_path):
    """Copy the committed results, change the numbers one notebook's facts read: its check fails."""
    nb = next(p for p in CLAIM_NOTEBOOKS if prose.module(p.name).FACTS)
    root = tmp_path / "results"
    shutil.copytree(prose.COMMITTED, root, ignore=shutil.ignore_patterns("*.png", "*.json"))
    assert prose.check_notebook(nb, root) == [], "the copy agrees before it is changed"
    for csv in root.rglob("*.csv"):
        text = csv.read_text()
        csv.write_text(re.sub(r"(?<=[,\n])(\d+)\.(\d+)", lambda m: f"{int(m[1]) * 3 + 7}.{m[2]}", text))
    assert prose.check_notebook(nb, root), f"{nb.name}: no stated number depends on its results"


# --- every notebook ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_prose_agrees_with_the_committed_results(path):
    problems = prose.check_notebook(path)
    assert not problems, "\n".join(map(str, problems))


def _markdown(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]


@pytest.mark.parametrize("path", CLAIM_NOTEBOOKS, ids=lambda p: p.name[:2])
def test_each_claim_notebook_teaches(path):
    md = _markdown(path)
    text = "\n".join(md)
    assert "**Objectives.**" in text, "objectives"
    assert re.search(r"\*\*Time:\*\* about \d+", text), "a time estimate"
    assert "**Predict, then run.**" in text, "a predict-then-run prompt"
    answer = [c for c in md if c.lstrip().startswith("## The answer")]
    assert len(answer) == 1, "one ending that answers"
    body = prose.MARKER.sub("", answer[0].split("\n", 1)[1])
    sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(*])", body.strip()) if len(s.split()) > 3]
    assert 3 <= len(sentences) <= 6, f"the answer has {len(sentences)} sentences, not 3-6"
    exercise = [c for c in md if c.lstrip().startswith("## Exercise")]
    assert exercise, "an exercise"
    named = re.findall(r"notebooks/solutions/([\w.]+\.py)", "\n".join(exercise))
    assert named and all((SOLUTIONS / n).exists() for n in named), f"its solution files {named}"
    code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert "inspect.getsource" in code, "the stage's own code"
    assert "demo.run(DEMO" in code, "a Reader loop a student can run"
    assert "show_settings(" in code, "the settings in one call"
    assert "Every number that decides a verdict" not in text, "the old boilerplate ending"


def test_notebooks_are_committed_without_outputs():
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            assert not cell.get("outputs"), f"{path.name} has outputs"
