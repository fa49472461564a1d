"""The parallel Reader: locate -> fetch -> distribute, one Batch per call."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

from . import datum
from .errors import ConfigurationError, LmdbioError, PeerError, PeerTimeoutError, SnapshotError
from .io import (CursorWalker, Stagger, coalesce_batches, copy_values, plan_extents,
                 positions_runs, positions_touched, read_extents)
from .metrics import PhaseRecorder, totals_row, totals_snapshot
from .options import Options, choose_auto, parse_variant
from .perrank import per_rank_strategy
from .shm import GroupBuffer
from .waiting import completes_within, timeout, wait_request, wait_until
from .topology import Topology, make_topology, node_number

__all__ = ["Reader", "Batch", "collective"]

log = logging.getLogger("lmdbio")

# Requests of exit agreements a rank gave up on (a peer never came): they and
# their buffers must outlive the request, which MPI may still complete.
_ABANDONED: list = []

# Tag of close()'s point-to-point agreement on the Reader's communicator.
_CLOSE_TAG = 0x1D05

# How long ranks that raised inside ``with Reader`` wait for each other before
# a lone failure is handled by on_error (at most LMDBIO_TIMEOUT).
EXIT_TIMEOUT = 10.0


def _exit_timeout() -> float:
    raw = os.environ.get("LMDBIO_EXIT_TIMEOUT", "").strip()
    try:
        value = float(raw) if raw else EXIT_TIMEOUT
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigurationError(f"LMDBIO_EXIT_TIMEOUT must be a positive number of seconds, "
                                 f"got {raw!r}; unset it for the default ({EXIT_TIMEOUT:g} s)")
    return min(max(value, 0.1), timeout())


def _default_on_error() -> str:
    return os.environ.get("LMDBIO_ON_ERROR", "").strip().lower() or "abort"


def check_settings(on_error: str) -> None:
    """Check the environment settings a Reader reads later (at a timeout, at close), now.

    Raises ConfigurationError naming the variable, so a bad value fails the
    construction on every rank instead of surfacing at close().
    """
    timeout()
    _exit_timeout()
    if on_error not in ("abort", "raise"):
        where = " (from LMDBIO_ON_ERROR)" if os.environ.get("LMDBIO_ON_ERROR", "").strip() else ""
        raise ConfigurationError(f"on_error must be 'abort' or 'raise', got {on_error!r}{where}")


class Batch:
    """One rank's share of a global batch: a buffer plus per-record offsets and sizes.

    ``batch[i]`` is a zero-copy memoryview of record i's value. Views into
    shared memory stay valid until this rank's second following
    ``read_batch()``; copy what must live longer. ``close()`` never unmaps
    memory a batch still views: the Reader's last batches stay readable
    after it (their memory is freed by a later close of the same ranks).
    """

    __slots__ = ("buffer", "offsets", "sizes", "indices")

    def __init__(self, buffer: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
                 indices: np.ndarray):
        self.buffer = buffer
        self.offsets = offsets
        self.sizes = sizes
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> memoryview:
        o = int(self.offsets[i])
        return memoryview(self.buffer)[o:o + int(self.sizes[i])]

    def __iter__(self):
        mv = memoryview(self.buffer)
        for o, s in zip(self.offsets.tolist(), self.sizes.tolist()):
            yield mv[o:o + s]

    @property
    def nbytes(self) -> int:
        """Bytes of this rank's records."""
        return int(self.sizes.sum())

    def as_datum_array(self, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Decode the records as Caffe Datums: ``(n, c, h, w)`` uint8 images and labels."""
        return datum.decode_many(self, out=out)


def collective(comm: MPI.Comm, fn: Callable, *args, **kwargs):
    """Run ``fn`` on every rank; if it fails anywhere, raise on every rank.

    The error raised is the failing rank's (lowest rank wins), re-raised with
    its type (LmdbioError where that type cannot be rebuilt from a message),
    so no rank is left waiting in a later collective.
    """
    try:
        result, err = fn(*args, **kwargs), None
    except BaseException as exc:  # whatever it is (Ctrl-C too), it must not strand the other ranks
        result, err = None, exc
    errors = comm.allgather(None if err is None else (type(err), str(err)))
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        if err is not None and failed[0][0] == comm.rank:
            raise err
        r, (etype, msg) = failed[0]
        try:
            exc = etype(f"rank {r}: {msg}")
        except Exception:
            exc = LmdbioError(f"rank {r}: {msg}")
        raise exc
    return result


def scatter_index(comm: MPI.Comm, snapshot, n: int, batch: int, lo: int, count: int,
                  row: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DIO's index pass, once: rank 0 of ``comm`` walks ``snapshot``'s index and sends each rank
    only the records it will read (:func:`positions_touched` of its ``lo``, ``count``).

    Collective over ``comm``; a failed walk raises on every rank. Returns this rank's
    ``(positions, offsets, sizes)`` (int64), checked against its own snapshot.
    """
    wants = comm.gather((lo, count), root=0)
    idx = collective(comm, lambda: snapshot.build_index() if comm.rank == 0 else None)
    if comm.rank == 0:
        row["pages_read"] = idx.pages_read
        parts = []
        for w_lo, w_count in wants:
            pos = positions_touched(n, batch, w_lo, w_count)
            parts.append((pos, idx.offsets[pos].astype(np.int64), idx.sizes[pos].astype(np.int64),
                          idx.txnid))
        for k in range(1, comm.size):
            comm.send(parts[k], dest=k, tag=11)
        mine = parts[0]
    else:
        mine = comm.recv(source=0, tag=11)
    pos, offsets, sizes, txnid = mine
    snapshot.check(txnid)
    return pos, offsets, sizes


class Reader:
    """Reads an LMDB from many MPI ranks; every variant delivers the same records.

    Global batch t holds the records at positions ``(t*B + j) mod N`` in key
    order; rank r of P gets ``j`` in ``[r*B/P, (r+1)*B/P)``.

    Snapshot: the Reader reads one version of the database, the one it opened
    (every reader holds an LMDB read transaction, with LMDB's reader lock
    unless the lock file cannot be opened, e.g. on read-only media). A writer
    may append, overwrite or delete meanwhile; the Reader still delivers the
    records of its snapshot (``n`` is the snapshot's entry count), or raises
    an LmdbioError on every rank (PROV: a sidecar older than the snapshot).

    Errors and liveness: every setup step is collective, so a setup error on
    one rank raises on all. Waits for peers are bounded by ``LMDBIO_TIMEOUT``
    seconds (default 120): a rank that stops calling :meth:`read_batch` (or
    exits) makes its peers raise :class:`~lmdbio.errors.PeerTimeoutError`
    naming it, and a rank that fails tells its reader group at once
    (:class:`~lmdbio.errors.PeerError` there). When an exception (including
    KeyboardInterrupt) leaves a ``with Reader(...)`` block, the ranks agree,
    without blocking, for up to ``LMDBIO_EXIT_TIMEOUT`` seconds (default 10)
    whether every rank is leaving too: if so the Reader closes cleanly and the
    exception propagates on every rank (ranks that left without an error get
    PeerError from close()). Only a rank that fails *alone* (the others do not
    come) acts on ``on_error``: ``"abort"`` calls ``MPI_Abort`` so no rank
    waits for ever; ``"raise"`` raises on that rank only and the others are
    released by their own timeouts. Batches stay readable after
    :meth:`close`: shared memory that a batch still views is kept mapped until
    the process ends.

    Args:
        path: LMDB directory or data.mdb file. ``{node}`` in it is replaced by
            the rank's node number (``rank // ranks_per_node`` for virtual
            nodes, else the index of its shared-memory node), so each node
            can read its own copy or mount (``"MNT/node{node}/cifar10"``).
        batch_size: global batch size B (a multiple of the number of ranks).
        comm: communicator (default COMM_WORLD).
        variant: a name from ``lmdbio.VARIANTS`` or ``lmdbio.EXTRA_VARIANTS``
            (case-insensitive). ``"auto"`` picks by the file system the
            database lives on (:func:`lmdbio.options.choose_auto`); the
            choice is :attr:`variant`, the reason :attr:`auto_reason`.
        ranks_per_node: None for real nodes; k for virtual nodes of k ranks.
        readers_per_node: reader ranks per node.
        options: explicit :class:`Options` instead of ``variant``.
        coalesce_bytes: COAL's target request size (default 4 MiB).
        stagger_size: STAG's readers per group (default half the readers).
        build_provenance: PROV builds a missing or stale sidecar instead of failing.
        measure: record per-phase timings for :meth:`stats`.
        on_error: what a rank that fails alone does (see above): ``"abort"``
            ends the whole job; ``"raise"`` raises on that rank only (the
            others stop at their timeout). Default: ``$LMDBIO_ON_ERROR`` or
            ``"abort"`` (ipyparallel engines set ``raise`` so one error never
            kills the cluster). Outside a ``with`` block a failing
            :meth:`read_batch` acts on it at once.
    """

    def __init__(self, path, batch_size: int, comm: MPI.Comm | None = None,
                 variant: str = "lmdbio-lmm-dio", ranks_per_node: int | None = None,
                 readers_per_node: int = 1, *, options: Options | None = None,
                 coalesce_bytes: int | None = None, stagger_size: int | None = None,
                 build_provenance: bool = False, measure: bool = True,
                 on_error: str | None = None):
        self.comm = comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.nprocs = comm.rank, comm.size
        self._closed = True
        self._in_with = False
        if on_error is None:
            on_error = _default_on_error()
        self._on_error = on_error
        self.lock: bool | None = None   # LMDB reader lock held (None: this rank opens no env)
        self.rec = PhaseRecorder(self.rank, enabled=measure)
        self._totals0 = totals_snapshot()
        self._t = 0
        self._walker = self._env = self._snapshot = self._group_buf = self._stagger = None
        self.topology: Topology | None = None
        self._fd = -1
        self._pending: list = []

        def check_args():
            check_settings(on_error)
            if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
                raise TypeError(f"batch_size must be an integer, got {type(batch_size).__name__}")
            if batch_size <= 0:
                raise ValueError(f"batch_size must be positive, got {batch_size}")
            if batch_size % self.nprocs:
                raise ValueError(
                    f"batch_size {batch_size} does not divide among {self.nprocs} ranks; use a "
                    f"multiple of {self.nprocs} (e.g. {max(1, batch_size // self.nprocs) * self.nprocs})")
            from .format import db_file
            where = str(path)
            if "{node}" in where:
                where = where.replace("{node}", str(node))
            f = db_file(where)
            auto = None
            if options is None and isinstance(variant, str) and variant.strip().lower() == "auto":
                if self.rank != 0:   # rank 0 chooses for all (its sidecar check reads pages)
                    return None, f, ("", "")
                auto = choose_auto(f)   # by the file system f lives on
                opts = parse_variant(auto[0], coalesce_bytes=coalesce_bytes,
                                     stagger_size=stagger_size)
            else:
                opts = options if options is not None else parse_variant(
                    variant, coalesce_bytes=coalesce_bytes, stagger_size=stagger_size)
            if not isinstance(opts, Options):
                raise TypeError("options must be an lmdbio.Options")
            return opts, f, auto

        try:
            # {node}: every rank takes part in finding node numbers if any rank needs them.
            node = None
            if comm.allreduce(1 if "{node}" in str(path) else 0, op=MPI.MAX):
                node = collective(comm, node_number, comm, ranks_per_node)
            self.options, self.path, auto = collective(comm, check_args)
            #: variant="auto": why this variant was chosen ("" otherwise). Rank 0's choice holds
            #: for every rank, so all read the same way.
            self.auto_reason = ""
            if comm.allreduce(auto is not None, op=MPI.LOR):
                auto = comm.bcast(auto, root=0)
                self.options = parse_variant(auto[0], coalesce_bytes=coalesce_bytes,
                                             stagger_size=stagger_size)
                self.auto_reason = f"auto: {auto[1]}"
            self.variant = self.options.name
            self._strategy = None
            self.batch_size = int(batch_size)
            self.per_rank = self.batch_size // self.nprocs
            self._arange = np.arange(self.per_rank, dtype=np.int64)

            self.topology = (make_topology(comm, ranks_per_node, readers_per_node)
                             if self.options.localized else None)
            self.is_reader = self.topology.is_reader if self.topology else True

            # Rank 0 reads the meta page only (no map, no LMDB): entries and file size.
            def meta():
                if self.rank == 0:
                    from .format import read_meta
                    m = read_meta(self.path)
                    if m.entries == 0:
                        raise LmdbioError(f"{self.path} holds no records; nothing to read")
                    return m
                return None

            m = comm.bcast(collective(comm, meta), root=0)
            self.n, self.meta = m.entries, m
            self._mean_size = max(1.0, m.file_size / max(1, m.entries))
            with self.rec.phase("setup", -1) as row:
                self._setup(build_provenance, row)
        except BaseException as exc:
            if self.nprocs > 1 and not isinstance(exc, Exception):
                self._interrupted_setup(exc)
            self._release()   # every rank gets here together: each failing step is collective
            raise
        self._closed = False

    def _interrupted_setup(self, exc: BaseException) -> None:
        """Ctrl-C (or another BaseException) hit this rank between two collective setup steps.

        The other ranks may be inside a blocking MPI call (a window allocation,
        a communicator split) that no timeout can end. If they do not all come
        to a bounded agreement, end the job (whatever ``on_error`` says): it
        is the only way not to leave them spinning for ever.
        """
        try:
            limit = _exit_timeout()
        except LmdbioError:
            limit = EXIT_TIMEOUT
        present, _ = self._agree(True, limit)
        if not present:
            print(f"lmdbio: error: rank {self.rank}: {type(exc).__name__} while the Reader was being "
                  f"set up; rank(s) {self._missing} are inside a setup step that cannot time out: "
                  "aborting the job so no rank waits forever", file=sys.stderr, flush=True)
            time.sleep(0.5)
            self.comm.Abort(130 if isinstance(exc, KeyboardInterrupt) else 1)

    # ------------------------------------------------------------------ setup
    def _setup(self, build_provenance: bool, row: dict) -> None:
        """Open what each rank needs. Every step that can fail is collective, so a
        failure on one rank raises on all of them."""
        o = self.options
        comm = self.comm
        if not o.localized:
            # Every rank reads its own records: one strategy object (lmdbio.perrank).
            self._strategy = per_rank_strategy(o)
            self._open_agreed(lambda: self._strategy.open(self))
            self._strategy.setup(self, row)
            self.coalesce = self._strategy.coalesce
            return
        topo = self.topology
        self.group_size = topo.group_comm.size
        self.member = topo.group_comm.rank
        self.group_first = topo.group_ranks[0] * self.per_rank
        self.group_records = self.group_size * self.per_rank
        if o.locate == "provenance" and build_provenance:
            collective(comm, self._refresh_provenance)
        self._open_agreed(self._open_reader if self.is_reader else (lambda: None))
        if o.locate == "provenance":
            # Anyone can recompute a sidecar's digest: the readers check all of it against
            # the file, a share each, before it is trusted (StaleProvenanceError everywhere).
            from .provenance import verify_shares
            collective(comm, lambda: verify_shares(topo.readers_comm, self._prov, self._fd,
                                                   self._snapshot.meta, row)
                       if self.is_reader else None)
        # COAL: batches per request, a power of two, from the mean record size.
        self.coalesce = k = coalesce_batches(self.group_records * self._mean_size,
                                             o.coalesce_bytes, self.n // self.batch_size)
        if self.is_reader and o.staggered:
            size = o.stagger_size or max(1, topo.nreaders // 2)
            readers = tuple(topo.readers_comm.allgather(self.rank))
            self._stagger = Stagger(topo.readers_comm, size, names=readers)
        if o.locate == "index":
            # Collective over the whole communicator: non-readers learn of a failure too.
            collective(comm, self._scatter_index, row)
        cap = int(self.group_records * k * self._mean_size * 1.25) + (64 << 10)
        # More slots for small chunks (a deeper pipeline), within about 64 MiB.
        nslots = int(min(16, max(GroupBuffer.MIN_SLOTS, (64 << 20) // cap)))
        self._group_buf = GroupBuffer(topo.group_comm, self.group_records * k, cap, nslots,
                                      names=topo.group_ranks, batches_per_chunk=k)

    def _open_agreed(self, open_fn, tries: int = 20) -> None:
        """Open the database on the ranks that read it, all at one snapshot. Collective.

        Each opening rank holds a read transaction; their (txnid, entries)
        must agree, or a writer committed between two ranks' opens: then all
        close and try again. ``n`` is the snapshot's own entry count.
        """
        for _ in range(tries):
            collective(self.comm, open_fn)
            if self._snapshot is not None:
                self.lock = bool(self._snapshot.locked)
            ids = self.comm.allgather(collective(self.comm, self._snapshot_id))
            got = {x for x in ids if x is not None}
            if len(got) <= 1:
                if got:
                    self.txnid, n = got.pop()
                    if n == 0:
                        self._close_db()
                        raise LmdbioError(f"{self.path} holds no records in the snapshot opened; "
                                          "nothing to read")
                    self.n = n
                    if self._walker is not None:
                        self._walker.n = n
                return
            self._close_db()
            self.comm.Barrier()
        raise SnapshotError(f"{self.path}: the ranks could not open one snapshot in {tries} tries "
                            "(a writer commits too often); try again")

    def _snapshot_id(self):
        """(txnid, entries) of this rank's read transaction, or None if it holds none."""
        if self._snapshot is not None:
            return self._snapshot.txnid, self._snapshot.meta.entries
        if self._walker is not None:
            txn = self._walker.txn
            return txn.id(), txn.stat(self._env.open_db(txn=txn))["entries"]
        return None

    def _close_db(self) -> None:
        if self._walker is not None:
            self._walker.close()
            self._walker = None
        if self._env is not None:
            self._env = None
            self._env_handle.release()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._snapshot is not None:
            self._snapshot.close()
            self._snapshot = None

    def _refresh_provenance(self) -> None:
        # The first rank of each distinct file ({node} paths: one per node) refreshes it.
        paths = self.comm.allgather(os.path.realpath(self.path))
        if paths.index(paths[self.rank]) == self.rank:
            from .errors import ProvenanceError
            from .provenance import load_provenance, write_provenance
            try:
                load_provenance(self.path)
            except ProvenanceError:
                write_provenance(self.path)

    def _open_env(self):
        from .index import check_tree
        from .lmdbenv import acquire

        check_tree(self.path)  # LMDB's C code asserts on (or reads past) trees our walk rejects
        # Caffe's settings: read-only map with readahead, and a slot in the lock
        # file's reader table (MDB_RDONLY) next to the real file, so a writer
        # cannot recycle the pages of our snapshot; no lock only on read-only media.
        self._env_handle = acquire(self.path, max_readers=max(126, 2 * self.nprocs + 16))
        self._env = self._env_handle.env
        self.lock = self._env_handle.locked

    def _open_reader(self) -> None:
        o = self.options
        if o.fetch == "mmap":
            self._open_env()
            self._walker = CursorWalker(self._env, self.n)
            if o.speculative:
                m = self.meta
                self._map_addr = self._env.info()["map_addr"] or self._walker.map_base(
                    m.psize, m.header_size)
                if self._map_addr is None:
                    log.warning("lmdbio: %s: cannot tell where LMDB mapped the file; DM runs "
                                "without speculative reads", self.path)
                self._pred = None
                self._last_ranges: list[tuple[int, int]] = []
            return
        from .index import open_snapshot

        # Hold a read transaction while pread-ing so a writer cannot recycle pages.
        self._snapshot = open_snapshot(self.path)
        self._fd = os.open(self.path, os.O_RDONLY)
        if o.locate == "provenance":
            from .provenance import load_provenance

            self._prov = load_provenance(self.path)
            self._snapshot.check(self._prov.txnid)

    def _scatter_index(self, row: dict) -> None:
        """DIO: one rank walks the index once; each reader gets only the records it will read."""
        topo = self.topology
        rc = topo.readers_comm
        if not self.is_reader:
            return
        self._pos, self._offsets, self._sizes = scatter_index(
            rc, self._snapshot, self.n, self.batch_size, self.group_first, self.group_records, row)
        if len(self._pos) and int(self._pos[-1]) >= self.n:
            raise SnapshotError(f"{self.path}: index positions reach {int(self._pos[-1])} but the "
                                f"snapshot holds {self.n} records")

    # ------------------------------------------------------------- reading
    def read_batch(self) -> Batch:
        """This rank's share of the next global batch."""
        if self._closed:
            raise LmdbioError("the Reader is closed")
        t = self._t
        try:
            if self._strategy is not None:
                batch = self._strategy.read(self, t)
            else:
                batch = self._read_localized(t)
        except Exception as exc:
            # Tell the reader group at once, so its ranks stop waiting for us.
            self._abandon()
            if not self._in_with:
                self._fail(exc)
            raise   # inside ``with``: __exit__ decides, with the other ranks
        self._t += 1
        return batch

    def _abandon(self) -> None:
        if self._group_buf is not None:
            try:
                self._group_buf.abandon()
            except Exception:  # noqa: BLE001 - best effort on an error path
                pass

    def _fail(self, exc: BaseException) -> None:
        if self._on_error == "abort" and self.nprocs > 1:
            print(f"lmdbio: error: rank {self.rank}: {type(exc).__name__}: {exc}; "
                  "aborting the job so no rank waits forever", file=sys.stderr, flush=True)
            time.sleep(0.5)  # let the launcher forward the message before it tears the job down
            self.comm.Abort(1)

    def _read_localized(self, t: int) -> Batch:
        k = self.coalesce
        chunk, it = divmod(t, k)
        gb = self._group_buf
        if it == 0:
            if self.is_reader:
                self._fill(chunk)
            else:
                with self.rec.phase("wait", t):
                    gb.receive(chunk)
        data, offs, sizes = gb.current(chunk)
        lo = it * self.group_records + self.member * self.per_rank
        # Copies: the header slot is rewritten when the slot comes round again.
        offs = offs[lo:lo + self.per_rank].copy()
        sizes = sizes[lo:lo + self.per_rank].copy()
        first = t * self.batch_size + self.group_first + self.member * self.per_rank
        return Batch(data, offs, sizes, self._indices(first))

    def _indices(self, first: int) -> np.ndarray:
        idx = self._arange + first
        if first % self.n + self.per_rank > self.n or first >= self.n:
            idx %= self.n
        return idx

    def _chunk_runs(self, chunk: int) -> list[tuple[int, int]]:
        """(first, count) runs of the group's records for the batches of one chunk."""
        k, B, G = self.coalesce, self.batch_size, self.group_records
        runs = []
        for t in range(chunk * k, chunk * k + k):
            runs += positions_runs(t * B + self.group_first, G, self.n)
        return runs

    def _fill(self, chunk: int) -> None:
        """Reader: locate and fetch one chunk's records into its slot, then publish them."""
        t = chunk * self.coalesce
        gb = self._group_buf
        mmap_fetch = self.options.fetch == "mmap"
        if mmap_fetch:
            values = self._locate_mmap(t)
        else:
            with self.rec.phase("locate", t) as row:
                rec_off, rec_size = self._locate_extents(chunk)
                ext_start, ext_len, buf_off = plan_extents(rec_off, rec_size)
                row["extents"] = len(ext_start)
        if self._stagger:
            with self.rec.phase("stagger_wait", t, chain=True):
                self._stagger.wait_turn()
        with self.rec.phase("read", t, chain=True) as row:
            if mmap_fetch:
                self._walker.check_size()   # a file that shrank would kill the copy with SIGBUS
                _, offsets, sizes = copy_values(values, lambda n: gb.reserve(chunk, n))
                row["bytes"], row["calls"] = int(sizes.sum()), len(values)
                if self.options.speculative:
                    self._score_prediction(values, row)
            else:
                buf = gb.reserve(chunk, int(ext_len.sum()))
                row["bytes"], row["calls"] = read_extents(self._fd, buf, ext_start, ext_len,
                                                          str(self.path))
                offsets, sizes = buf_off, rec_size
        if self._stagger:
            self._stagger.pass_turn()
        with self.rec.phase("distribute", t, chain=True):
            gb.publish(chunk, offsets, sizes)

    def _locate_extents(self, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        offs, sizes = [], []
        runs = self._chunk_runs(chunk)
        if self.options.locate == "provenance":
            # The chunk's first and last records tie its record numbers to pages: two
            # leaf-page preads per chunk, not two per batch of a coalesced chunk.
            (a, _), (b, m) = runs[0], runs[-1]
            self._prov.verify(self._fd, a, 1)
            self._prov.verify(self._fd, b + m - 1, 1)
        for first, count in runs:
            if self.options.locate == "provenance":
                o, s = self._prov.extents(first, count)
            else:
                i0 = int(np.searchsorted(self._pos, first))
                if (i0 + count > len(self._pos) or int(self._pos[i0]) != first
                        or int(self._pos[i0 + count - 1]) != first + count - 1):
                    raise LmdbioError(f"{self.path}: the index has no entries for records "
                                      f"{first}..{first + count - 1} (internal error: please report)")
                o, s = self._offsets[i0:i0 + count], self._sizes[i0:i0 + count]
            offs.append(o)
            sizes.append(s)
        return (np.concatenate(offs).astype(np.int64, copy=False),
                np.concatenate(sizes).astype(np.int64, copy=False))

    def _locate_mmap(self, t: int) -> list:
        """LMM walks like Caffe (skipping other readers' records); DM uses the cursor ring."""
        w = self._walker
        first = t * self.batch_size + self.group_first
        if self.options.locate == "walk":
            with self.rec.phase("locate", t) as row:
                w0 = w.walked
                w.skip_to(first)
                values = w.take(self.group_records)
                row["records_walked"] = w.walked - w0
            return values
        # DM: the portable position (key, record number) travels around the readers' ring.
        rc = self.topology.readers_comm
        k, R = rc.rank, rc.size
        if self.options.speculative:
            self._speculate(t)
        with self.rec.phase("ring_wait", t):
            if R > 1 and not (k == 0 and t == 0):
                key, pos = wait_request(
                    rc.irecv(source=(k - 1) % R, tag=21), timeout(),
                    f"rank {self.rank}: the previous reader of the DM ring (reader "
                    f"{(k - 1) % R}) did not pass the cursor for batch {t}")
            else:
                key = pos = None
        with self.rec.phase("locate", t) as row:
            w0 = w.walked
            if key is not None:
                w.seek_key(key, pos)
            elif t == 0 and w.pos != first:
                w.skip_to(first)   # single reader at the start: already at record 0
            values = w.take(self.group_records)
            row["records_walked"] = w.walked - w0
            if R > 1:
                self._pending.append(rc.isend((w.key(), w.pos), dest=(k + 1) % R, tag=21))
                self._reap()
        return values

    def _reap(self) -> None:
        if len(self._pending) > 4:
            self._pending[0].wait()
            self._pending.pop(0)

    # DM's speculative I/O: ask for the predicted pages before walking.
    def _speculate(self, t: int) -> None:
        """Ask the kernel (``POSIX_FADV_WILLNEED``) for the byte range this reader's next
        records are predicted to occupy, extrapolated from its last two ranges, so the
        pages arrive while it waits for the cursor instead of one fault at a time."""
        with self.rec.phase("speculate", t) as row:
            self._pred = None
            if len(self._last_ranges) >= 2:
                (a0, a1), (b0, b1) = self._last_ranges[-2:]
                lo, hi = b0 + (b0 - a0), b1 + (b1 - a1)
                lo, hi = max(0, lo), min(self.meta.file_size, hi)
                if hi > lo:
                    os.posix_fadvise(self._walker.fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)
                    self._pred = (lo, hi)
                    row["bytes"] = hi - lo
                    row["pages"] = -(-hi // self.meta.psize) - lo // self.meta.psize

    def _score_prediction(self, values: list, row: dict) -> None:
        """Where this batch's records really were (file offsets), against the prediction."""
        if not values or self._map_addr is None:
            return
        first = np.frombuffer(values[0], dtype=np.uint8)
        last = np.frombuffer(values[-1], dtype=np.uint8)
        lo = first.ctypes.data - self._map_addr
        hi = last.ctypes.data - self._map_addr + len(values[-1])
        page = self.meta.psize
        if hi < lo:   # the group's records wrapped around the end of the file: no trend, no score
            self._last_ranges.clear()
            return
        self._last_ranges.append((lo, hi))
        del self._last_ranges[:-2]
        a0, a1 = lo // page, -(-hi // page)
        if self._pred is None:
            row["missed_pages"], row["extra_pages"] = a1 - a0, 0
            return
        p0, p1 = self._pred[0] // page, -(-self._pred[1] // page)
        overlap = max(0, min(a1, p1) - max(a0, p0))
        row["missed_pages"] = (a1 - a0) - overlap
        row["extra_pages"] = (p1 - p0) - overlap

    # ------------------------------------------------------------- results
    def stats(self) -> list[dict]:
        """This rank's rows: one per (batch, phase) with times, getrusage and I/O counters."""
        extra = {"variant": self.variant, "nprocs": self.nprocs, "is_reader": self.is_reader,
                 "lock": self.lock, "auto_reason": self.auto_reason,
                 **(self._strategy.describe() if self._strategy is not None else {})}
        rows = [{**r, **extra} for r in self.rec.rows]
        # Whole-run totals from the kernel (/proc/self/io, getrusage) since the
        # Reader was made: a cross-check of the per-phase counters.
        total = totals_row(self._totals0, self.rank)
        reads = [r for r in rows if r["phase"] == "read"]
        total["bytes"] = sum(r["bytes"] for r in reads)
        total["calls"] = sum(r["calls"] for r in reads)
        return rows + [{**total, **extra}]

    def close(self) -> None:
        """Release shared memory, maps and files. Collective, with bounded waits.

        Waits at most ``2 * LMDBIO_TIMEOUT`` seconds for the other ranks: if one
        does not come, this rank lets go of its own resources and raises
        PeerTimeoutError. Raises PeerError when another rank failed inside
        its ``with`` block. Batches read before stay valid.
        """
        present, failed, problem = self._close(False, 2 * timeout())
        if problem is not None:
            raise problem
        if not present:
            exc = PeerTimeoutError(
                f"rank {self.rank}: rank(s) {self._missing} did not reach close() within "
                f"{2 * timeout():g} s (twice LMDBIO_TIMEOUT): they stopped answering (stopped, "
                "in a debugger, swapped out), exited, or read a different number of batches. "
                "Every rank must call read_batch() the same number of times, then close()")
            # MPI_Finalize would wait for those ranks for ever: under on_error="abort" end the job.
            self._fail(exc)
            raise exc
        others = [r for r in failed if r != self.rank]
        if others:
            raise PeerError(f"rank {self.rank}: rank(s) {others} left their with-block with an "
                            "error (see their messages); this rank closed cleanly")

    def _close(self, failed: bool, limit: float):
        """Close; returns (every rank came, ranks that failed, first local problem)."""
        if self._closed:
            return True, [], None
        self._closed = True
        problem = None
        o = self.options
        try:
            if o.localized and o.locate == "ring" and self.is_reader and not failed:
                rc = self.topology.readers_comm
                # The last reader's hand-off for the batch after the last one is still in flight.
                if rc.size > 1 and rc.rank == 0 and self._t > 0:
                    wait_request(rc.irecv(source=rc.size - 1, tag=21), timeout(),
                                 f"rank {self.rank}: the last reader of the DM ring did not pass "
                                 "its final cursor (it stopped early or exited)")
            for r in self._pending:
                if not completes_within(r, timeout()):
                    raise PeerTimeoutError(f"rank {self.rank}: a DM-ring hand-off was not received "
                                           f"within {timeout():g} s (LMDBIO_TIMEOUT)")
            self._pending.clear()
            if self._stagger is not None:
                self._stagger.close()
                self._stagger = None
        except Exception as exc:  # noqa: BLE001 - still let go of everything below
            problem, failed = exc, True
        present, failed_ranks = self._agree(failed, limit)
        try:
            self._release(agree=present)
        except Exception as exc:  # noqa: BLE001
            problem = problem or exc
        return present, failed_ranks, problem

    def _agree(self, failed: bool, limit: float) -> tuple[bool, list[int]]:
        """Exchange "I failed" flags with every rank, bounded by ``limit`` seconds.

        Point to point rather than one Iallgather, so the ranks that did not
        come are known by number (:attr:`_missing`). Returns (every rank came,
        ranks that failed).
        """
        self._missing: list[int] = []
        if self.nprocs == 1:
            return True, [0] if failed else []
        comm, me = self.comm, self.rank
        others = [r for r in range(self.nprocs) if r != me]
        flag = np.array([1 if failed else 0], dtype=np.int32)
        got = np.zeros(self.nprocs, dtype=np.int32)
        got[me] = flag[0]
        recvs = [comm.Irecv(got[r:r + 1], source=r, tag=_CLOSE_TAG) for r in others]
        sends = [comm.Isend(flag, dest=r, tag=_CLOSE_TAG) for r in others]
        wait_until(lambda: MPI.Request.Testall(recvs), limit)
        self._missing = [r for r, q in zip(others, recvs) if not q.Test()]
        failed_ranks = [int(r) for r in np.flatnonzero(got)]
        if self._missing:
            for q in recvs:
                if not q.Test():
                    q.Cancel()
            _ABANDONED.append((recvs, sends, flag, got))   # MPI may still touch their buffers
            return False, [me] if failed else []
        MPI.Request.Waitall(sends)
        return True, failed_ranks

    def _release(self, agree: bool = True) -> None:
        gb, self._group_buf = self._group_buf, None
        try:
            if gb is not None:
                gb.close(timeout(), agree=agree)
        finally:
            self._close_db()
            if self.topology is not None:
                self.topology.free()
                self.topology = None

    def __enter__(self) -> "Reader":
        self._in_with = True
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._in_with = False
        if exc_type is None:
            self.close()
            return
        if self._closed or self.nprocs == 1:
            self._close(True, 0.0)
            return
        # Leaving with an error (KeyboardInterrupt too): tell the group, then
        # find out, without blocking for ever, whether every rank is leaving.
        self._abandon()
        present, _, _ = self._close(True, _exit_timeout())
        if not present and self._on_error == "abort":
            # Alone: the others are stuck or gone; end the job so none waits for ever.
            self._fail(exc)
        # Every rank came (or on_error="raise"): the exception propagates.
