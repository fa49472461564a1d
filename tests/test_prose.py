"""Every notebook's prose agrees with the committed results, and each claim notebook teaches.

:mod:`lmdbio.lab.lessons.prose` checks each number or comparison word that
carries a fact marker against the fact computed from ``data/results/``, and
refuses a measured-looking number or a comparison word with no marker and no
stated source, in the Markdown (captions included) and in the figure text a
notebook's code types; :mod:`lmdbio.lab.lessons.figtext` does the same for
the figure modules' own text and the claims' names. The first tests here show
the checkers catch a wrong number, a wrong word, an unbacked number or
comparison, and the old sentences that once disagreed with the data; the
others run them over every notebook.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from lmdbio.lab import claims
from lmdbio.lab.lessons import figtext, mechanism, prose
from lmdbio.lab.notebook_runner import notebooks

NOTEBOOKS = notebooks()
CLAIM_NOTEBOOKS = [p for p in NOTEBOOKS if 2 <= int(p.name[:2]) <= 10]


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


def test_a_phrase_fact_is_checked_word_for_word(tmp_path, facts07, monkeypatch):
    """A fact of several words ("not every") agrees only with the same words before its marker;
    its last word alone ("every target fails") states the opposite."""
    monkeypatch.setattr(facts07, "FACTS", {"which": lambda root: "not every"})
    right = _notebook(tmp_path, "07_coal.ipynb", "On local disk, not every<!-- =which --> target fails.")
    assert prose.check_notebook(right) == []
    wrong = _notebook(tmp_path, "07_coal.ipynb", "On local disk, every<!-- =which --> target fails.")
    (problem,) = prose.check_notebook(wrong)
    assert "states 'disk every', the results give not every" in problem.detail, problem.detail


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


def _cells(tmp_path: Path, name: str, *cells) -> Path:
    """A notebook of Markdown cells (strings) and code cells (``("code", source)``)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c[1]) if isinstance(c, tuple) else nbformat.v4.new_markdown_cell(c)
                for c in cells]
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_checker_reports_an_unmarked_comparison_and_passes_a_marked_static_or_asked_one(tmp_path, facts07):
    facts07.STATIC["faster than the disk"] = "a stated source"
    path = _notebook(tmp_path, "07_coal.ipynb",
                     "COAL reads 5.3x<!-- =ratio --> slower<!-- =how --> here. It is faster than the disk.",
                     "Will COAL be faster on the emulated GPFS?",
                     "**Predict, then run.** Say whether COAL gets faster, and write it down.",
                     "*The coalesced reads are slower on local disk, as the figure shows.*")
    (problem,) = prose.check_notebook(path)
    assert problem.cell == 3 and "'slower' compares" in problem.detail, problem


def test_checker_reports_a_claim_named_with_another_quantity(tmp_path, facts07):
    path = _notebook(tmp_path, "07_coal.ipynb",
                     "*C2 (LMM/LMDB) and C1 (I/O share, notebook 02) in each setting.*",
                     "*T (full stack/LMDB training time) in each setting.*")
    (problem,) = prose.check_notebook(path)
    assert problem.cell == 1 and f"lmdbio.lab.claims names it {claims.claim('T').short!r}" in problem.detail


def test_checker_reports_figure_text_a_notebook_types(tmp_path, facts07):
    path = _cells(tmp_path, "07_coal.ipynb",
                  ("code", 'fig = plots.training(s, meta, title="Emulated training")\n'
                           'fig = plots.training(s, meta, title=f"{r:.2f}x at P = {p}")\n'
                           'fig = plots.optimization(s, v, m, meta, mech_label="COAL is 2x faster")'))
    (problem,) = prose.check_notebook(path)
    assert "plots.optimization(mech_label=...) types '2x'" in problem.detail, problem


def test_figure_text_check_reports_a_typed_number_in_a_figure_module(tmp_path, monkeypatch):
    (tmp_path / "figmod_typed.py").write_text(
        '"""A figure module."""\nSTATIC = {"5-95% band": "a source"}\n\n\ndef f(ax, v):\n'
        '    """Draw."""\n    ax.set_title(f"{v:.2f} (5-95% band)", loc="lower left", color="#1e8449")\n'
        '    ax.annotate("LMM is 20x faster", (0, 0))\n    ax.set_xlabel("fewer records")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    found = [(p.cell, p.text) for p in figtext.module_problems(["figmod_typed"])]
    assert found == [(8, "LMM is 20x faster"), (9, "fewer records")], found


def test_figure_modules_type_no_unsourced_number_or_comparison():
    problems = figtext.module_problems()
    assert not problems, "\n".join(map(str, problems))


def test_each_claim_names_its_ratio_one_way_round():
    assert figtext.claim_name_problems() == []
    inverted = dataclasses.replace(claims.TRAINING, short="full stack/LMDB training time")
    (problem,) = figtext.claim_name_problems([inverted])
    assert "put the ratio different ways round" in problem.detail


#: Sentences that once disagreed with the data (issue 47's D1, D2 and D4), as they were written.
OLD_SENTENCES = {
    "D1": ("10_training.ipynb", "*T (full stack/LMDB training time) in each setting, side by side.*",
           "names T's quantity 'full stack/LMDB training time'"),
    "D2": ("10_training.ipynb", "AU says how busy the emulated accelerator is. On 2 cores more processes mean "
           "less compute per process, while the reading, the waiting and the allreduce do not shrink.",
           "'more' compares"),
    "D4": ("11_scale_model.ipynb", "**Question.** This machine runs at most 16 ranks on 2 cores; the papers ran "
           "up to 9,216 processes (36 per node, 256 nodes, one shared GPFS).", "'at most' compares"),
}


@pytest.mark.parametrize("case", OLD_SENTENCES, ids=str)
def test_the_old_sentences_that_disagreed_with_the_data_fail(case, tmp_path):
    name, sentence, expected = OLD_SENTENCES[case]
    problems = prose.check_notebook(_notebook(tmp_path, name, sentence))
    assert any(expected in p.detail for p in problems), problems


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
    # The attempt and reveal cells of each part: tests/test_exercises.py.
    code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert mechanism.BEGIN in text, "the stage's own code, shown unrun (lmdbio.lab.lessons.mechanism)"
    assert "demo.run(DEMO" in code, "a Reader loop a student can run"
    assert "show_settings(" in code, "the settings in one call"
    assert "Every number that decides a verdict" not in text, "the old boilerplate ending"


def test_notebooks_are_committed_without_outputs():
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            assert not cell.get("outputs"), f"{path.name} has outputs"


def test_compare_says_in_a_sentence_what_a_run_cannot_give(tmp_path):
    # A tiny run that lacks a point made pandas' own words appear ("'[0] not found in axis'").
    from lmdbio.lab.lessons.prose import _unavailable

    said = _unavailable(KeyError("[0] not found in axis"))
    assert said.startswith("Not in this run") and "not found in axis" not in said and said.endswith(".")
    table = prose.compare("07_coal", tmp_path)   # a run that measured nothing
    missing = table["this_run"][table["this_run"].str.startswith("Not")]
    assert len(missing) and missing.str.startswith("Not in this run: ").all(), missing.tolist()
    assert not table["this_run"].str.contains("not found in axis|Error", regex=True).any()
    assert not table["committed"].str.startswith("Not").any()
