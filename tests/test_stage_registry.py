"""The stage registry (lmdbio/registry.py): what it derives, the docs' tables, and a toy stage
registered in this file alone and read through with every record right."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import lmdbio
from lmdbio import ConfigurationError, Options, parse_variant, registry
from lmdbio.pipeline import DISTRIBUTORS, FETCHERS, LOCATORS, VARIANT_STAGES, stage_names
from lmdbio.pipeline.stage import Abilities, Extents, Locator
from lmdbio.plan import plan_extents
from lmdbio.recordindex import open_snapshot
from lmdbio.registry import Stage
from lmdbio.variant_table import render, tables_in
from conftest import MPI_SCRIPTS

sys.path.insert(0, str(MPI_SCRIPTS))
from stored import stored_values

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ what the registry derives
def test_every_stage_class_carries_its_registered_name():
    roles = ("locator", "fetcher", "distributor")
    named = [s for s in registry.stages() if s.role in roles]
    assert len(named) == 11 and all(s.cls is not None for s in named)
    assert [registry.stage_class(s).name for s in named] == [s.name for s in named]


def test_the_tables_and_names_it_derives():
    assert lmdbio.VARIANTS == ("lmdb", "lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio",
                               "lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal",
                               "lmdbio-lmm-dio-prov-coal-stag")
    assert lmdbio.EXTRA_VARIANTS == ("lmdb-get", "lmdbio-direct", "auto")
    assert VARIANT_STAGES == {
        "lmdb": ("walk", "mmap-copy", "private"),
        "lmdbio-lmm": ("walk", "mmap-copy", "node-group"),
        "lmdbio-lmm-dm": ("ring+speculate", "mmap-copy", "node-group"),
        "lmdbio-lmm-dio": ("index", "preadv", "node-group"),
        "lmdbio-lmm-dio-prov": ("prov", "preadv", "node-group"),
        "lmdbio-lmm-dio-prov-coal": ("prov", "preadv", "node-group", "coalesce"),
        "lmdbio-lmm-dio-prov-coal-stag": ("prov", "preadv", "node-group", "coalesce", "stagger"),
        "lmdb-get": ("key", "mmap-copy", "private"),
        "lmdbio-direct": ("prov-or-index", "preadv", "private-slots", "coalesce"),
    }
    assert {k: c.name for k, c in LOCATORS.items()} == {
        (False, "walk"): "walk", (True, "walk"): "walk", (True, "ring"): "ring",
        (True, "index"): "index", (True, "provenance"): "prov", (False, "key"): "key",
        (False, "prov-or-index"): "prov-or-index"}
    assert {k: c.name for k, c in FETCHERS.items()} == {"mmap": "mmap-copy", "pread": "preadv"}
    assert {k: c.name for k, c in DISTRIBUTORS.items()} == {
        (False, "mmap"): "private", (False, "pread"): "private-slots",
        (True, "mmap"): "node-group", (True, "pread"): "node-group"}
    # Tag combinations beyond the named ones parse, and name themselves back.
    assert {n for n in registry.named() if n not in registry.variants()} == {
        "lmdbio-lmm-stag", "lmdbio-lmm-dm-stag", "lmdbio-lmm-dio-stag", "lmdbio-lmm-dio-coal",
        "lmdbio-lmm-dio-coal-stag", "lmdbio-lmm-dio-prov-stag"}
    for name in registry.named():
        assert parse_variant(name).name == name


def test_the_lab_queries():
    walks = {v for v in registry.variants() if registry.is_cursor_walk(v)}
    assert walks == {"lmdb", "lmdbio-lmm", "lmdbio-lmm-dm"}
    prov = {v for v in registry.variants() if registry.reads_sidecar(v, required=True)}
    assert prov == {"lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal",
                    "lmdbio-lmm-dio-prov-coal-stag"}
    assert {v for v in registry.variants() if registry.reads_sidecar(v)} == prov | {"lmdbio-direct"}
    assert [registry.short_name(v) for v in lmdbio.VARIANTS] == [
        "LMDB", "LMM", "DM", "DIO", "PROV", "COAL", "full stack"]
    assert registry.variant_stages("lmdb-get") == VARIANT_STAGES["lmdb-get"]
    with pytest.raises(ConfigurationError, match="unknown variant 'nope'"):
        registry.variant_stages("nope")


@pytest.mark.parametrize("page,kind", [("README.md", "readme"), ("docs/reader.md", "docs")])
def test_the_docs_variant_table_is_the_registry_s(page, kind):
    tables = tables_in((ROOT / page).read_text(encoding="utf-8"))
    assert list(tables) == [kind], f"{page}: no <!-- variant-table: {kind} --> block"
    want = render(kind)
    assert tables[kind] == want, (
        f"{page}'s variant table differs from the registry's; run "
        f"`python -m lmdbio.variant_table --write README.md docs/reader.md`. Rendered:\n{want}")


def test_errors_say_what_to_change():
    with pytest.raises(ConfigurationError) as err:
        Options(localized=False, locate="index", fetch="pread")
    assert str(err.value) == (
        "locate='index': DIO's record-index look-ups need node readers (localized=True: LMM), "
        "not localized=False (per-rank reading: the lmdb and lmdb-get baselines, "
        "lmdbio-direct); use locate='prov-or-index' or localized=True")
    with pytest.raises(ConfigurationError, match=r"cannot go with direct reads \(fetch='pread'\)"):
        Options(locate="ring", fetch="pread")
    with pytest.raises(ConfigurationError, match="DM's cursor ring .* use speculative=False or "
                                                 "locate='ring'"):
        Options(speculative=True)   # speculation is the ring's: walk has none to offer
    with pytest.raises(ConfigurationError, match=r"locate must be one of \('walk', "):
        Options(locate="teleport")
    with pytest.raises(ConfigurationError, match="LMM \\+ DM \\+ DIO is no combination the "
                                                 "stages allow: drop 'dm' or drop 'dio'"):
        parse_variant("lmdbio-lmm-dm-dio")
    # A tag the stages cannot take says which to add or drop, and the stages' own reason.
    with pytest.raises(ConfigurationError, match=r"add 'dio' or drop 'prov' \(the stages say: "
                                                 r"fetch='mmap': copies out of LMDB's map need "
                                                 r"records as views .* use fetch='pread'"):
        parse_variant("lmdbio-lmm-prov")


# ------------------------------------------------------------------ a toy stage
class OwnIndex(Locator):
    """Toy locator: every rank walks the record index of its own snapshot (no scatter)."""

    name = "own-index"
    abilities = Abilities(random_access=True)

    def __init__(self):
        self.snapshot = None
        self.offsets = self.sizes = None

    def open(self, path, meta, nprocs: int) -> None:
        self.snapshot = open_snapshot(path)
        self.locked = bool(self.snapshot.locked)

    def snapshot_id(self):
        s = self.snapshot
        return (s.txnid, s.meta.entries) if s is not None else None

    def setup(self, comm, readers, schedule, row: dict) -> None:
        idx = self.snapshot.build_index()
        self.snapshot.check(idx)
        self.offsets, self.sizes = idx.offsets.astype(np.int64), idx.sizes.astype(np.int64)

    def locate(self, chunk: int, schedule, rec) -> Extents:
        with rec.phase("locate", chunk * schedule.k):
            pos = schedule.chunk_positions(chunk)
            start, length, buf_off = plan_extents(self.offsets[pos], self.sizes[pos])
        return Extents(start, length, buf_off, self.sizes[pos])

    def describe(self) -> dict:
        return {"toy_locate": "own index"}

    def close(self) -> None:
        if self.snapshot is not None:
            snap, self.snapshot = self.snapshot, None
            snap.close()


TOY = Stage("locator", "own-index", "own-index", "each rank's own index walks", OwnIndex,
            provides={"extents"}, needs={"rank"}, variant="toy-direct",
            summary="every rank walks its own record index", problem="a test's toy")


def _check_gone():
    assert TOY not in registry.stages() and (False, "own-index") not in LOCATORS
    with pytest.raises(ConfigurationError, match="unknown variant 'toy-direct'"):
        parse_variant("toy-direct")
    with pytest.raises(ConfigurationError, match="locate must be one of"):
        Options(localized=False, locate="own-index", fetch="pread")


def test_a_toy_locator_registered_here_reads_every_record(datasets):
    db = datasets["cifar10"]
    want = stored_values(db)
    n, B = len(want), 64
    _check_gone()
    with registry.registered(TOY):
        o = parse_variant("toy-direct")
        assert (o.localized, o.locate, o.fetch, o.name) == (False, "own-index", "pread",
                                                           "toy-direct")
        assert stage_names(o) == ("own-index", "preadv", "private-slots", "coalesce")
        assert "toy-direct" in registry.variants() and not registry.is_cursor_walk("toy-direct")
        # Its needs keep it away from node readers, as the built-in ones' do.
        with pytest.raises(ConfigurationError, match="need per-rank reading"):
            Options(localized=True, locate="own-index", fetch="pread")
        with pytest.raises(ConfigurationError, match="use fetch='pread'"):
            Options(localized=False, locate="own-index", fetch="mmap")
        with lmdbio.Reader(db, B, MPI.COMM_SELF, variant="toy-direct", shuffle=True,
                           seed=3) as r:
            assert r.variant == "toy-direct"
            for t in range(-(-n // B) + 2):      # the endless stream, past the wrap
                b = r.read_batch()
                idx = (t * B + np.arange(B)) % n
                assert np.array_equal(b.indices, idx)
                assert [bytes(x) for x in b] == [want[i] for i in idx]
            for epoch in (0, 1):                 # shuffled epochs: every record once, right
                seen = []
                for b in r.epoch(epoch):
                    assert [bytes(x) for x in b] == [want[i] for i in b.indices.tolist()]
                    seen += b.indices.tolist()
                assert sorted(seen) == list(range(n)) and seen != list(range(n))
            assert r.stats()[-1]["toy_locate"] == "own index"   # the toy located them
    _check_gone()


def test_a_clashing_registration_is_refused_and_leaves_nothing():
    before = registry.stages()
    twin = Stage("locator", "index-twin", "index-twin", "a second record index", OwnIndex,
                 provides={"extents"}, needs={"node"})   # no tag: its names are index's
    with pytest.raises(ConfigurationError, match="names two combinations of stages"):
        registry.register(twin)
    unknown = Stage("locator", "odd", "odd", "odd look-ups", OwnIndex, provides={"telepathy"})
    with pytest.raises(ConfigurationError, match="no feature text for \\['telepathy'\\]"):
        registry.register(unknown)
    assert registry.stages() == before and registry.named()["lmdbio-lmm-dio"]["locate"] == "index"
