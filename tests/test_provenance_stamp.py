"""PROV's verified stamp (issue 19, C5): the full sidecar check is paid once per version.

After a full check passes, a stamp in ``LMDBIO_CACHE`` binds the sidecar's
digest, the data file's fstat identity (ctime included) and the meta read; a
later open with all three the same skips the check. An edited sidecar, a
touched or rewritten data.mdb and a garbage stamp all mean the full check
again. (conftest gives every test an empty ``LMDBIO_CACHE`` of its own.) The stamp across
ranks and reader groups: tests/mpi_ranks/test_provenance_stamp.py.
"""

from __future__ import annotations

import json
import os
import shutil
import stat

import pandas as pd
import pytest

from lmdbio import Reader
from lmdbio.cli import main
from lmdbio.datasets import make_dataset
from lmdbio.errors import StaleProvenanceError
from lmdbio.provenance import sidecar_path, write_provenance
from lmdbio.verified import cache_dir
from test_provenance_forged import swap, forge

VARIANT = "lmdbio-lmm-dio-prov"


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    path = make_dataset(tmp_path_factory.mktemp("stamp") / "db", "cifar10", 300,
                        commit_every=100, seed=23)
    if not sidecar_path(path).is_file():
        write_provenance(path)
    return path


@pytest.fixture
def db(honest, tmp_path):
    return shutil.copytree(honest, tmp_path / "db")


def setup_row(path, variant=VARIANT) -> dict:
    """Open a Reader at P = 1, read a batch; its setup row."""
    with Reader(str(path), 8, variant=variant) as r:
        r.read_batch()
        return next(row for row in r.stats() if row.get("phase") == "setup")


def stamps():
    return sorted((cache_dir() / "prov-verified").glob("*.json"))


def _checked(row):
    return row["prov_check_share"] == "0/1" and row["prov_check_leaves"] > 0


def test_the_second_open_uses_the_stamp(db):
    first = setup_row(db)
    assert _checked(first) and first["prov_stamp"] == "written"
    (only,) = stamps()
    assert stat.S_IMODE(only.stat().st_mode) == 0o600
    assert stat.S_IMODE(only.parent.stat().st_mode) == 0o700
    second = setup_row(db)
    assert second["prov_check_share"] == "stamp" and second["prov_stamp"] == "used"
    assert second["prov_check_leaves"] == second["prov_check_pages"] == 0
    assert second["prov_check_s"] >= 0


def test_every_prov_variant_uses_it(db):
    setup_row(db)
    for variant in ("lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag"):
        assert setup_row(db, variant)["prov_check_share"] == "stamp"


def test_a_sidecar_edited_after_stamping_is_checked_and_refused(db):
    assert setup_row(db)["prov_stamp"] == "written"
    forge(db, lambda idx: swap(idx, 101, 203))   # digest recomputed: it loads
    with pytest.raises(StaleProvenanceError, match="sidecar says"):
        setup_row(db)
    write_provenance(db)                          # the honest one again: same digest, stamped
    assert setup_row(db)["prov_check_share"] == "stamp"


@pytest.mark.parametrize("how", ["touch", "rewrite", "replace"])
def test_a_touched_or_rewritten_data_file_is_checked_again(db, how):
    data = db / "data.mdb"
    assert setup_row(db)["prov_stamp"] == "written"
    if how == "touch":
        os.utime(data)
    elif how == "rewrite":   # the same bytes written in place: only ctime and mtime change
        body = data.read_bytes()
        with open(data, "r+b") as f:
            f.write(body)
    else:                    # a copy put in its place: another inode
        shutil.copyfile(data, db / "copy.mdb")
        os.replace(db / "copy.mdb", data)
    again = setup_row(db)
    assert _checked(again) and again["prov_stamp"] == "written"
    assert len(stamps()) == 2
    assert setup_row(db)["prov_check_share"] == "stamp"


@pytest.mark.parametrize("content", [b"", b"\x00garbage{", b'{"schema": 1}', b"[]"])
def test_a_garbage_stamp_is_no_stamp(db, content):
    setup_row(db)
    (only,) = stamps()
    only.write_bytes(content)
    again = setup_row(db)
    assert _checked(again) and again["prov_stamp"] == "written"
    assert json.loads(only.read_text())["digest"]   # rewritten whole


def test_trust_off_always_checks(db, monkeypatch):
    setup_row(db)
    monkeypatch.setenv("LMDBIO_TRUST_CHECKS", "0")
    for _ in range(2):
        row = setup_row(db)
        assert _checked(row) and row["prov_stamp"] == "off"


def test_an_unwritable_cache_costs_only_the_check(db, tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache would be")
    monkeypatch.setenv("LMDBIO_CACHE", str(blocked))
    for _ in range(2):
        row = setup_row(db)
        assert _checked(row) and row["prov_stamp"] == "not written"


def test_index_verify_pays_the_check_ahead(db, capsys):
    assert main(["index", "--verify", str(db)]) == 0
    out = capsys.readouterr().out
    assert str(sidecar_path(db)) in out and "stamp written" in out
    assert setup_row(db)["prov_check_share"] == "stamp"
    # A forged sidecar that loads is refused, not stamped, and the fix is named.
    forge(db, lambda idx: swap(idx, 101, 203))
    assert main(["index", "--verify", str(db)]) == 1
    err = capsys.readouterr().err
    assert "sidecar says" in err and f"lmdbio index {db}" in err
    assert len(stamps()) == 1


def test_index_verify_writes_a_missing_sidecar(db, capsys):
    sidecar_path(db).unlink()
    assert main(["index", "--verify", str(db)]) == 0
    assert sidecar_path(db).is_file() and len(stamps()) == 1


# ------------------------------------------------------------------ benchmarks

@pytest.mark.mpi
@pytest.mark.parametrize("trust", ["1", "0"])
def test_a_bench_checks_ahead_and_reports_it(db, tmp_path, monkeypatch, trust):
    """The bench measures PROV after its sidecar was checked once, untimed (prov_verify_s), and
    says per point whether the readers used the stamp; LMDBIO_TRUST_CHECKS=0 is the old way."""
    from lmdbio.lab.bench import make_points, run_sweep

    monkeypatch.setenv("LMDBIO_TRUST_CHECKS", trust)
    points = make_points([db], ["lmdbio-lmm-dio-prov"], [2], ["warm"], batch_size=16, iters=2,
                         ranks_per_node=1, baselines=False)
    summary = run_sweep(points, tmp_path / "out", progress=False)
    prov = summary[summary["variant"] == "lmdbio-lmm-dio-prov"].iloc[0]
    assert prov["status"] == "ok", prov["error"]
    assert prov["prov_verify_s"] > 0 and prov["prov_check_s"] >= 0
    assert prov["prov_check"] == ("stamp" if trust == "1" else "full")
    raw = summary[summary["variant"] == "raw"].iloc[0]
    assert pd.isna(raw["prov_check"]) or raw["prov_check"] == ""   # reads no sidecar
