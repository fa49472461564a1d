"""The notebooks: committed without outputs, one `parameters` cell, and each one runs at tiny scale.

The execution tests run every notebook with papermill at ``scale="tiny"``,
writing results, figures and datasets under a temporary folder (never over the
committed ones), and check that each notebook wrote the figures it saves.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from lmdbio.lab import claims, scales
from lmdbio.lab.cluster import shared_cluster
from lmdbio.lab.experiments import pfs_unavailable
from lmdbio.lab.notebook_runner import REPO, notebooks, run_notebooks, strip, unstripped

NOTEBOOKS = notebooks()
EXPECTED = ["00_environment", "01_datasets", "02_lmdb_analysis", "03_lmm", "04_dm", "05_dio",
            "06_prov", "07_coal", "08_stag", "09_scaling", "10_training", "11_scale_model", "12_beyond"]
#: Notebooks past the papers: their verdicts are the issues' targets, not the claims.
BEYOND = ("12",)


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
    """Figure names a notebook saves: save_figure(fig, "NAME", ...) or plots.save(fig, "NAME", ...)."""
    nb = nbformat.read(nb_path, as_version=4)
    src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return re.findall(r'(?:save_figure|plots\.save)\(fig, "([^"]+)"', src)


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
    # Safe by default: Run All from JupyterLab replots the committed results and writes nothing.
    assert re.search(r'^RUN = False\b', src, re.M) and re.search(r'^scale = "tiny"', src, re.M), \
        f"{path.name}: the committed parameters must be RUN = False, scale = \"tiny\""
    assert nb.cells[0].cell_type == "markdown" and "Question" in nb.cells[0].source
    shows = [c for c in nb.cells if c.cell_type == "markdown" and "show" in c.source]
    assert shows, f"{path.name}: says what its figures show"
    assert _figures(path), f"{path.name} saves no figure"


def test_notebooks_are_the_source_and_committed_stripped():
    # No generator: the .ipynb files are what people edit in JupyterLab.
    assert not list((REPO / "notebooks").glob("*.py")), "notebooks/ holds only the notebooks"
    dirty = [p.name for p in unstripped(NOTEBOOKS)]
    assert dirty == [], f"{dirty} carry outputs or run metadata; run: make strip"


def test_strip_removes_what_running_adds(tmp_path):
    nb = nbformat.read(NOTEBOOKS[3], as_version=4)
    nb.metadata["widgets"] = {"state": {}}
    nb.metadata["papermill"] = {"duration": 1.0}
    nb.metadata["language_info"].update(version="3.11.2", mimetype="text/x-python")
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", text="hello\n")]
    code.execution_count = 7
    code.metadata["execution"] = {"iopub.status.idle": "2026-11-30"}
    code.metadata["papermill"] = {"duration": 0.5}
    f = tmp_path / "nb.ipynb"
    nbformat.write(nb, f)
    assert unstripped([f, NOTEBOOKS[3]]) == [f]
    strip([f])
    clean = nbformat.read(f, as_version=4)
    assert set(clean.metadata) <= {"kernelspec", "language_info"}
    assert clean.metadata["language_info"] == {"name": "python"}
    assert all(c.outputs == [] and c.execution_count is None for c in clean.cells if c.cell_type == "code")
    assert all(set(c.metadata) <= {"tags"} for c in clean.cells)
    tagged = [c for c in clean.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "stripping keeps papermill's parameters tag"
    assert [c.id for c in clean.cells] == [c.id for c in nb.cells], "cell ids are kept"
    assert unstripped(f) == []
    assert nbformat.reads(nbformat.writes(clean), as_version=4) == nbformat.read(NOTEBOOKS[3], as_version=4)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_settings_come_from_lmdbio_scales(path):
    nb = nbformat.read(path, as_version=4)
    src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert f'scales.settings("{path.stem}", scale' in src, f"{path.name}: take cfg from lmdbio.lab.scales"
    assert not re.search(r"^SCALES\s*=", src, re.M), f"{path.name}: a copy of the scales"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem[:2] not in ("00", "01", *BEYOND)],
                         ids=lambda p: p.stem)
def test_claim_notebooks_close_with_the_verdicts_from_claims_csv(path):
    nb = nbformat.read(path, as_version=4)
    # The last code cell before the exercise (its attempt and reveal cells follow it).
    last = [c for c in nb.cells if c.cell_type == "code"
            and not re.search(r"^ATTEMPT_\d+ = |^%load ", c.source, re.M)][-1]
    assert "claims.show(results_root" in last.source, \
        f"{path.name}: the closing code cell renders the verdicts from claims.csv"
    if path.stem[:2] != "11":
        src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        # lmdbio.lab.lessons.settings runs the emulated GPFS, the throttled device and the model.
        for needed in ("measure_settings(", "show_settings(", f'"{path.stem}_settings"'):
            assert needed in src, f"{path.name}: the settings need {needed}"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem[:2] in BEYOND], ids=lambda p: p.stem)
def test_beyond_notebooks_judge_targets_with_the_claims_rule_and_render_the_close(path):
    nb = nbformat.read(path, as_version=4)
    src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "beyond.verdicts(" in src, f"{path.name}: verdicts come from lmdbio.lab.beyond.verdicts"
    assert "emulated_pfs(" in src and "settings_results(" in src, f"{path.name}: GPFS measured or replotted"
    assert "targets.itertuples()" in src, f"{path.name}: a cell renders each target's verdict from the results"
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert "render_claims_summary(" in last.source, f"{path.name}: the series ends with the claims table"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """``tiny_run(only)``: the notebooks of ``only`` (None: every one) run at tiny scale, every
    root under one folder of this module's; returns (that folder, their runs).

    A notebook is run once per module, in notebook order, when a test first asks for it:
    make check's full run (its test comes first) serves notebook 07's test too, and
    make test, which leaves the full run out, runs 07 alone, in a cluster of the runner's.
    Several notebooks share one cluster of this fixture's (the runner lends it to each in
    turn): starting one per notebook would cost seconds each, and each notebook's own is
    checked by the runs of one notebook (07 here, 05 without FUSE, test_notebook_safety).
    """
    root = tmp_path_factory.mktemp("tiny")
    done: dict[str, dict] = {}

    def run(only: list[str] | None = None) -> tuple[Path, list[dict]]:
        wanted = notebooks(only)
        todo = [p for p in wanted if p.name not in done]
        if todo:
            n = max(scales.settings(p.stem, "tiny")["n_engines"] for p in todo)
            with shared_cluster(n, work_dir=todo[0].parent) if len(todo) > 1 else nullcontext():
                done.update((d["notebook"], d) for d in run_notebooks(
                    "tiny", root / "out", only=[p.stem for p in todo], results_root=root / "results",
                    figures_root=root / "figures", datasets_root=root / "datasets"))
        return root, [done[p.name] for p in wanted]
    return run


def _check_wrote_its_figures(path: Path, root: Path) -> None:
    """The notebook ran to ``root/out``, saved every figure it names, and shows no engine output."""
    for fig in _figures(path):
        for ext in ("png", "svg"):
            f = root / "figures" / f"{fig}.{ext}"
            assert f.exists() and f.stat().st_size > 1000, f"{path.name} did not write {f.name}"
    assert (root / "out" / path.name).exists()
    # Starting and stopping clusters prints no traceback and no engine log line.
    noise = engine_noise(root / "out" / path.name)
    assert noise == [], f"{path.name} shows engine output: {noise[:5]}"


@pytest.mark.notebooks
@pytest.mark.gate
def test_every_notebook_runs_at_tiny_scale_and_writes_its_figures(tiny_run):
    committed = {p: p.stat().st_mtime for p in (REPO / "figures").glob("*.png")}
    root, done = tiny_run()
    assert [d["notebook"] for d in done] == [p.name for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        _check_wrote_its_figures(path, root)
    assert any((root / "results").rglob("meta.json"))
    # The claims: every claim x setting, judged from this run's results (GPFS too where FUSE
    # works; the throttled device where this run measured it, else the committed copy or no data).
    table = pd.read_csv(root / "results" / "claims.csv")
    assert list(table.columns[:6]) == claims.COLUMNS
    # Every claim in every setting (the model judges some claims once per workload), and the
    # model's poster-axis checks.
    pairs = set(zip(table["claim"], table["setting"]))
    assert {(c.id, st) for c in claims.CLAIMS for st in claims.SETTINGS} <= pairs
    assert {c for c, _ in pairs} <= {c.id for c in claims.CLAIMS} | set(claims.CHECKS)
    measured_here = {"local", "model"} | ({"gpfs"} if pfs_unavailable() is None else set())
    for r in table.itertuples():
        # Notebook 09 measures CIFAR only: ImageNet's C8 is judged by the model alone.
        no_data_ok = r.setting == "throttled" or (r.claim == "C8-imagenet" and r.setting != "model")
        allowed = set(claims.VERDICTS) - (set() if no_data_ok else {"no data"})
        assert r.verdict in allowed, f"{r.claim} {r.setting}: {r.verdict} ({r.why})"
        if r.setting in measured_here and r.verdict != "no data":
            assert "[committed results" not in r.why, f"{r.claim} {r.setting} was not measured by this run"
            assert str(root) in r.source
    # The committed figures were not touched.
    assert {p: p.stat().st_mtime for p in (REPO / "figures").glob("*.png")} == committed


@pytest.mark.notebooks
def test_notebook_07_runs_at_tiny_scale_and_writes_its_figures_and_results(tiny_run):
    """The fast tier's notebook run: one notebook through the runner (its cells share one
    cluster), into temporary roots; in make check, the full run's notebook 07."""
    path = next(p for p in NOTEBOOKS if p.stem == "07_coal")
    root, done = tiny_run(["07"])
    assert [d["notebook"] for d in done] == [path.name] and done[0]["ok"]
    _check_wrote_its_figures(path, root)
    results = root / "results" / path.stem
    assert (results / "meta.json").exists() and len(pd.read_csv(results / "rows.csv")) > 0
    assert (results / "model" / "predictions.csv").exists()
    verdicts = pd.read_csv(root / "results" / "claims.csv")
    mine = verdicts[(verdicts["notebook"] == path.stem) & (verdicts["setting"] == "local")]
    assert len(mine) and mine["source"].str.startswith(str(root)).all()


