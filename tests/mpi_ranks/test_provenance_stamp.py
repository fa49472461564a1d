"""PROV's verified stamp through a sequence of opens on every rank (issue 19, C5): the readers
split the full check once, later opens use the stamp, and an edited sidecar, a touched or
rewritten data.mdb, garbage stamps or a reader that distrusts stamps mean the check again."""

import os
import shutil
from dataclasses import replace

import numpy as np
import pytest

import lmdbio
from conftest import Checker, on_rank_0, sizes
from lmdbio.provenance import from_index, sidecar_path, write_provenance
from lmdbio.recordindex import build_index
from lmdbio.verified import cache_dir

pytestmark = pytest.mark.mpi

VARIANT = "lmdbio-lmm-dio-prov-coal"
RANKS_PER_NODE = {2: 1, 4: 2}   # one reader per (virtual) node: a group of 2 readers


def fresh_copy(honest, dest):
    """A copy of ``honest`` with its sidecar, which this test may damage."""
    if not sidecar_path(honest).is_file():
        write_provenance(honest)
    return shutil.copytree(honest, dest)


def forge(db) -> None:
    """Swap two records' extents in the sidecar, its digest recomputed."""
    idx = build_index(db)
    idx = replace(idx, offsets=idx.offsets.copy(), sizes=idx.sizes.copy())
    a, b = 101, 203   # inside chunks: the per-chunk check of first and last records misses them
    for arr in (idx.offsets, idx.sizes):
        arr[[a, b]] = arr[[b, a]]
    from_index(idx).save(sidecar_path(idx.path))


def rewrite(data) -> None:
    """data.mdb's bytes written back in place: a new ctime only."""
    body = data.read_bytes()
    with open(data, "r+b") as f:
        f.write(body)


def garbage() -> None:
    for stamp in (cache_dir() / "prov-verified").glob("*.json"):
        stamp.write_bytes(b"\x00not a stamp{")


def steps(db) -> list[tuple]:
    """(step, what rank 0 changes before it), in order."""
    data = db / "data.mdb"
    return [("first", None),                      # no stamp yet: full check, then written
            ("second", None),                     # the same sidecar and file: the stamp
            ("distrust", None),                   # every rank but 0: LMDBIO_TRUST_CHECKS=0
            ("forged", lambda: forge(db)),
            ("honest", lambda: write_provenance(db)),   # the same digest as "first"
            ("touched", lambda: os.utime(data)),        # new mtime and ctime
            ("rewritten", lambda: rewrite(data)),
            ("garbage", garbage)]


def open_and_read(comm, db, rpn: int) -> dict:
    """One Reader: an epoch plus a batch, each record compared with py-lmdb's; the setup row's
    ``share`` and ``stamp`` (None on a rank that does not read the file) and ``wrong`` (batches
    with wrong records or indices), or the ``error`` it raised."""
    check = Checker(db)
    n, per = len(check.expected), 4
    B = per * comm.size
    try:
        with lmdbio.Reader(db, B, comm, variant=VARIANT, ranks_per_node=rpn) as r:
            for t in range(-(-n // B) + 1):
                want = ((t * B + comm.rank * per + np.arange(per)) % n).tolist()
                if check(r.read_batch()) != want:
                    check.wrong.append(f"batch {t}: not records {want}")
            setup = next(row for row in r.stats() if row.get("phase") == "setup")
        return {"share": setup.get("prov_check_share"), "stamp": setup.get("prov_stamp"),
                "wrong": len(check.wrong)}
    except Exception as exc:   # asserted by the test, once every rank has taken every step
        return {"error": f"{type(exc).__name__}: {exc}"}


@sizes(fast=(2, 4))
def test_the_stamp_across_ranks(comm, made, shared_tmp, nprocs, monkeypatch):
    honest = made("stamp_honest", "cifar10", 300, commit_every=100, seed=23)
    db = on_rank_0(comm, lambda: fresh_copy(honest, shared_tmp / "db"))
    monkeypatch.setenv("LMDBIO_CACHE", str(shared_tmp / "cache"))   # empty, the same for all
    mine = {}
    for step, change in steps(db):
        comm.Barrier()   # every rank's last Reader is closed before rank 0 changes a file
        on_rank_0(comm, change or (lambda: None))
        with monkeypatch.context() as m:
            if step == "distrust" and comm.rank > 0:
                m.setenv("LMDBIO_TRUST_CHECKS", "0")
            mine[step] = open_and_read(comm, db, RANKS_PER_NODE[nprocs])
    everyone = comm.allgather(mine)
    readers = [r for r, got in enumerate(everyone) if got["first"].get("share") is not None]
    assert len(readers) == 2, everyone
    for step, got in mine.items():
        if step == "forged":                  # every rank learns of it
            assert got.get("error", "").startswith("StaleProvenanceError"), got
            assert "sidecar says" in got["error"], got
            continue
        assert "error" not in got and got["wrong"] == 0, (step, got)
        if comm.rank not in readers:
            continue
        if step in ("second", "honest"):      # every reader found the stamp
            assert (got["share"], got["stamp"]) == ("stamp", "used"), (step, got)
        else:                                 # the full check, split over the group
            assert got["share"] == f"{readers.index(comm.rank)}/2", (step, got)
    if comm.rank == readers[1]:               # a reader that distrusts stamps: the group checks
        assert mine["distrust"]["stamp"] == "off", mine["distrust"]
