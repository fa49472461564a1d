"""The lab's root: where it reads and writes (lmdbio.lab.paths), inside the checkout and outside it.

Inside the checkout the root is the checkout, from its top folder or from
``notebooks/``; elsewhere it is the working directory, ``LMDBIO_LAB_ROOT`` or
``--root``. The gate test installs ``lmdbio[lab]`` from the checkout into a
fresh venv outside it and runs ``lmdbio bench`` there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmdbio.lab import paths

ROOT = Path(__file__).resolve().parents[1]


def test_the_checkout_is_the_root_from_its_top_and_from_notebooks(monkeypatch):
    monkeypatch.delenv(paths.ROOT_ENV, raising=False)
    assert paths.lab_root(ROOT) == ROOT
    assert paths.lab_root(ROOT / "notebooks") == ROOT
    assert paths.lab_root(ROOT / "lmdbio" / "lab") == ROOT


def test_outside_a_checkout_the_working_directory_is_the_root(tmp_path, monkeypatch):
    monkeypatch.delenv(paths.ROOT_ENV, raising=False)
    (tmp_path / "elsewhere").mkdir()
    assert paths.lab_root(tmp_path / "elsewhere") == (tmp_path / "elsewhere").resolve()
    # Another project's pyproject.toml does not make a checkout.
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\n')
    assert paths.lab_root(tmp_path / "elsewhere") == (tmp_path / "elsewhere").resolve()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "lmdbio"\n')
    assert paths.lab_root(tmp_path / "elsewhere") == tmp_path.resolve()


def test_the_variable_and_set_root_name_the_root(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    assert paths.lab_root(ROOT) == tmp_path.resolve()
    assert paths.under_root("results/x") == tmp_path.resolve() / "results" / "x"
    assert paths.under_root("/abs/x") == Path("/abs/x")
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path / "missing"))
    with pytest.raises(NotADirectoryError, match=paths.ROOT_ENV):
        paths.lab_root()
    monkeypatch.setattr(paths, "REPO", paths.REPO)      # set_root rebinds it: restore after
    other = tmp_path / "other"
    other.mkdir()
    assert paths.set_root(other) == other.resolve() == paths.REPO
    assert os.environ[paths.ROOT_ENV] == str(other.resolve())
    assert paths.lab_root() == other.resolve()
    with pytest.raises(NotADirectoryError, match="--root"):
        paths.set_root(tmp_path / "nowhere")


def test_an_installed_lab_imports_outside_the_checkout_with_the_working_directory_as_root(tmp_path):
    """A fresh interpreter in a folder outside the checkout: REPO is that folder, not the package's
    parent (where site-packages would be)."""
    env = {k: v for k, v in os.environ.items() if k != paths.ROOT_ENV}
    out = subprocess.run([sys.executable, "-c", "from lmdbio.lab import paths, scales; "
                          "print(paths.REPO); print(scales.COMMITTED_RESULTS)"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    repo, results = out.stdout.split()
    assert Path(repo) == tmp_path.resolve()
    assert Path(results) == tmp_path.resolve() / "data" / "results"


@pytest.mark.gate
def test_pip_installed_lab_benches_under_the_given_root(tmp_path):
    """``pip install '<checkout>[lab,mpich]'`` into a fresh venv outside the checkout; then
    ``lmdbio bench --root`` on a tiny dataset writes its results under that root, and nothing
    into the working directory or the checkout. (mpich: this machine has no site MPI.)"""
    src = tmp_path / "src"      # the checkout's package files: pip builds in the source folder
    shutil.copytree(ROOT / "lmdbio", src / "lmdbio", ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, src / f)
    venv, work, root = tmp_path / "venv", tmp_path / "work", tmp_path / "root"
    work.mkdir()
    root.mkdir()
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items()
           if k not in (paths.ROOT_ENV, "PYTHONPATH", "VIRTUAL_ENV")}
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile",
                          "-c", str(ROOT / "constraints.txt"), f"{src}[lab,mpich]"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=1500)
    assert pip.returncode == 0, pip.stderr[-3000:]
    installed = time.monotonic() - t0
    where = subprocess.run([str(py), "-c", "import lmdbio, importlib.metadata as m, pathlib; "
                            "print(lmdbio.__file__); "
                            "assert m.version('lmdbio') == lmdbio.__version__; "
                            "assert (pathlib.Path(lmdbio.__file__).parent / 'py.typed').is_file()"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0 and where.stdout.startswith(str(venv)), where.stdout + where.stderr
    lmdbio = str(venv / "bin" / "lmdbio")
    made = subprocess.run([lmdbio, "make-dataset", "--records", "256", "--out", "ds", "--quiet"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    bench = subprocess.run([lmdbio, "bench", "--dataset", "ds", "--variants", "lmdbio-lmm-dio",
                            "--procs", "1", "--iters", "2", "--batch-size", "32", "--quiet",
                            "--no-lmdb", "--out", "results", "--root", str(root)],
                           cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-3000:]
    for f in ("points.csv", "summary.csv", "meta.json"):
        assert (root / "results" / f).is_file(), sorted(p.name for p in root.rglob("*"))
    assert sorted(p.name for p in work.iterdir()) == ["ds"], "bench wrote into the working folder"
    assert not [p for p in venv.glob("lib/python*/site-packages/*")
                if p.name in ("data", "results")]
    print(f"fresh venv + pip install: {installed:.0f} s; all: {time.monotonic() - t0:.0f} s")
