"""A variant is a tuple of stages, chosen once from :class:`~lmdbio.options.Options`.

Each chunk a reader reads goes through them in order::

    Locator -> [Stagger] -> Fetcher -> Distributor        ([Coalesce] sizes the chunk)

========================  =====================================================
stage                     modules (one optimization each)
========================  =====================================================
Locator                   walk.Walk (lmdb, LMM), ring.Ring (DM, with speculation),
                          index.Index (DIO), prov.Prov (PROV), key.Key (lmdb-get),
                          prov.ProvOrIndex (lmdbio-direct)
Fetcher                   fetch.MmapCopy (copy out of LMDB's map), fetch.Preadv (DIO)
Distributor               distribute.Private / PrivateSlots (per rank),
                          distribute.NodeGroup (LMM: the node's shared slots)
Coalesce                  coalesce.Coalesce (COAL: batches per chunk)
Stagger                   stagger.Stagger (STAG: readers take turns)
========================  =====================================================

:data:`VARIANT_STAGES` names the stages of every named variant. Adding a
variant means adding a stage class or a row to the tables below.
"""

from __future__ import annotations

from ..batch import Batch
from ..options import EXTRA_VARIANTS, VARIANTS, Options, parse_variant
from ..plan import Layout, record_indices, slot_bytes
from .coalesce import Coalesce
from .distribute import NodeGroup, Private, PrivateSlots
from .fetch import MmapCopy, Preadv
from .index import Index
from .key import Key
from .prov import Prov, ProvOrIndex
from .ring import Ring
from .stage import Distributor, Extents, Fetcher, Locator, Views
from .stagger import NoStagger, Stagger
from .walk import Walk

__all__ = ["Pipeline", "VARIANT_STAGES", "stage_names", "LOCATORS", "FETCHERS", "DISTRIBUTORS",
           "Locator", "Fetcher", "Distributor", "Views", "Extents"]

#: (localized, locate) -> Locator
LOCATORS: dict[tuple[bool, str], type[Locator]] = {
    (False, "walk"): Walk, (True, "walk"): Walk,
    (True, "ring"): Ring,
    (True, "index"): Index, (False, "index"): ProvOrIndex,
    (True, "provenance"): Prov, (False, "provenance"): ProvOrIndex,
    (False, "key"): Key,
}
#: fetch -> Fetcher
FETCHERS: dict[str, type[Fetcher]] = {"mmap": MmapCopy, "pread": Preadv}
#: (localized, fetch) -> Distributor
DISTRIBUTORS: dict[tuple[bool, str], type[Distributor]] = {
    (False, "mmap"): Private, (False, "pread"): PrivateSlots,
    (True, "mmap"): NodeGroup, (True, "pread"): NodeGroup,
}


def stage_names(options: Options) -> tuple[str, ...]:
    """The stages ``options`` reads with, by name: locator, fetcher, distributor, then the
    optional coalesce and stagger."""
    o = options
    locate = LOCATORS[(o.localized, o.locate)].name + ("+speculate" if o.speculative else "")
    return ((locate, FETCHERS[o.fetch].name, DISTRIBUTORS[(o.localized, o.fetch)].name)
            + (("coalesce",) if o.coalesce_bytes else ()) + (("stagger",) if o.staggered else ()))


#: Every named variant (the papers' seven, lmdb-get, lmdbio-direct) -> its stages.
VARIANT_STAGES: dict[str, tuple[str, ...]] = {
    name: stage_names(parse_variant(name)) for name in VARIANTS + EXTRA_VARIANTS if name != "auto"}


class Pipeline:
    """One variant's stages, wired: each reader locates, fetches and distributes one chunk
    (``k`` batches) at a time; every rank takes its share of each batch as a :class:`Batch`.

    Collective steps (:meth:`prepare`, :meth:`setup`, :meth:`release`) run on every rank of
    ``comm``; :meth:`open` only on the ranks that read (:attr:`is_reader`).
    """

    def __init__(self, options: Options, comm, topology, per_rank: int,
                 build_provenance: bool = False):
        o = self.options = options
        self.comm, self.topology, self.per_rank = comm, topology, per_rank
        self.locator = LOCATORS[(o.localized, o.locate)].from_options(o, build_provenance)
        self.fetcher = FETCHERS[o.fetch]()
        self.distributor = DISTRIBUTORS[(o.localized, o.fetch)](comm, topology, per_rank)
        self.coalesce = Coalesce(o.coalesce_bytes)
        self.stagger: Stagger | NoStagger = NoStagger()
        self.is_reader = self.distributor.is_reader
        self.layout: Layout | None = None
        self._chunk = -1

    # -- setup: prepare, open (inside the Reader's snapshot agreement), setup
    def prepare(self, path) -> None:
        self.locator.prepare(self.comm, path)

    def open(self, path, meta) -> None:
        self.locator.open(path, meta, self.comm.size)
        self.fetcher.open(path)

    def snapshot_id(self) -> tuple[int, int] | None:
        return self.locator.snapshot_id() if self.is_reader else None

    @property
    def locked(self) -> bool | None:
        return self.locator.locked if self.is_reader else None

    def setup(self, n: int, batch_size: int, mean_size: float, row: dict) -> int:
        """Once the snapshot (``n`` records) is agreed: size chunks, let the locator build its
        tables, join the turns and allocate the buffers. Collective; returns ``k``."""
        d = self.distributor
        k = self.coalesce.batches(d.count * mean_size, n // batch_size)
        self.layout = Layout(n, batch_size, d.lo, d.count, k)
        self.locator.setup(self.comm, d.readers, self.layout, row)
        if self.options.staggered and self.is_reader:
            self.stagger = Stagger.join(self.topology, self.options.stagger_size)
        d.setup(self.layout, slot_bytes(d.count * k, mean_size))
        return k

    # -- reading
    def read(self, t: int, rec) -> Batch:
        """This rank's share of batch ``t``."""
        lay = self.layout
        chunk, it = divmod(t, lay.k)
        if chunk != self._chunk:
            if self.is_reader:
                self._fill(chunk, rec)
            else:
                self.distributor.receive(chunk, rec, t)
            self._chunk = chunk
        first = t * lay.batch + self.comm.rank * self.per_rank
        return self.distributor.batch(chunk, it, record_indices(first, self.per_rank, lay.n))

    def _fill(self, chunk: int, rec) -> None:
        """Reader: locate and fetch one chunk's records into the distributor's buffer, publish them."""
        t = chunk * self.layout.k
        located = self.locator.locate(chunk, rec)
        with self.stagger.turn(rec, t):
            with rec.phase("read", t, chain=True) as row:
                offsets, sizes = self.fetcher.fetch(
                    located, lambda nbytes: self.distributor.reserve(chunk, nbytes), row)
                self.locator.fetched(located, row)
        self.distributor.publish(chunk, offsets, sizes, rec, t)

    def describe(self) -> dict:
        return self.locator.describe()

    # -- ending
    def abandon(self) -> None:
        self.distributor.abandon()

    def finish(self, failed: bool, batches: int) -> None:
        """Complete the stages' messages before the ranks agree to close (bounded waits)."""
        stagger, self.stagger = self.stagger, NoStagger()
        self.locator.finish(failed, batches)
        stagger.finish()

    def close_handles(self) -> None:
        """Close the snapshot and the files (not the shared buffers)."""
        try:
            self.locator.close()
        finally:
            self.fetcher.close()

    def release(self, limit: float, agree: bool) -> None:
        """Free the buffers (collective when ``agree``), then every handle."""
        try:
            self.distributor.close(limit, agree)
        finally:
            self.close_handles()
