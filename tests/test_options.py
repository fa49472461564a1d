"""Options and variant names: the papers' seven, the extra variants, and auto's choice."""

from __future__ import annotations

import os

import pytest

import lmdbio
from lmdbio import ConfigurationError, Options, parse_variant
from lmdbio.options import (AUTO_LOCAL, AUTO_SHARED, AUTO_SHARED_NO_PROV, LOCAL_FS, SHARED_FS,
                            choose_auto, filesystem_type)


def test_extra_variants_are_listed_apart_from_the_papers_seven():
    assert len(lmdbio.VARIANTS) == 7
    assert set(lmdbio.EXTRA_VARIANTS) == {"lmdb-get", "lmdbio-direct", "auto"}
    assert not set(lmdbio.VARIANTS) & set(lmdbio.EXTRA_VARIANTS)


@pytest.mark.parametrize("name", [v for v in lmdbio.VARIANTS + lmdbio.EXTRA_VARIANTS if v != "auto"])
def test_every_name_round_trips(name):
    assert parse_variant(name).name == name
    assert parse_variant(name.upper()).name == name


def test_per_rank_options():
    get = parse_variant("lmdb-get")
    assert not get.localized and get.locate == "key" and get.fetch == "mmap"
    d = parse_variant("lmdbio-direct")
    assert not d.localized and d.fetch == "pread" and d.coalesce_bytes > 0
    # The name says what runs: the sidecar where current, else the index.
    from lmdbio.pipeline import stage_names

    assert d.locate == "prov-or-index" and d.name == "lmdbio-direct"
    assert stage_names(d)[0] == "prov-or-index"
    with pytest.raises(ConfigurationError, match="prov-or-index"):
        Options(localized=False, locate="index", fetch="pread")
    with pytest.raises(ConfigurationError, match="node readers"):
        Options(localized=True, locate="prov-or-index", fetch="pread")
    assert parse_variant("lmdbio-direct", coalesce_bytes=1 << 20).coalesce_bytes == 1 << 20
    with pytest.raises(ConfigurationError, match="localized"):
        Options(localized=False, stagger_size=2)
    with pytest.raises(ConfigurationError, match="LMM"):
        Options(localized=False, locate="ring")
    with pytest.raises(ConfigurationError, match="lmdb-get"):
        Options(localized=True, locate="key")
    with pytest.raises(ConfigurationError, match="direct reads"):
        Options(localized=False, coalesce_bytes=1 << 20)
    with pytest.raises(ConfigurationError, match="chosen per file system"):
        parse_variant("auto")
    with pytest.raises(ConfigurationError, match="lmdbio-direct"):
        parse_variant("lmdbio-fast")   # the message lists every name, the extra ones too


def test_filesystem_type_reads_statfs(tmp_path):
    magic, name = filesystem_type(tmp_path)
    assert isinstance(magic, int) and magic > 0
    if os.path.ismount("/dev/shm"):
        assert filesystem_type("/dev/shm") == (0x01021994, "tmpfs")
    with pytest.raises(OSError, match="statfs"):
        filesystem_type(tmp_path / "missing")


def test_auto_picks_direct_on_local_and_the_full_stack_on_shared(tmp_path, monkeypatch):
    from lmdbio import options

    monkeypatch.setattr(options, "filesystem_type", lambda p: (0xEF53, LOCAL_FS[0xEF53]))
    v, why = choose_auto(tmp_path)
    assert v == AUTO_LOCAL == "lmdbio-direct" and "local" in why and "ext" in why
    for magic in (0x6969, 0x47504653, 0x0BD00BD0, 0x19830326, 0x65735546):
        monkeypatch.setattr(options, "filesystem_type", lambda p, m=magic: (m, SHARED_FS[m]))
        v, why = choose_auto(tmp_path, provenance=True)
        assert v == AUTO_SHARED and SHARED_FS[magic] in why
        v, why = choose_auto(tmp_path, provenance=False)
        assert v == AUTO_SHARED_NO_PROV and "no PROV" in why
    for v in (AUTO_LOCAL, AUTO_SHARED, AUTO_SHARED_NO_PROV):
        parse_variant(v)   # each choice is a real variant


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    from lmdbio.datasets import make_dataset

    return make_dataset(tmp_path_factory.mktemp("opts") / "cifar", "cifar10", 300,
                        commit_every=100, seed=3)


def _values(db):
    import lmdb

    env = lmdb.open(str(db), readonly=True, lock=False)
    with env.begin() as txn:
        out = [bytes(v) for _, v in txn.cursor()]
    env.close()
    return out


