"""Project hygiene: environment.yml matches pyproject, notebooks carry no outputs."""

import json
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# PyPI name -> conda-forge name, where they differ.
CONDA_NAMES = {"lmdb": "python-lmdb"}


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip())[0].lower()


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _all_requirements() -> set[str]:
    """Every package the library and its extras name (not itself, not Python < 3.11 backports)."""
    project = _pyproject()
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values()
                                      for r in extra]
    return {_name(r) for r in reqs if "python_version < '3.11'" not in r} - {"lmdbio"}


def test_environment_yml_names_the_same_packages_as_pyproject():
    import yaml

    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {_name(d) for d in env["dependencies"] if isinstance(d, str)}
    pip = {_name(d) for d in env["dependencies"] if isinstance(d, dict)
           for d in d.get("pip", []) if not d.startswith("-")}
    wanted = {CONDA_NAMES.get(p, p) for p in _all_requirements()}
    have = conda | pip
    assert wanted - have == set(), f"missing from environment.yml: {wanted - have}"
    extra = conda - wanted - {"python", "pip"}
    assert extra == set(), f"in environment.yml but not pyproject.toml: {extra}"


NOTEBOOK_STACK = {"jupyterlab", "ipykernel", "ipyparallel", "papermill", "nbformat", "nbclient",
                  "matplotlib", "seaborn", "pandas", "mpich"}


def test_runtime_dependencies_are_ranges_and_the_pins_live_in_constraints():
    project = _pyproject()
    core = project["dependencies"]
    assert {_name(r) for r in core} >= {"numpy", "lmdb", "mpi4py", "protobuf"}
    assert not {_name(r) for r in core} & NOTEBOOK_STACK, "the notebook stack is a hard dependency"
    assert not [r for r in core if "==" in r], "exact pins belong in constraints.txt"
    extras = project["optional-dependencies"]
    assert {"lab", "images", "dev", "mpich"} <= set(extras)
    assert NOTEBOOK_STACK - {"mpich"} | {"mfusepy"} <= {_name(r) for r in extras["lab"]}
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[name.lower().replace("_", "-")] = version
    missing = {n.replace("_", "-") for n in _all_requirements()} - set(pins)
    assert missing == set(), f"constraints.txt lacks pins for {missing}; run make lock"
    make = (ROOT / "Makefile").read_text()
    assert "-c constraints.txt" in make


@pytest.mark.gate
def test_pip_install_brings_no_notebook_packages(tmp_path):
    """What ``pip install .`` would install into an empty environment (pip's resolver, dry run).

    ``--dry-run --ignore-installed --report`` resolves exactly as an install
    into a bare venv would, from the configured index, without installing.
    """
    import json
    import shutil
    import subprocess
    import sys

    src = tmp_path / "src"
    shutil.copytree(ROOT / "lmdbio", src / "lmdbio", ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, src / f)
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                           "--quiet", "--report", str(report), str(src)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
    assert {"lmdbio", "numpy", "lmdb", "mpi4py", "protobuf"} <= names
    assert names & NOTEBOOK_STACK == set(), f"a bare install brings {names & NOTEBOOK_STACK}"


def test_committed_notebooks_have_no_outputs():
    for nb_path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(nb_path.read_text())
        for cell in nb["cells"]:
            assert not cell.get("outputs"), f"{nb_path.name} has outputs"
            assert not cell.get("execution_count"), f"{nb_path.name} has execution counts"


def test_ci_runs_make_test_only():
    text = (ROOT / ".ci" / "run").read_text()
    assert "make test" in text


def test_every_notebook_scale_defines_the_same_settings():
    """A setting missing from one scale breaks that scale's run while the tiny test passes.

    The scales live in lmdbio/lab/scales.py (tests/test_scales.py checks them); no notebook keeps a copy.
    """
    from lmdbio.lab.scales import KEYS, NOTEBOOK_SCALES, SCALES

    assert all(set(cfg) == set(KEYS) for cfg in SCALES.values())
    for name, per_scale in NOTEBOOK_SCALES.items():
        assert len({frozenset(v) for v in per_scale.values()}) == 1, name
    for nb_path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        src = "".join("".join(c["source"]) for c in json.loads(nb_path.read_text())["cells"])
        assert "SCALES = {" not in src, f"{nb_path.name} keeps its own copy of the scales"


def test_one_version_source_typed_package_and_no_lab_dependency_in_the_core():
    """The version lives in lmdbio/__init__.py only (pyproject reads it), the package says it is
    typed (py.typed, shipped), and the core names no package only the lab uses (tomli)."""
    import lmdbio

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project, setup = pyproject["project"], pyproject["tool"]["setuptools"]
    assert "version" not in project and "version" in project["dynamic"]
    assert setup["dynamic"]["version"] == {"attr": "lmdbio.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", lmdbio.__version__)
    assert (ROOT / "lmdbio" / "py.typed").is_file()
    assert "py.typed" in setup["package-data"]["lmdbio"]
    assert "tomli" not in {_name(r) for r in project["dependencies"]}
    assert "tomli" in {_name(r) for r in project["optional-dependencies"]["lab"]}
