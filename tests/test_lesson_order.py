"""Predict, then see: no notebook shows an answer before it asks for a prediction.

Each notebook asks one "**Predict, then run.**" question. The cell right after
it is the reader's "**Your prediction.**" cell (Markdown, or a code cell that
starts with ``# Your prediction``), and no cell above the prompt shows a
result: no embedded figure, no figure caption, no "The result" block, no
ending that answers, no code that draws a figure. The results come after the
prediction cell. Static: the notebooks' JSON is read, nothing runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
PROMPT = "**Predict, then run.**"
PREDICTION = ("**Your prediction.", "# Your prediction")
#: Markdown that shows a result: an embedded figure, a caption (an italic paragraph), the result
#: block or the ending that answers.
SHOWS = re.compile(r"\]\(\.\./figures/[^)]*\)|^\*\*The result\.\*\*|^## The answer|^\*[^*\s][^\n]*\*$", re.M)
#: Code that draws a figure.
DRAWS = re.compile(r"\b(?:save_figure|show_settings)\(|\bplots\.(?!setup\b)\w+\(|\bfigures\.\w+_figure\(")


def _shows(cell: dict) -> str | None:
    """What of a result ``cell`` shows (the matched text), or None."""
    source = "".join(cell["source"])
    pattern = SHOWS if cell["cell_type"] == "markdown" else DRAWS if cell["cell_type"] == "code" else None
    m = pattern.search(source) if pattern else None
    return m.group(0) if m else None


def order_problems(path: Path) -> list[str]:
    """Every way the notebook at ``path`` shows an answer before its prediction is written."""
    cells = json.loads(Path(path).read_text())["cells"]
    sources = ["".join(c["source"]).lstrip() for c in cells]
    prompts = [i for i, (c, s) in enumerate(zip(cells, sources))
               if c["cell_type"] == "markdown" and s.startswith(PROMPT)]
    if len(prompts) != 1:
        return [f"{len(prompts)} cells start with {PROMPT!r}; a lesson asks one"]
    p = prompts[0]
    problems = [f"cell {i}, above the prompt (cell {p}), shows a result: {shown!r}"
                for i, shown in ((i, _shows(c)) for i, c in enumerate(cells[:p])) if shown]
    if p + 1 >= len(cells) or not sources[p + 1].startswith(PREDICTION):
        problems.append(f"cell {p + 1}, right after the prompt, is not a prediction cell "
                        f"(one that starts with {PREDICTION[0]!r})")
    elif _shows(cells[p + 1]):
        problems.append(f"the prediction cell {p + 1} shows a result: {_shows(cells[p + 1])!r}")
    if not any(_shows(c) for c in cells[p + 2:]):
        problems.append("no result follows the prediction cell")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_the_prediction_comes_before_the_result(path):
    problems = order_problems(path)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def _lesson(tmp_path: Path, *cells) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c[1]) if isinstance(c, tuple) else nbformat.v4.new_markdown_cell(c)
                for c in cells]
    path = tmp_path / "lesson.ipynb"
    nbformat.write(nb, path)
    return path


RESULT = "**The result.**\n\n![x](../figures/x.png)\n\n*LMM is slower here.*"


def test_a_result_above_the_prompt_fails(tmp_path):
    path = _lesson(tmp_path, "# Q", RESULT, f"{PROMPT} Faster?", "**Your prediction.** _…_")
    problems = order_problems(path)
    assert len(problems) == 2 and problems[0].startswith("cell 1, above the prompt"), problems
    assert "no result follows" in problems[1]


def test_a_prompt_without_a_prediction_cell_fails(tmp_path):
    path = _lesson(tmp_path, "# Q", f"{PROMPT} Faster?", RESULT, "## The answer\n\nSlower.")
    (problem,) = order_problems(path)
    assert "cell 2, right after the prompt, is not a prediction cell" in problem


def test_code_that_draws_above_the_prompt_fails_and_the_right_order_passes(tmp_path):
    drawn = _lesson(tmp_path, ("code", "plots.setup()\nfig = plots.training(s)"), f"{PROMPT} Faster?",
                    "**Your prediction.** _…_", RESULT)
    assert ["plots.training(" in p for p in order_problems(drawn)] == [True]
    ok = _lesson(tmp_path, "# Q", ("code", "plots.setup()"), f"{PROMPT} Faster?",
                 ("code", "# Your prediction: write it here\n"), RESULT)
    assert order_problems(ok) == []
