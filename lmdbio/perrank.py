"""Per-rank strategies: every rank reads its own records, with no reader election and no hand-off.

The Reader picks one strategy object from its :class:`~lmdbio.options.Options`
when ``localized`` is False (:func:`per_rank_strategy`):

- :class:`CursorWalk` (``lmdb``): Caffe's pattern. Each rank walks an LMDB
  cursor with ``next()`` to its records and copies the values out of the map.
- :class:`KeyGet` (``lmdb-get``): the PyTorch-Dataset pattern. Each rank
  knows its keys (enumerated once at setup) and calls ``txn.get(key)`` per
  record, with LMDB's reader lock on.
- :class:`Direct` (``lmdbio-direct``): each rank ``pread``s its own records
  with byte offsets from the provenance sidecar (when it is current) or the
  record index (built once, scattered), several of its batches per request
  into its own rotating, pre-faulted buffers.

A strategy's ``open`` runs inside the Reader's snapshot agreement (it sets
the Reader's ``_env``/``_walker``/``_snapshot``/``_fd``, which the Reader
closes); ``setup`` runs once the snapshot is agreed (collective); ``read``
returns one :class:`~lmdbio.reader.Batch`.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from .io import (CursorWalker, coalesce_batches, copy_values, plan_extents, positions_touched,
                 read_extents)

__all__ = ["PerRankStrategy", "CursorWalk", "KeyGet", "Direct", "per_rank_strategy"]

log = logging.getLogger("lmdbio")


class PerRankStrategy:
    """How a rank locates and fetches its own records (see the module doc)."""

    name = "per-rank"
    #: Batches fetched per request (COAL-like); the bench starts timing on a multiple of it.
    coalesce = 1

    def open(self, r) -> None:
        """Open what this rank reads (inside the Reader's snapshot agreement)."""

    def setup(self, r, row: dict) -> None:
        """Setup once every rank holds the same snapshot; collective (a failure raises everywhere)."""

    def read(self, r, t: int):
        raise NotImplementedError

    def describe(self) -> dict:
        """Choices made at setup, for ``Reader.stats()``."""
        return {}


class CursorWalk(PerRankStrategy):
    """``lmdb``: walk a cursor with ``next()`` to this rank's records, copy them out of the map."""

    name = "lmdb"

    def open(self, r) -> None:
        r._open_env()
        r._walker = CursorWalker(r._env, r.n)

    def read(self, r, t: int):
        from .reader import Batch

        first = t * r.batch_size + r.rank * r.per_rank
        w = r._walker
        with r.rec.phase("locate", t) as row:
            w0 = w.walked
            w.skip_to(first)
            values = w.take(r.per_rank)
            row["records_walked"] = w.walked - w0
        with r.rec.phase("read", t, chain=True) as row:
            w.check_size()   # a file that shrank would kill the copy with SIGBUS
            buf, offsets, sizes = copy_values(values, lambda nb: np.empty(nb, dtype=np.uint8))
            row["bytes"], row["calls"] = int(sizes.sum()), len(values)
        return Batch(buf, offsets, sizes, r._indices(first))


class KeyGet(PerRankStrategy):
    """``lmdb-get``: ``txn.get(key)`` for each of this rank's records, keys listed at setup."""

    name = "lmdb-get"

    def open(self, r) -> None:
        r._open_env()
        r._walker = CursorWalker(r._env, r.n)   # its read transaction is the snapshot

    def setup(self, r, row: dict) -> None:
        from .reader import collective

        collective(r.comm, self._list_keys, r, row)

    def _list_keys(self, r, row: dict) -> None:
        # As a Dataset does in __init__: list the keys (here only this rank's).
        self._pos = positions_touched(r.n, r.batch_size, r.rank * r.per_rank, r.per_rank)
        self._keys = self._keys_from_leaves(r)
        self.keys_from = "leaf pages" if self._keys is not None else "cursor"
        if self._keys is None:
            # A cursor listing keys still reads the first page of every
            # overflow value (LMDB returns the value with the key), so on cold
            # storage it reads the whole file in setup: the fallback only.
            want = np.zeros(r.n, dtype=bool)
            want[self._pos] = True
            cur = r._walker.txn.cursor()
            try:
                self._keys = [bytes(k) for i, k in enumerate(cur.iternext(keys=True, values=False))
                              if want[i]]
            finally:
                cur.close()
        if len(self._keys) != len(self._pos):
            from .errors import SnapshotError

            raise SnapshotError(f"{r.path}: found {len(self._keys)} of this rank's "
                                f"{len(self._pos)} keys in the snapshot; the database changed")
        self._get = r._walker.txn.get
        row["keys_listed"] = len(self._keys)

    def _keys_from_leaves(self, r) -> list[bytes] | None:
        """This rank's keys from the leaf pages of the reader's own snapshot (the
        stored key list a Dataset would load), or None when that snapshot is not
        the current tree (a writer committed since): the cursor lists them then."""
        from .errors import LmdbioError
        from .index import build_index

        try:
            idx = build_index(r.path)
            if idx.txnid != r._walker.txn.id() or len(idx) != r.n:
                return None
            # Our read transaction pins this version's pages, so the walk was safe.
            keys = idx.keys(0, r.n)
        except LmdbioError:
            return None
        return [keys[i] for i in self._pos.tolist()]

    def read(self, r, t: int):
        from .io import positions_runs
        from .reader import Batch

        first = t * r.batch_size + r.rank * r.per_rank
        with r.rec.phase("locate", t):
            keys = []
            for a, m in positions_runs(first, r.per_rank, r.n):
                i0 = int(np.searchsorted(self._pos, a))
                keys += self._keys[i0:i0 + m]
        with r.rec.phase("read", t, chain=True) as row:
            r._walker.check_size()
            get = self._get
            values = [get(k) for k in keys]
            buf, offsets, sizes = copy_values(values, lambda nb: np.empty(nb, dtype=np.uint8))
            row["bytes"], row["calls"] = int(sizes.sum()), len(values)
        return Batch(buf, offsets, sizes, r._indices(first))


class Direct(PerRankStrategy):
    """``lmdbio-direct``: this rank preads its own records, ``coalesce`` batches per request.

    Offsets come from the provenance sidecar when every rank can load it for
    the agreed snapshot and the ranks' shares of its check against the file
    all pass, else from the record index (one rank walks it and sends each
    rank its positions; a sidecar that fails the check is named in one
    warning and in :meth:`describe`). A chunk of ``coalesce`` of this rank's
    batches is planned into the fewest extents and read into one of three
    rotating private buffers, faulted in at setup; batches are views. Three
    slots keep every batch valid until the rank's second following read.
    """

    name = "lmdbio-direct"
    SLOTS = 3

    def __init__(self, coalesce_bytes: int):
        self.coalesce_bytes = int(coalesce_bytes)
        self.locate = ""
        self.refused = ""   # why a loaded sidecar was not used (failed its check)

    def open(self, r) -> None:
        from .index import open_snapshot

        r._snapshot = open_snapshot(r.path)
        r._fd = os.open(r.path, os.O_RDONLY)

    def _load_prov(self, r):
        from .errors import LmdbioError
        from .provenance import load_provenance

        try:
            prov = load_provenance(r.path)
            r._snapshot.check(prov.txnid)
            return prov
        except LmdbioError:
            return None

    def _check_prov(self, r, prov, row: dict) -> str | None:
        """This rank's share of the sidecar's check (collective): None, or what is wrong."""
        from .errors import ProvenanceError
        from .provenance import verify_shares

        try:
            verify_shares(r.comm, prov, r._fd, r._snapshot.meta, row)
        except ProvenanceError as exc:
            return str(exc)
        return None

    def setup(self, r, row: dict) -> None:
        from .reader import collective, scatter_index

        comm, n, B, m = r.comm, r.n, r.batch_size, r.per_rank
        lo = r.rank * m
        self._lo = lo
        self._pos = pos = positions_touched(n, B, lo, m)
        prov = self._load_prov(r)
        use_prov = comm.allreduce(0 if prov is None else 1, op=_min_op()) == 1
        if use_prov:
            # A sidecar is used only if every rank's share of its check passed.
            problems = comm.allgather(collective(comm, self._check_prov, r, prov, row))
            bad = [(rank, p) for rank, p in enumerate(problems) if p]
            if bad:
                use_prov = False
                self.refused = f"rank {bad[0][0]}: {bad[0][1]}"
                if comm.rank == 0:
                    log.warning("lmdbio-direct: not using the provenance sidecar, reading with the "
                                "record index instead: %s", self.refused)
        if use_prov:
            self.locate = "provenance"

            def from_prov():
                prov.verify(r._fd, int(pos[0]), 1)
                prov.verify(r._fd, int(pos[-1]), 1)
                offs, sizes = prov.extents(0, n)
                return offs[pos].astype(np.int64), sizes[pos].astype(np.int64)
            self._off, self._size = collective(comm, from_prov)
        else:
            self.locate = "index"
            # Collective: a rank whose snapshot check fails raises on every rank.
            _, self._off, self._size = collective(comm, scatter_index, comm, r._snapshot, n, B, lo, m,
                                                  row)
        # Coalescing: a power of two of this rank's batches per request.
        per_batch = max(1.0, m * r._mean_size)
        self.coalesce = k = coalesce_batches(per_batch, self.coalesce_bytes, n // B)
        self._j = lo + np.arange(m, dtype=np.int64)
        self._dt = np.arange(k, dtype=np.int64)[:, None] * B
        cap = int(k * per_batch * 1.25) + (64 << 10)
        self._slots = [np.empty(cap, dtype=np.uint8) for _ in range(self.SLOTS)]
        for s in self._slots:
            s[::4096] = 0   # fault the pages in now, not in the first batches
        self._chunk = -1
        row["coalesce"] = k

    def _fill(self, r, chunk: int) -> None:
        k, B, n = self.coalesce, r.batch_size, r.n
        with r.rec.phase("locate", chunk * k) as row:
            p = ((chunk * k * B + self._dt) + self._j[None, :]) % n
            i = np.searchsorted(self._pos, p.ravel())
            ext_start, ext_len, buf_off = plan_extents(self._off[i], self._size[i])
            row["extents"] = len(ext_start)
        with r.rec.phase("read", chunk * k, chain=True) as row:
            slot = chunk % self.SLOTS
            need = int(ext_len.sum())
            if need > len(self._slots[slot]):
                self._slots[slot] = np.empty(int(need * 1.25), dtype=np.uint8)
            row["bytes"], row["calls"] = read_extents(r._fd, self._slots[slot], ext_start, ext_len,
                                                      str(r.path))
        self._buf = self._slots[slot]
        self._offs = buf_off.reshape(k, r.per_rank)
        self._sizes = self._size[i].reshape(k, r.per_rank)
        self._chunk = chunk

    def read(self, r, t: int):
        from .reader import Batch

        chunk, it = divmod(t, self.coalesce)
        if chunk != self._chunk:
            self._fill(r, chunk)
        first = t * r.batch_size + self._lo
        return Batch(self._buf, self._offs[it], self._sizes[it], r._indices(first))

    def describe(self) -> dict:
        out = {"direct_locate": self.locate, "coalesce": self.coalesce}
        if self.refused:
            out["provenance_refused"] = self.refused
        return out


def _min_op():
    from mpi4py import MPI

    return MPI.MIN


def per_rank_strategy(options) -> PerRankStrategy:
    """The strategy for non-localized Options (every rank reads its own records)."""
    from .errors import ConfigurationError

    if options.locate == "walk" and options.fetch == "mmap":
        return CursorWalk()
    if options.locate == "key" and options.fetch == "mmap":
        return KeyGet()
    if options.fetch == "pread" and options.locate in ("index", "provenance"):
        return Direct(options.coalesce_bytes)
    raise ConfigurationError(f"no per-rank strategy reads with locate={options.locate!r} and "
                             f"fetch={options.fetch!r}")
