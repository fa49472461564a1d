"""Project hygiene: environment.yml matches pyproject, notebooks carry no outputs."""

import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# PyPI name -> conda-forge name, where they differ.
CONDA_NAMES = {"lmdb": "python-lmdb"}


def test_environment_yml_names_the_same_packages_as_pyproject():
    import yaml

    py = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pypi = {re.split(r"[<>=!~\[ ]", d)[0].lower()
            for d in py["project"]["dependencies"] + py["project"]["optional-dependencies"]["dev"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {re.split(r"[<>=! ]", d)[0].lower() for d in env["dependencies"] if isinstance(d, str)}
    wanted = {CONDA_NAMES.get(p, p) for p in pypi}
    assert wanted - conda == set(), f"missing from environment.yml: {wanted - conda}"
    extra = conda - wanted - {"python", "pip"}
    assert extra == set(), f"in environment.yml but not pyproject.toml: {extra}"


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
    """A setting missing from one scale breaks that scale's run while the tiny test passes."""
    import ast

    checked = 0
    for nb_path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(nb_path.read_text())
        for cell in nb["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] != "code" or "SCALES = " not in src:
                continue
            literal = src.split("SCALES = ", 1)[1].split("\ncfg =", 1)[0]
            try:
                scales = ast.literal_eval(literal)
            except ValueError:
                continue  # built by an expression, not a literal
            assert set(scales) == {"tiny", "default", "large"}, nb_path.name
            keys = {name: set(cfg) for name, cfg in scales.items()}
            assert keys["tiny"] == keys["default"] == keys["large"], (nb_path.name, keys)
            checked += 1
    assert checked >= 9
