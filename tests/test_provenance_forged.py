"""Forged provenance sidecars (issue 23, F1): a recomputed digest buys nothing.

A sidecar with the right identity and a valid digest but edited extents must
fail :meth:`Provenance.verify_share` (whole, and in at least one of three
shares), be reported as not "present", and never make a reader serve a wrong
record: explicit PROV variants raise StaleProvenanceError on every rank,
``lmdbio-direct`` and ``auto`` fall back to the record index.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import replace

import numpy as np
import pytest

from conftest import run_verdict
from corrupt_helpers import make_db
from lmdbio import format as fmt
from lmdbio.datasets import make_dataset
from lmdbio.errors import StaleProvenanceError
from lmdbio.recordindex import build_index
from lmdbio.options import choose_auto
from lmdbio.provenance import (from_index, load_provenance, provenance_status, sidecar_path,
                               write_provenance)


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    """Databases of each shape a sidecar describes, each with an honest sidecar."""
    root = tmp_path_factory.mktemp("forged")
    r = random.Random(7)
    out = {
        "cifar-0.9": make_dataset(root / "c09", "cifar10", 2000, commit_every=100, seed=21),
        "cifar-1.0": make_dataset(root / "c10", "cifar10", 2000, commit_every=100, seed=22,
                                  lmdb_format="1.0"),
        "inline": make_db(root / "inline", [(b"%06d" % i, r.randbytes(100)) for i in range(3000)],
                          commit_every=97),
        # Inline and overflow values of one and several pages, over four leaves.
        "mixed": make_db(root / "mixed", [(b"%06d" % i, r.randbytes(r.choice([10, 3000, 20_000])))
                                          for i in range(600)], commit_every=97),
    }
    for path in out.values():
        if not sidecar_path(path).is_file():
            write_provenance(path)
    return out


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def swap(idx, a=None, b=None):
    a = len(idx) // 3 if a is None else a
    b = 2 * len(idx) // 3 if b is None else b
    for arr in (idx.offsets, idx.sizes):
        arr[[a, b]] = arr[[b, a]]


def _duplicate(idx):
    a, b = len(idx) // 3, len(idx) // 2
    idx.offsets[b], idx.sizes[b] = idx.offsets[a], idx.sizes[a]


def _meta_page0(idx):
    idx.offsets[len(idx) // 2] = 16


def _meta_page1(idx):
    idx.offsets[len(idx) // 2] = idx.meta.psize + idx.meta.header_size


def _past_end(idx):
    idx.offsets[len(idx) // 2] = idx.meta.file_size + idx.meta.psize


def _shift(idx):
    idx.offsets += np.uint64(idx.meta.psize)


def _wrong_size(idx):
    idx.sizes[len(idx) // 2] -= 1


def _leaves_swapped(idx):
    idx.leaf_pgnos[[1, 2]] = idx.leaf_pgnos[[2, 1]]


def _count_moved(idx):
    # Leaf 1 gives up its last record, leaf 3 gains one: offsets and pages stay.
    idx.leaf_starts[2:4] -= 1


FORGERIES = [swap, _duplicate, _meta_page0, _meta_page1, _past_end, _shift, _wrong_size,
             _leaves_swapped, _count_moved]


def forge(path, edit) -> None:
    """Rewrite the sidecar of ``path`` from its index after ``edit``, with a recomputed digest."""
    idx = build_index(path)
    idx = replace(idx, offsets=idx.offsets.copy(), sizes=idx.sizes.copy(),
                  leaf_pgnos=idx.leaf_pgnos.copy(), leaf_starts=idx.leaf_starts.copy())
    edit(idx)
    from_index(idx).save(sidecar_path(idx.path))


def _verdicts(path, parts):
    """What each share of ``parts`` says: None (passed) or the StaleProvenanceError."""
    prov = load_provenance(path)   # loads: identity and digest are right
    fd = os.open(prov.path, os.O_RDONLY)
    try:
        meta = fmt.read_meta(fd, name=str(prov.path))
        out = []
        for part in range(parts):
            try:
                prov.verify_share(fd, meta, part, parts)
                out.append(None)
            except StaleProvenanceError as exc:
                out.append(exc)
        return out
    finally:
        os.close(fd)


@pytest.mark.parametrize("name", ["cifar-0.9", "cifar-1.0", "inline", "mixed"])
def test_an_honest_sidecar_passes_whole_and_in_shares(dbs, name):
    assert _verdicts(dbs[name], 1) == [None]
    assert _verdicts(dbs[name], 3) == [None, None, None]
    assert provenance_status(dbs[name]) == "present"
    prov = load_provenance(dbs[name])
    fd = os.open(prov.path, os.O_RDONLY)
    try:
        meta = fmt.read_meta(fd)
        whole = prov.verify_share(fd, meta)
        shares = [prov.verify_share(fd, meta, p, 3) for p in range(3)]
    finally:
        os.close(fd)
    # The shares split the leaves and records; only part 0 reads the branch pages.
    assert whole.leaves == len(prov.leaf_pgnos) == sum(s.leaves for s in shares)
    assert whole.records == prov.n == sum(s.records for s in shares)
    assert whole.pages == sum(s.pages for s in shares) == len(prov.leaf_pgnos) + meta.branch_pages


@pytest.mark.parametrize("edit", FORGERIES, ids=lambda f: f.__name__.lstrip("_"))
@pytest.mark.parametrize("name", ["cifar-0.9", "cifar-1.0", "inline", "mixed"])
def test_a_forged_sidecar_is_caught(dbs, tmp_path, name, edit):
    path = _copy(dbs[name], tmp_path / "db")
    forge(path, edit)
    whole = _verdicts(path, 1)[0]
    assert isinstance(whole, StaleProvenanceError)
    msg = str(whole)
    assert str(path / "data.mdb") in msg and "sidecar says" in msg and "file" in msg
    assert f"lmdbio index {path}" in msg
    assert "truncated" not in msg
    shares = _verdicts(path, 3)
    assert any(v is not None for v in shares), "no share of 3 caught it"
    assert provenance_status(path) == "invalid"


def test_the_message_names_the_record_and_both_extents(dbs, tmp_path):
    path = _copy(dbs["cifar-0.9"], tmp_path / "db")
    idx = build_index(path)
    a, b = len(idx) // 3, 2 * len(idx) // 3
    forge(path, swap)
    err = _verdicts(path, 1)[0]
    leaf = int(np.searchsorted(idx.leaf_starts, a, side="right")) - 1
    assert f"record {a} (node {a - int(idx.leaf_starts[leaf])} of leaf page " \
           f"{int(idx.leaf_pgnos[leaf])})" in str(err)
    assert (f"the sidecar says offset {int(idx.offsets[b])} size {int(idx.sizes[b])}, the file "
            f"says offset {int(idx.offsets[a])} size {int(idx.sizes[a])}") in str(err)


def test_bad_share_arguments(dbs):
    prov = load_provenance(dbs["inline"])
    with open(prov.path, "rb") as f:
        meta = fmt.read_meta(f.fileno())
        for part, parts in ((3, 3), (-1, 2), (0, 0)):
            with pytest.raises(ValueError, match="share"):
                prov.verify_share(f.fileno(), meta, part, parts)


def test_a_sidecar_of_another_version_is_refused_by_the_check(dbs, tmp_path):
    # The check compares the sidecar with the meta it is given (a reader's snapshot).
    path = _copy(dbs["inline"], tmp_path / "db")
    prov = load_provenance(path)
    with open(prov.path, "rb") as f:
        meta = replace(fmt.read_meta(f.fileno()), txnid=prov.txnid + 1)
        with pytest.raises(StaleProvenanceError, match="txnid"):
            prov.verify_share(f.fileno(), meta)


# ------------------------------------------------------------------ readers under MPI

PROV = ["lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag"]
FALLBACK = ["lmdbio-direct", "auto"]


@pytest.fixture(scope="module")
def forged_db(tmp_path_factory):
    path = make_dataset(tmp_path_factory.mktemp("forged_mpi") / "db", "cifar10", 300,
                        commit_every=100, seed=23)
    # Records inside batches and chunks: the per-chunk check of first and last records misses them.
    forge(path, lambda idx: swap(idx, 101, 203))
    return path


@pytest.mark.gate
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,rpn", [(2, "None"), (4, "2")])
def test_readers_never_serve_a_forged_sidecar(forged_db, nprocs, rpn):
    variants = PROV + (FALLBACK if rpn == "None" else [])
    out, verdict = run_verdict("rel_forged.py", nprocs, forged_db, rpn, *variants,
                               env={"LMDBIO_TIMEOUT": "10", "LMDBIO_EXIT_TIMEOUT": "2"},
                               timeout=180)
    assert out.returncode == 0 and verdict is not None, out.stderr[-3000:]
    ranks = verdict["outcomes"]
    assert len(ranks) == nprocs and all(list(got) == variants for got in ranks), ranks
    for variant in PROV:
        for got in (outcomes[variant] for outcomes in ranks):
            error = got.get("error", "")
            assert "StaleProvenanceError" in error and "lmdbio index" in error, got
    if rpn == "None":
        # auto reads a local file system with lmdbio-direct, a shared one without PROV
        # (provenance_status is "invalid"): either way from the record index.
        auto = choose_auto(forged_db)[0]
        assert "prov" not in auto
        for variant in FALLBACK:
            used = auto if variant == "auto" else variant
            for got in (outcomes[variant] for outcomes in ranks):
                assert "error" not in got and got["wrong"] == 0, got
                assert got["variant"] == used, got
                if used == "lmdbio-direct":
                    assert (got["locate"], got["refused"]) == ("index", True), got
        # One warning per Direct Reader that refused the sidecar, not one per rank.
        direct = sum(v == "lmdbio-direct" or (v == "auto" and auto == "lmdbio-direct")
                     for v in FALLBACK)
        assert out.stderr.count("not using the provenance sidecar") == direct, out.stderr


def test_info_reports_a_forged_sidecar_as_invalid(dbs, tmp_path, capsys):
    import json

    from lmdbio.cli import main

    path = _copy(dbs["inline"], tmp_path / "db")
    assert main(["info", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["provenance"] == "present"
    forge(path, _duplicate)
    assert main(["info", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["provenance"] == "invalid"
    assert main(["index", str(path)]) == 0   # the fix the error names
    capsys.readouterr()
    assert provenance_status(path) == "present"
