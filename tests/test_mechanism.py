"""The mechanism visible without running: each optimization notebook's code block is the source's.

Static: the notebooks' JSON and the library's source are read, nothing runs.
"""

from __future__ import annotations

import shutil

import nbformat
import pytest

from lmdbio.lab.lessons import mechanism

FIX = f"run `{mechanism.COMMAND}` and commit the notebooks"


def test_every_block_matches_the_source():
    stale = mechanism.check()
    assert not stale, f"{FIX}:\n" + "\n".join(stale)


@pytest.mark.parametrize("name", list(mechanism.BLOCKS))
def test_each_block_shows_a_core_not_a_wrapper(name):
    code = [line for line in mechanism.block(name).splitlines()[2:-2]
            if line.strip() and not line.startswith("# lmdbio/")]
    assert 12 <= len(code) <= 40, f"{name}: {len(code)} lines of code; a stage's core is 15-25"
    nb = nbformat.read(mechanism.NOTEBOOKS / f"{name}.ipynb", as_version=4)
    code_cells = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "getsource" not in code_cells, f"{name}: prints source when run; the block shows it unrun"


def test_a_stale_block_is_reported_and_rewritten(tmp_path):
    name = "05_dio"
    shutil.copy(mechanism.NOTEBOOKS / f"{name}.ipynb", tmp_path)
    path = tmp_path / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.source.startswith(mechanism.BEGIN))
    cell.source = cell.source.replace("calls += 1", "calls += 2")
    nbformat.write(nb, path)
    stale = mechanism.check([name], root=tmp_path)
    assert len(stale) == 1 and mechanism.COMMAND in stale[0] and "calls += 2" in stale[0]
    assert mechanism.write([name], root=tmp_path) == [name]
    assert mechanism.check([name], root=tmp_path) == []
    assert mechanism.write([name], root=tmp_path) == []   # nothing left to rewrite


def test_a_function_that_moved_is_named_with_what_to_do(monkeypatch):
    monkeypatch.setitem(mechanism.BLOCKS, "05_dio", (mechanism.Piece("lmdbio/plan.py", "no_such_function"),))
    with pytest.raises(mechanism.MechanismError, match="no no_such_function, and no file in lmdbio.*BLOCKS.*--write"):
        mechanism.block("05_dio")
    monkeypatch.setitem(mechanism.BLOCKS, "05_dio", (mechanism.Piece("lmdbio/plan.py", "chunk_runs", stop="zzz"),))
    with pytest.raises(mechanism.MechanismError, match="no line contains 'zzz'"):
        mechanism.block("05_dio")
