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
Prefetch                  prefetch.Prefetch (a thread reads d batches ahead)
Window                    window.Window (a shuffled epoch reads each window once, as
                          large extents, and gathers its batches from memory)
Epoch                     epoch.epoch_rows (the positions of an epoch's batches:
                          file order or shuffled; the last-batch policy)
========================  =====================================================

Between epochs the batches are the endless stream (:class:`~lmdbio.plan.Stream`,
batch t: positions ``(t*B + j) mod n``); an epoch reads its own rows
(:class:`~lmdbio.plan.EpochSchedule`). Every read names the schedule it is of;
where a Reader is (the next batch, the live epoch, its prefetch) is one
:class:`~.iteration.Iteration`. Each stage class declares what it can do in
one :class:`~.stage.Abilities`: shuffled epochs need a locator that reads any
position (``random_access``: index, provenance, key), the cursor walks (walk,
ring) serve file-order epochs only; a shuffled epoch on a locator that plans
extents (``windowed``) reads through :class:`~.window.Window`; prefetch needs
a distributor whose reads send no messages (``collective_free``, or MPI with
threads) and keeps extra chunks valid (``extra_slots``).

:data:`VARIANT_STAGES` names the stages of every named variant. Which stages
go together, the tables below and the variant names all come from the stage
registry (:mod:`lmdbio.registry`; the stages in :mod:`lmdbio.stages`): adding
an optimization is a stage class and one registration (docs/reader.md, "How
to add an optimization").
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..batch import Batch
from ..collective import collective
from .. import registry
from ..options import EXTRA_VARIANTS, VARIANTS, Options
from ..plan import EpochSchedule, Stream, slot_bytes, stream_block
from .coalesce import Coalesce
from ..errors import ConfigurationError
from .epoch import EpochPlan, EpochRows, epoch_rows
from .prefetch import Prefetch, check_prefetch
from .iteration import Iteration
from .stage import Abilities, Distributor, Extents, Fetcher, Locator, Views
from .stagger import NoStagger, Stagger
from .window import NoWindow, Window

__all__ = ["Pipeline", "Iteration", "Abilities", "VARIANT_STAGES", "EpochPlan", "EpochRows",
           "epoch_rows", "shuffles", "stage_names", "LOCATORS", "FETCHERS", "DISTRIBUTORS",
           "Locator", "Fetcher", "Distributor", "Views", "Extents"]

# The stage tables, derived from the stage registry (lmdbio/stages.py) and live with it.
#: (localized, locate) -> Locator
LOCATORS: Mapping[tuple[bool, str], type[Locator]] = registry.StageTable("locator",
                                                                         ("localized", "locate"))
#: fetch -> Fetcher
FETCHERS: Mapping[str, type[Fetcher]] = registry.StageTable("fetcher", ("fetch",))
#: (localized, fetch) -> Distributor
DISTRIBUTORS: Mapping[tuple[bool, str], type[Distributor]] = registry.StageTable(
    "distributor", ("localized", "fetch"))


def stage_names(options: Options) -> tuple[str, ...]:
    """The stages ``options`` reads with, by name: locator, fetcher, distributor, then the
    optional coalesce and stagger."""
    return registry.stage_names(options)


def shuffles(options: Options) -> bool:
    """Whether ``options``' locator reads any record positions (shuffled epochs)."""
    return LOCATORS[(options.localized, options.locate)].abilities.random_access


#: Every named variant (the papers' seven, lmdb-get, lmdbio-direct) -> its stages.
VARIANT_STAGES: dict[str, tuple[str, ...]] = {
    name: registry.variant_stages(name) for name in VARIANTS + EXTRA_VARIANTS if name != "auto"}


class Pipeline:
    """One variant's stages, wired: each reader locates, fetches and distributes one chunk
    (``k`` batches) at a time; every rank takes its share of each batch as a :class:`Batch`.

    Collective steps (:meth:`prepare`, :meth:`setup`, :meth:`release`) run on every rank of
    ``comm``; :meth:`open` only on the ranks that read (:attr:`is_reader`).
    """

    def __init__(self, options: Options, comm, topology, per_rank: int,
                 build_provenance: bool = False, epochs: EpochPlan | None = None,
                 prefetch: int = 0):
        o = self.options = options
        dist = DISTRIBUTORS[(o.localized, o.fetch)]
        self.depth = check_prefetch(prefetch, dist.abilities.collective_free, o.name)
        if self.depth and not dist.abilities.extra_slots:
            raise ConfigurationError(f"variant {o.name!r} keeps no extra buffers for batches read "
                                     "ahead; use prefetch=0")
        self.epochs = epochs if epochs is not None else EpochPlan()
        if self.epochs.shuffle and not shuffles(o):
            able = ", ".join(n for n in registry.variants() if not registry.is_cursor_walk(n))
            raise ConfigurationError(
                f"variant {o.name!r} locates records by walking a cursor forward, which cannot "
                f"serve a shuffled epoch without walking the file once per chunk; use a variant "
                f"that reads any record position ({able}), or shuffle=False")
        self.comm, self.topology, self.per_rank = comm, topology, per_rank
        self.locator = LOCATORS[(o.localized, o.locate)].from_options(o, build_provenance)
        self.fetcher = FETCHERS[o.fetch]()
        self.distributor = dist(comm, topology, per_rank)
        # See prefetch.py: the thread holds d queued batches and one in flight.
        self.distributor.ahead = self.depth + 1 if self.depth else 0
        self.coalescer = Coalesce(o.coalesce_bytes)
        self.stagger: Stagger | NoStagger = NoStagger()
        self.window: Window | NoWindow = NoWindow()
        self.is_reader = self.distributor.is_reader
        self.stream: Stream | None = None   # set by setup()
        self._all_positions = False          # the locator's tables cover every record
        self._seq = -1   # hand-offs so far: the distributor's buffers rotate by it
        # The chunk last handed off, and of which schedule; this rank's indices of its batches
        # in it, one row per batch (laid out once per chunk by _advance).
        self._at: tuple = (None, -1)
        self._indices = np.zeros((0, 0), np.int64)
        self._short = (-1, 0)   # (batch of the chunk that is short, records this rank keeps)

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
        k = self.coalescer.agreed(self.comm, d.count * mean_size, n // batch_size)   # one k for all
        self.stream = Stream(n, batch_size, d.lo, d.count, k)
        self.locator.setup(self.comm, d.readers, self.stream, row)
        if self.options.staggered and self.is_reader:
            self.stagger = Stagger.join(self.topology, self.options.stagger_size)
        # Collective: a group that cannot allocate its slots (no room in /dev/shm) raises on
        # every rank, not only on its own.
        collective(self.comm, d.setup, self.stream, slot_bytes(d.count * k, mean_size))
        self.epochs = self.epochs.with_block(n, batch_size, mean_size)
        return k

    def agreed_stream(self) -> Stream:
        """The stream :meth:`setup` laid out for the agreed snapshot."""
        assert self.stream is not None, "setup() comes first"
        return self.stream

    # -- epochs
    def start_epoch(self, epoch: int, t0: int, rec) -> tuple[EpochRows, EpochSchedule]:
        """Epoch ``epoch``'s rows and their schedule from batch ``t0`` (a multiple of ``k``) on.
        Collective the first time: the locator's tables are rebuilt to cover every record."""
        base = self.agreed_stream()
        rows = epoch_rows(self.epochs, base.n, base.batch, self.comm.size, base.k, epoch)
        schedule = base.epoch(rows.rows, t0)
        if not self._all_positions:
            with rec.phase("setup", -1) as row:
                self.locator.setup(self.comm, self.distributor.readers, schedule, row)
            self._all_positions = True
        self.window.close()
        self.window = NoWindow()
        windows = (self.epochs.windows(base.n, epoch)
                   if self.locator.abilities.windowed and self.is_reader else None)
        if windows is not None:
            self.window = Window(schedule, rows, self.per_rank, windows)
        return rows, schedule

    def end_epoch(self) -> None:
        """The epoch's window is let go; reads go on with the stream's schedule."""
        self.window.close()
        self.window = NoWindow()

    def prefetch(self, start: int, stop: int, schedule, rows: EpochRows | None, rec
                 ) -> Prefetch | None:
        """Read batches ``start .. stop-1`` of ``schedule`` ahead in a thread (None when the
        depth is 0)."""
        if not self.depth:
            return None
        return Prefetch(lambda t: self.read(t, schedule, rows, rec), start, stop, self.depth,
                        self.comm.rank)

    # -- reading
    def read(self, t: int, schedule, rows: EpochRows | None, rec) -> Batch:
        """This rank's share of batch ``t`` of ``schedule`` (the stream, or an epoch's with its
        ``rows``: the last batch may be short)."""
        chunk, it = divmod(t, schedule.k)
        if self._at != (schedule, chunk):
            self._advance(t, chunk, schedule, rows, rec)
        b = self.distributor.batch(self._seq, it, self._indices[it])
        if it == self._short[0]:   # a short last batch: this rank's share is the front of its block
            keep = self._short[1]
            b = Batch(b.buffer, b.offsets[:keep], b.sizes[:keep], b.indices[:keep],
                      chunk=b.chunk, row=b.row)
        return b

    def _advance(self, t: int, chunk: int, schedule, rows: EpochRows | None, rec) -> None:
        """Fill (or receive) ``chunk`` of ``schedule`` (batch ``t`` asked for it), and lay out
        once what its ``k`` batches need: this rank's indices, one row per batch, and which
        batch is short, if any."""
        # Buffers rotate by hand-off number, the chunks in the order they are read (the same on
        # every rank of a group), not by chunk number: where reading jumps (an epoch left
        # early, the stream after an epoch) the slot a held batch views is then still the one
        # refilled last.
        self._seq += 1
        if self.is_reader:
            self._fill(chunk, self._seq, schedule, rec)
        else:
            self.distributor.receive(self._seq, rec, t)
        k, share, r = schedule.k, self.per_rank, self.comm.rank
        at = r * share - schedule.lo   # this rank's columns in its reader's rows
        self._short = (-1, share)
        if rows is not None:   # an epoch's rows, a view
            i = chunk * k - schedule.t0
            self._indices = schedule.rows[i:i + k, r * share:(r + 1) * share]
            last, keep = rows.batches - 1 - i, rows.kept(rows.batches - 1, r, share)
            if 0 <= last < k and keep < share:
                self._short = (last, keep)
        elif self.is_reader and 0 <= at <= schedule.count - share:
            # The block the locator located this chunk from (the stream keeps its last).
            self._indices = schedule.chunk_block(chunk)[:, at:at + share]
        else:
            self._indices = stream_block(chunk * k, k, schedule.batch, r * share, share,
                                         schedule.n)
        self._at = (schedule, chunk)

    def _fill(self, chunk: int, seq: int, schedule, rec) -> None:
        """Reader: locate and fetch one chunk's records into the distributor's buffer (hand-off
        ``seq``), publish them. With a window (a shuffled epoch), the fetch reads the windows
        the chunk needs and are not in memory yet (none, one or two), in this chunk's one turn."""
        t = chunk * schedule.k
        alloc = lambda nbytes: self.distributor.reserve(seq, nbytes, t)
        todo = self.window.locate(chunk, self.locator, schedule, alloc, rec)
        with self.stagger.turn(rec, t):
            fetched = self._fetch(todo, t, rec)
        offsets, sizes = self.window.serve(chunk, fetched, alloc, rec)
        self.distributor.publish(seq, offsets, sizes, rec, t)

    def _fetch(self, todo: list[tuple], t: int, rec) -> list[tuple]:
        """Fetch each ``(located, into)`` pair in one ``read`` phase, whose row sums their
        counters; returns each pair's ``(offsets, sizes)``."""
        with rec.phase("read", t, chain=True) as row:
            fetched = []
            for located, into in todo:
                part: dict = {}
                fetched.append(self.fetcher.fetch(located, into, part))
                self.locator.fetched(located, part)
                for key, value in part.items():
                    row[key] = row.get(key, 0) + value
            return fetched

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