@pytest.mark.notebooks
@pytest.mark.gate
def test_replot_from_committed_results_without_mpi(tmp_path):
    results = REPO / "data" / "results"
    if not any(results.glob("*/meta.json")):
        pytest.skip("no committed results yet")
    before = (results / "claims.csv").read_text()
    # Two at a time, as `make figures` does; a replot (RUN=False) never rewrites claims.csv.
    run_notebooks("default", tmp_path / "out", run=False, results_root=results, jobs=2,
                  figures_root=tmp_path / "figures", datasets_root=tmp_path / "datasets")
    assert (results / "claims.csv").read_text() == before, "replotting changed the committed verdicts"
    for path in NOTEBOOKS:
        for fig in _figures(path):
            assert (tmp_path / "figures" / f"{fig}.png").exists(), f"{path.name}: {fig} not replotted"


@pytest.mark.notebooks
@pytest.mark.gate
def test_without_fuse_the_gpfs_panel_is_replotted_and_says_so(tmp_path, monkeypatch):
    # Notebook 05 (no throttled points at tiny, unlike 03: the cheapest with a GPFS panel).
    # As on a machine without /dev/fuse: (a) and (c) are measured, (b) comes from the committed
    # results, the cell says why, the figure and the claims rows say where (b) came from.
    committed = REPO / "data" / "results" / "05_dio" / "gpfs"
    if not (committed / "summary.csv").exists():
        pytest.skip("no committed emulated-GPFS results")
    monkeypatch.setenv("LMDBIO_NO_PFS", "1")
    run_notebooks("tiny", tmp_path / "out", only=["05"], results_root=tmp_path / "results",
                  figures_root=tmp_path / "figures", datasets_root=tmp_path / "datasets")
    nb = nbformat.read(tmp_path / "out" / "05_dio.ipynb", as_version=4)
    text = "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "The emulated GPFS cannot be mounted here: $LMDBIO_NO_PFS is set" in text
    assert "gpfs: replotted from the committed results in data/results/05_dio/gpfs" in text
    assert not (tmp_path / "results" / "05_dio" / "gpfs").exists(), "nothing was measured through FUSE"
    assert (tmp_path / "figures" / "05_dio_settings.png").stat().st_size > 1000
    rows = pd.read_csv(tmp_path / "results" / "claims.csv").set_index(["claim", "setting"])
    assert "[committed results" in rows.loc[("C4", "gpfs"), "why"]
    assert rows.loc[("C4", "gpfs"), "source"] == "data/results/05_dio/gpfs"
    assert str(tmp_path) in rows.loc[("C4", "local"), "source"]
    assert str(tmp_path) in rows.loc[("C4", "model"), "source"]
