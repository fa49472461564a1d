"""Every figure a notebook draws or names is embedded, after its prediction prompt, and exists.

A stripped notebook in a repository viewer shows no outputs: a figure that
the text points at ("the dotted line", "the grey line") must be an embedded
image there. Static: the notebooks' JSON is read, nothing runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
FIGURES = {p.stem for p in (REPO / "figures").glob("*.png")}
EMBED = re.compile(r"!\[[^\]]*\]\(\.\./figures/([^)]+)\.png\)")
DRAWN = re.compile(r"""(?:save_figure\([^,]+,|\bname=)\s*["'](\d\d_\w+)["']""")
NAMED = re.compile(r"\b(\d\d_[a-z0-9_]+)\b")
PROMPT = "**Predict, then run.**"


def figure_problems(path: Path) -> list[str]:
    """Each figure ``path`` draws or names that is not embedded after its prompt, or is missing."""
    cells = nbformat.read(path, as_version=4).cells
    prompt = next((i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.lstrip().startswith(PROMPT)),
                  0)
    md = [c.source for c in cells if c.cell_type == "markdown"]
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    embedded = {m for c in cells[prompt:] if c.cell_type == "markdown" for m in EMBED.findall(c.source)}
    named = {m for s in md for m in NAMED.findall(EMBED.sub("", s)) if m in FIGURES}
    wanted = set(DRAWN.findall(code)) | named
    problems = [f"{name}: drawn or named, not embedded after the prompt (add ![...](../figures/{name}.png))"
                for name in sorted(wanted - embedded)]
    problems += [f"{name}: embedded, but figures/{name}.png does not exist (make figures)"
                 for name in sorted(embedded - FIGURES)]
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_figure_drawn_or_named_is_embedded(path):
    problems = figure_problems(path)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_the_check_catches_a_figure_that_is_only_named(tmp_path):
    src = REPO / "notebooks" / "02_lmdb_analysis.ipynb"
    nb = nbformat.read(src, as_version=4)
    for c in nb.cells:
        c.source = c.source.replace("![LMDB: sleep time and context switches against the processes]"
                                    "(../figures/02_lmdb_contention.png)", "")
    nbformat.write(nb, tmp_path / src.name)
    assert figure_problems(tmp_path / src.name) == [
        "02_lmdb_contention: drawn or named, not embedded after the prompt "
        "(add ![...](../figures/02_lmdb_contention.png))"]
