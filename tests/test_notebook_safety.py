"""A student's experiment cannot overwrite the committed results; each notebook says how to run it.

Run from JupyterLab, a notebook is given no results, figures or datasets root:
:func:`lmdbio.lab.notebook_runner.workspace` sends a run (``RUN = True``) to
``build/scratch/NN/`` and has a replot (``RUN = False``) write nothing. Only
``make reproduce`` and ``make figures`` (``--committed``) write ``data/results/``
and ``figures/``. Every notebook opens with its committed figures embedded (a
stripped notebook in a repository viewer still shows its result) and a "How to
experiment" cell that names the switches and where a run's output goes.
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import nbformat
import pytest

from lmdbio.lab import plots
from lmdbio.lab.notebook_runner import (COMMITTED_FIGURES, DATASETS, REPO, SCRATCH,
                                        notebooks, run_notebooks, save_figure, workspace)
from lmdbio.lab.scales import COMMITTED_RESULTS

NOTEBOOKS = notebooks()
#: What no run from JupyterLab may change.
COMMITTED = ("data/results", "figures", "docs")
HOWTO = "### How to experiment"
NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


def _cells(path: Path):
    return nbformat.read(path, as_version=4).cells


def _params_index(cells) -> int:
    return next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))


def _saved_figures(cells) -> set[str]:
    src = "\n".join(c.source for c in cells if c.cell_type == "code")
    return (set(re.findall(r'(?:save_figure|plots\.save)\(fig, "([^"]+)"', src))
            | set(re.findall(r'show_settings\([^)]*name="([^"]+)"', src)))


# --- where a notebook writes ----------------------------------------------------------------------

def test_a_run_given_no_roots_writes_to_its_scratch_folder():
    ws = workspace("07_coal", "tiny", True)
    assert ws.results_root == (SCRATCH / "07" / "results").resolve()
    assert ws.figures_root == (SCRATCH / "07" / "figures").resolve()
    assert ws.datasets_root == (DATASETS / "tiny").resolve(), "a tiny run keeps off the default datasets"
    assert not ws.results_root.is_relative_to(COMMITTED_RESULTS)
    assert workspace("07_coal", "default", True).datasets_root == DATASETS.resolve()


def test_a_replot_given_no_roots_reads_the_committed_results_and_saves_no_figure():
    ws = workspace("11_scale_model", "default", False)
    assert ws.results_root == COMMITTED_RESULTS.resolve()
    assert ws.figures_root is None


def test_roots_that_are_given_are_kept(tmp_path):
    # make reproduce and make figures name the committed folders; the tests name tmp_path.
    ws = workspace("02_lmdb_analysis", "default", False, COMMITTED_RESULTS, COMMITTED_FIGURES,
                   tmp_path / "d")
    assert ws == (COMMITTED_RESULTS.resolve(), COMMITTED_FIGURES.resolve(), (tmp_path / "d").resolve())
    run = workspace("02_lmdb_analysis", "tiny", True, tmp_path / "r")
    assert run.results_root == (tmp_path / "r").resolve() and run.figures_root.is_relative_to(SCRATCH)


def test_save_figure_writes_only_where_a_figures_root_is(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    assert save_figure(fig, "probe", None) == []
    assert save_figure(fig, "probe", tmp_path) == [tmp_path / "probe.png", tmp_path / "probe.svg"]
    assert (tmp_path / "probe.png").stat().st_size > 1000
    plt.close(fig)


# --- what every notebook tells the student -------------------------------------------------------

@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_opens_with_its_figures_and_how_to_experiment(path):
    cells = _cells(path)
    top = cells[:_params_index(cells)]
    nn = path.stem[:2]
    howto = [c for c in top if c.cell_type == "markdown" and c.source.startswith(HOWTO)]
    assert len(howto) == 1, f"{path.name}: one '{HOWTO}' cell above the parameters cell"
    text = howto[0].source
    for switch in ("`scale", "`RUN = False`", "`RUN = True`", f"`build/scratch/{nn}/`"):
        assert switch in text, f"{path.name}: the How-to-experiment cell does not name {switch}"
    # The cell says where a run writes; workspace() is what sends it there.
    assert workspace(path.stem, "tiny", True).results_root.is_relative_to(SCRATCH / nn)
    embedded = [m for c in top if c.cell_type == "markdown"
                for m in re.findall(r"!\[[^\]]*\]\(\.\./figures/([^)]+)\.png\)", c.source)]
    assert embedded, f"{path.name}: no committed figure embedded above the parameters cell"
    for name in embedded:
        assert (REPO / "figures" / f"{name}.png").exists(), f"{path.name}: figures/{name}.png is missing"
        assert name in _saved_figures(cells), f"{path.name}: embeds {name}, which it does not draw"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_settings_counted_in_the_text_are_the_panels_drawn(path):
    # plots.claim_settings draws one panel per setting.
    panels = len(plots.SETTING_TITLES)
    for c in _cells(path):
        if c.cell_type != "markdown":
            continue
        for word in re.findall(r"\b(two|three|four|five|six|seven) settings\b", c.source, re.I):
            assert NUMBER_WORDS[word.lower()] == panels, \
                f"{path.name}: says '{word} settings'; the settings figures have {panels} panels"


# --- run as from JupyterLab ----------------------------------------------------------------------

def _snapshot(roots) -> dict[str, tuple[float, str]]:
    """Every file under ``roots`` (relative to the repository): its mtime and SHA-256."""
    found = {}
    for root in roots:
        for f in sorted((REPO / root).rglob("*")):
            if f.is_file():
                digest = hashlib.sha256(f.read_bytes()).hexdigest()
                found[str(f.relative_to(REPO))] = (f.stat().st_mtime, digest)
    return found


def _changed(before: dict, after: dict) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def _written_since(folder: Path, t0: float) -> list[str]:
    return sorted(str(f.relative_to(folder)) for f in folder.rglob("*")
                  if f.is_file() and f.stat().st_mtime >= t0)


def _as_from_jupyterlab(nb: str, run: bool, out: Path) -> nbformat.NotebookNode:
    """Execute notebook ``nb`` with only ``scale`` and ``RUN`` set, as a student edits them."""
    run_notebooks("tiny", out, run=run, only=[nb])
    executed = nbformat.read(next(out.glob(f"{nb}_*.ipynb")), as_version=4)
    injected = [c.source for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and not re.search(r"_root\b", injected[0]), injected
    return executed


def _outputs(nb: nbformat.NotebookNode) -> list[dict]:
    return [o for c in nb.cells for o in c.get("outputs", [])]


def _text(nb: nbformat.NotebookNode) -> str:
    return "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/markdown", ""))
                     for o in _outputs(nb))


@pytest.mark.notebooks
@pytest.mark.gate
@pytest.mark.parametrize("nb", ["00", "07"])
def test_a_replot_from_jupyterlab_writes_nothing(nb, tmp_path):
    # 07: figures, its settings figure and the closing verdicts, drawn from the committed results.
    before = _snapshot(COMMITTED)
    t0 = time.time()
    executed = _as_from_jupyterlab(nb, False, tmp_path)
    assert _changed(before, _snapshot(COMMITTED)) == []
    scratch = SCRATCH / nb
    assert not scratch.exists() or _written_since(scratch, t0) == [], "a replot wrote to the scratch folder"
    text = _text(executed)
    assert "RUN = False: replotting the results in data/results/; nothing is written" in text
    assert any("image/png" in o.get("data", {}) for o in _outputs(executed)), "no figure was shown"
    if nb == "07":
        assert "Verdicts (from the results in `results/`)" in text


@pytest.mark.notebooks
@pytest.mark.gate
def test_a_run_from_jupyterlab_writes_only_its_scratch_folder(tmp_path):
    before = _snapshot(COMMITTED)
    t0 = time.time()
    executed = _as_from_jupyterlab("00", True, tmp_path)
    scratch = SCRATCH / "00"
    written = _written_since(scratch, t0) if scratch.exists() else []
    for f in ("results/00_environment/meta.json", "results/00_environment/engines.csv",
              "figures/00_environment.png", "figures/00_environment.svg"):
        assert f in written, f"{f} not written to {scratch}: {written}"
    assert "RUN = True: results go to build/scratch/00/results/" in _text(executed)
    assert _changed(before, _snapshot(COMMITTED)) == []