def _read_all(db, variant, B=64, extra=3, **kw):
    import numpy as np
    from mpi4py import MPI

    expected = _values(kw.pop("values_of", db))
    n = len(expected)
    with lmdbio.Reader(db, B, MPI.COMM_SELF, variant=variant, **kw) as r:
        for t in range(-(-n // B) + extra):
            b = r.read_batch()
            want = (t * B + np.arange(B)) % n
            assert np.array_equal(b.indices, want)
            assert [bytes(x) for x in b] == [expected[i] for i in want]
        return r, r.stats()


@pytest.mark.parametrize("variant", ["lmdb-get", "lmdbio-direct"])
def test_extra_variants_deliver_every_record(small_db, variant):
    r, rows = _read_all(small_db, variant)
    assert r.variant == variant and r.auto_reason == ""
    if variant == "lmdbio-direct":
        assert rows[-1]["direct_locate"] == "provenance"     # make_dataset wrote a sidecar
        assert r.coalesce > 1


def test_direct_without_a_sidecar_uses_the_index(small_db, tmp_path):
    import shutil

    from lmdbio.provenance import sidecar_path

    db = tmp_path / "copy"
    shutil.copytree(small_db, db)
    sidecar_path(db / "data.mdb").unlink()
    _, rows = _read_all(db, "lmdbio-direct")
    assert rows[-1]["direct_locate"] == "index"


def test_auto_on_tmpfs_reads_direct(small_db, tmp_path):
    import shutil

    if not os.path.ismount("/dev/shm") or filesystem_type("/dev/shm")[1] != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    db = tmp_path / "unused"
    shm = __import__("tempfile").mkdtemp(dir="/dev/shm")
    try:
        db = shutil.copytree(small_db, os.path.join(shm, "cifar"))
        r, rows = _read_all(db, "auto")
        assert r.variant == "lmdbio-direct" and "tmpfs" in r.auto_reason
        assert rows[0]["auto_reason"] == r.auto_reason
    finally:
        shutil.rmtree(shm)


@pytest.mark.fuse
def test_auto_on_fuse_reads_with_the_full_stack(small_db):
    from lmdbio.lab.pfs.mount import FuseUnavailable, check_fuse

    try:
        check_fuse()
    except FuseUnavailable as exc:
        pytest.skip(f"no FUSE here: {exc}")
    from lmdbio.lab import pfs

    with pfs.mounted(str(small_db.parent), profile="local", nodes=1) as m:
        db = m.path(0, small_db.name)
        r, _ = _read_all(db, "auto", values_of=small_db)
        assert r.variant == AUTO_SHARED and "fuse" in r.auto_reason
        # A user who names a variant gets it, whatever the file system.
        r, _ = _read_all(db, "lmdbio-direct", values_of=small_db, extra=0)
        assert r.variant == "lmdbio-direct" and r.auto_reason == ""


def test_batch_size_is_checked_before_any_rank_reads():
    import numpy as np

    from lmdbio.options import check_batch_size

    assert check_batch_size(np.int64(64), 4) == 64 and type(check_batch_size(np.int64(64), 4)) is int
    for bad in (64.0, "64", True, None):
        with pytest.raises(ConfigurationError, match="batch_size must be an integer"):
            check_batch_size(bad, 4)
    with pytest.raises(ValueError, match="must be positive"):
        check_batch_size(0, 4)
    with pytest.raises(ValueError, match=r"does not divide among 3 ranks; use a multiple of 3 \(e\.g\. 63\)"):
        check_batch_size(64, 3)


def test_auto_is_chosen_by_one_rank(tmp_path):
    from lmdbio.options import resolve_variant

    assert resolve_variant("auto", None, tmp_path, chooser=False) == (None, ("", ""))
    opts, auto = resolve_variant("auto", None, tmp_path)
    assert opts.name == auto[0] and "is local" in auto[1]   # /tmp: a local file system
    opts, auto = resolve_variant("LMDBIO-LMM-DIO", None, tmp_path)
    assert (opts.name, auto) == ("lmdbio-lmm-dio", None)
    with pytest.raises(ConfigurationError, match="options must be an lmdbio.Options"):
        resolve_variant("lmdb", "lmdb", tmp_path)


def test_coalesce_bytes_zero_on_a_coal_variant_is_refused_not_read_as_the_default():
    """0 once silently meant the 4 MiB default for a COAL variant; it now names the choices."""
    from lmdbio.errors import ConfigurationError
    from lmdbio.options import parse_variant

    for name in ("lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag", "lmdbio-direct"):
        with pytest.raises(ConfigurationError, match="coalesce_bytes=0"):
            parse_variant(name, coalesce_bytes=0)
    assert parse_variant("lmdbio-lmm-dio-prov-coal", coalesce_bytes=1).coalesce_bytes == 1
    assert parse_variant("lmdbio-lmm-dio-prov", coalesce_bytes=0).coalesce_bytes == 0


@pytest.mark.parametrize("call, option", [
    (lambda: parse_variant("lmdbio-lmm-xyz"), "variant"),
    (lambda: parse_variant(3), "variant"),
    (lambda: parse_variant("lmdbio-lmm-dio-coal", coalesce_bytes=0), "coalesce_bytes"),
    (lambda: parse_variant("lmdbio-lmm", stagger_size=-1), "stagger_size"),
    (lambda: Options(coalesce_bytes=-2), "coalesce_bytes"),
    (lambda: Options(locate="key"), "options"),
])
def test_a_configuration_error_names_its_option_in_a_field(call, option):
    """Callers test ``ConfigurationError.option``, not the message's words."""
    with pytest.raises(ConfigurationError) as raised:
        call()
    assert raised.value.option == option


def test_batch_size_errors_name_batch_size():
    from lmdbio.options import check_batch_size

    for bad in (0, 7, "8", True):
        with pytest.raises(ConfigurationError) as raised:
            check_batch_size(bad, 4)
        assert raised.value.option == "batch_size", bad
