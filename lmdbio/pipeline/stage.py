"""The stage protocols a variant is built from, and what a Locator hands a Fetcher.

A reader's chunk goes Locator -> (Stagger) -> Fetcher -> Distributor. Each
stage owns the handles it opens (read transaction, cursor, file descriptor,
shared memory) and closes them; stages talk through these methods only.
Each stage class is registered once, with what it provides and needs, in
:mod:`lmdbio.stages` (the registry: :mod:`lmdbio.registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Abilities", "Views", "Extents", "Locator", "Fetcher", "Distributor"]


@dataclass(frozen=True)
class Abilities:
    """What a stage can do, declared once per stage class (``cls.abilities``); the pipeline
    wires and refuses options by it."""

    #: A locator that finds any record positions, not only runs a cursor walks forward to:
    #: shuffled epochs need it.
    random_access: bool = False
    #: A locator that plans any positions as extents (``locate_positions``): a shuffled epoch
    #: then reads whole windows (:mod:`lmdbio.pipeline.window`).
    windowed: bool = False
    #: A distributor whose reading needs no messages between ranks: a background thread may
    #: read ahead (:mod:`lmdbio.pipeline.prefetch`).
    collective_free: bool = False
    #: A distributor whose buffers keep ``ahead`` more chunks valid when asked (prefetch).
    extra_slots: bool = False


@dataclass
class Views:
    """Records as memoryviews into LMDB's map (valid while the locator's snapshot lives).

    ``values`` were taken while locating (a cursor walk); ``lookup`` gets
    them during the fetch instead (``txn.get`` per key). ``guard`` raises if
    the file shrank below the snapshot (touching the map there is SIGBUS).
    """

    guard: Callable[[], None]
    values: list | None = None
    lookup: Callable[[], list] | None = None

    def take(self) -> list:
        self.guard()
        if self.lookup is not None:
            return self.lookup()
        assert self.values is not None, "Views without values need a lookup"
        return self.values


@dataclass
class Extents:
    """Records as planned file extents (:func:`lmdbio.plan.plan_extents`): read
    ``length[e]`` bytes at ``start[e]`` back to back; record i lands at ``buf_off[i]``.
    ``scatter``: how to read them back to back instead (:class:`~.fetch.Scatter`), when
    planned."""

    start: np.ndarray
    length: np.ndarray
    buf_off: np.ndarray
    sizes: np.ndarray
    scatter: Any = None


class Locator:
    """Finds a reader's records: opens the snapshot it reads, then locates one chunk at a time."""

    name = ""
    abilities = Abilities()
    #: LMDB's reader lock protects this locator's snapshot (None: nothing open).
    locked: bool | None = None

    @classmethod
    def from_options(cls, options, build_provenance: bool = False) -> Locator:
        return cls()

    def prepare(self, comm, path) -> None:
        """Before the database is opened; collective over ``comm``."""

    def open(self, path, meta, nprocs: int) -> None:
        """Open the snapshot (reader ranks only, inside the Reader's snapshot agreement)."""

    def snapshot_id(self) -> tuple[int, int] | None:
        """``(txnid, entries)`` of the open snapshot, or None if none is open."""
        return None

    def setup(self, comm, readers, schedule, row: dict) -> None:
        """Once every rank holds the agreed snapshot: build what locating ``schedule``'s
        positions (:meth:`~lmdbio.plan.Stream.touched`) needs. Collective over ``comm``
        (``readers``: the readers' communicator, None on ranks that do not read)."""

    def locate(self, chunk: int, schedule, rec) -> Views | Extents:
        """This reader's records of ``chunk`` of ``schedule`` (a :class:`~lmdbio.plan.Stream`
        or :class:`~lmdbio.plan.EpochSchedule`)."""
        raise NotImplementedError

    def fetched(self, located, row: dict) -> None:
        """After the fetch of ``located`` (in its ``read`` phase)."""

    def finish(self, failed: bool, batches: int) -> None:
        """At close, before the ranks agree: complete this stage's messages (bounded).
        ``failed``: this rank is leaving with an error; ``batches``: batches it delivered."""

    def close(self) -> None:
        """Release every handle; safe to call twice."""

    def describe(self) -> dict:
        """Choices made at setup, for ``Reader.stats()``."""
        return {}


class Fetcher:
    """Gets located records' bytes into a buffer the Distributor provides."""

    name = ""

    def open(self, path) -> None:
        """Open what it reads with (reader ranks only)."""

    def fetch(self, located, alloc: Callable[[int], np.ndarray],
              row: dict) -> tuple[np.ndarray, np.ndarray]:
        """Fill ``alloc(nbytes)``; returns the records' ``(offsets, sizes)`` in it."""
        raise NotImplementedError

    def close(self) -> None:
        """Release every handle; safe to call twice."""


class Distributor:
    """Owns the buffers chunks land in, and hands each rank its share of a batch as a Batch.

    Its methods number chunks by hand-off (``seq``): 0, 1, 2, ... in the order the chunks are
    read, the same on every rank that shares the buffers, whatever the chunks' own numbers
    (reading jumps at epoch boundaries). ``t`` is the chunk's first batch, for messages.
    """

    name = ""
    is_reader = True
    abilities = Abilities()
    #: Chunks a rank's prefetch thread may ask for beyond what its caller holds (set by the
    #: Pipeline before :meth:`setup`: depth + 1, or 0 without prefetch); the buffers must
    #: keep that many more chunks valid.
    ahead = 0
    #: The communicator of the ranks that read into these buffers (None on a rank that does
    #: not read), and the records of each batch they read: ``count`` from position ``lo``.
    readers: Any
    lo: int
    count: int

    def __init__(self, comm, topology, per_rank: int) -> None:
        """This rank's buffers on ``comm``, ``per_rank`` records of each batch per rank."""
        raise NotImplementedError

    def setup(self, stream, capacity: int) -> None:
        """Allocate the buffers for ``stream``'s chunks (its ``count * k`` records, at most
        ``capacity`` bytes each); collective over the ranks that share them."""

    def reserve(self, seq: int, nbytes: int, t: int = -1) -> np.ndarray:
        raise NotImplementedError

    def publish(self, seq: int, offsets: np.ndarray, sizes: np.ndarray, rec, t: int) -> None:
        raise NotImplementedError

    def receive(self, seq: int, rec, t: int) -> None:
        """Ranks that do not read: wait until hand-off ``seq`` is published."""

    def batch(self, seq: int, it: int, indices: np.ndarray):
        raise NotImplementedError

    def abandon(self) -> None:
        """This rank failed: tell the ranks waiting on it (best effort)."""

    def close(self, limit: float, agree: bool) -> None:
        """Free the buffers (collective when ``agree``)."""
