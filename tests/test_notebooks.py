"""The notebooks: committed without outputs, one `parameters` cell, and each one runs at tiny scale.

The execution tests run every notebook with papermill at ``scale="tiny"``,
writing results, figures and datasets under ``tmp_path`` (never over the
committed ones), and check that each notebook wrote the figures it saves.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from lmdbio.notebook_runner import REPO, notebooks, run_notebooks

NOTEBOOKS = notebooks()
EXPECTED = ["00_environment", "01_datasets", "02_lmdb_analysis", "03_lmm", "04_dm", "05_dio",
            "06_prov", "07_coal", "08_stag", "09_scaling", "10_training", "11_scale_model"]


# What a cluster's engines or controller print when they are killed instead of shut down.
ENGINE_NOISE = re.compile(r"Traceback|KernelNanny|\[IPEngine|\[IPController|\[Engine\.|"
                          r"received signal \d+|Event loop stopped before Future completed")


def engine_noise(nb_path: Path) -> list[str]:
    """Lines of a notebook's outputs that are tracebacks or engine/controller log lines."""
    nb = nbformat.read(nb_path, as_version=4)
    found = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            text = o.get("text", "") + "\n".join(o.get("traceback", []))
            text += "".join(str(v) for k, v in o.get("data", {}).items() if k == "text/plain")
            found += [line for line in text.splitlines() if ENGINE_NOISE.search(line)]
    return found


def _figures(nb_path: Path) -> list[str]:
    """Figure names a notebook saves: plots.save(fig, "NAME", ...)."""
    nb = nbformat.read(nb_path, as_version=4)
    src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return re.findall(r'plots\.save\(fig, "([^"]+)"', src)


def test_all_notebooks_present_in_order():
    assert [p.stem for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs_and_with_one_parameters_cell(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for c in code:
        assert c.outputs == [], f"{path.name}: a code cell has outputs; strip them before committing"
        assert c.execution_count is None, f"{path.name}: a code cell has an execution count"
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
    src = tagged[0].source
    for name in ("scale", "RUN", "results_root", "figures_root", "datasets_root"):
        assert re.search(rf"^{name} = ", src, re.M), f"{path.name}: parameters cell lacks {name}"
    assert 'scale = "default"' in src and "RUN = True" in src
    assert nb.cells[0].cell_type == "markdown" and "Question" in nb.cells[0].source
    assert nb.cells[-1].cell_type == "markdown" and "show" in nb.cells[-1].source
    assert _figures(path), f"{path.name} saves no figure"


def test_generator_reproduces_the_committed_notebooks(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_nb", REPO / "notebooks" / "_make_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "HERE", tmp_path)
    for name, cells in mod.NOTEBOOKS.items():
        fresh = nbformat.read(mod.write(name, mod._fill(cells)), as_version=4)
        committed = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
        assert [c.source for c in fresh.cells] == [c.source for c in committed.cells], \
            f"{name}.ipynb differs from notebooks/_make_notebooks.py; regenerate it"


@pytest.mark.notebooks
@pytest.mark.slow
def test_every_notebook_runs_at_tiny_scale_and_writes_its_figures(tmp_path):
    committed = {p: p.stat().st_mtime for p in (REPO / "figures").glob("*.png")}
    done = run_notebooks("tiny", tmp_path / "out", results_root=tmp_path / "results",
                         figures_root=tmp_path / "figures", datasets_root=tmp_path / "datasets")
    assert [d["notebook"] for d in done] == [p.name for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        for fig in _figures(path):
            for ext in ("png", "svg"):
                f = tmp_path / "figures" / f"{fig}.{ext}"
                assert f.exists() and f.stat().st_size > 1000, f"{path.name} did not write {f.name}"
        assert (tmp_path / "out" / path.name).exists()
        # Starting and stopping clusters prints no traceback and no engine log line.
        noise = engine_noise(tmp_path / "out" / path.name)
        assert noise == [], f"{path.name} shows engine output: {noise[:5]}"
    assert any((tmp_path / "results").rglob("meta.json"))
    # The committed figures were not touched.
    assert {p: p.stat().st_mtime for p in (REPO / "figures").glob("*.png")} == committed


@pytest.mark.notebooks
def test_replot_from_committed_results_without_mpi(tmp_path):
    results = REPO / "data" / "results"
    if not any(results.glob("*/meta.json")):
        pytest.skip("no committed results yet")
    run_notebooks("default", tmp_path / "out", run=False, results_root=results,
                  figures_root=tmp_path / "figures", datasets_root=tmp_path / "datasets")
    for path in NOTEBOOKS:
        for fig in _figures(path):
            assert (tmp_path / "figures" / f"{fig}.png").exists(), f"{path.name}: {fig} not replotted"
