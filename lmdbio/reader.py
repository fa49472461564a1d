"""The parallel Reader: the front object that wires a variant's pipeline and runs the
collective protocol (arguments and ``auto``, topology, snapshot agreement, bounded close)."""

from __future__ import annotations

import sys
import warnings

import numpy as np

from .batch import Batch
from .collective import (EXIT_TIMEOUT, check_settings, collective, default_on_error, exit_timeout,
                         release_comms)
from .comm import PER_RANK_HINT, Comm, as_comm
from .errors import ConfigurationError, LmdbioError, PeerError, PeerTimeoutError, SnapshotError
from .format import db_file, read_meta
from .metrics import PhaseRecorder, totals_snapshot, with_total
from .options import AUTO_LOCAL, Options, check_batch_size, parse_variant, resolve_variant
from .pipeline import EpochPlan, Iteration, Pipeline
from .resume import STATE_VERSION, resume_point, run_state
from .shuffle import DEFAULT_PARTITIONS, num_batches
from .topology import Topology, check_node_args, make_topology
from .waiting import timeout

__all__ = ["Reader", "Batch", "collective", "STATE_VERSION"]

#: The layout of :meth:`Reader.state_dict`'s dict; a state of another version is refused.


class Reader:
    """Reads an LMDB from many MPI ranks (or ``torchrun``'s); every variant delivers the same
    records.

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

    Resume: :meth:`state_dict` is where the epochs are (an epoch and how many of its
    batches were delivered, the order's settings, the snapshot), plain values, the same
    on every rank. :meth:`load_state_dict` on a new Reader built with the same arguments
    makes the next :meth:`epoch` of that epoch yield the batches not delivered yet; the
    epochs after it are as if the job had never stopped. The rank count may change
    except under ``shuffle="shard"``, whose order depends on it.

    Args:
        path: LMDB directory or data.mdb file. ``{node}`` in it is replaced by
            the rank's node number (``rank // ranks_per_node`` for virtual
            nodes, else the index of its shared-memory node), so each node
            can read its own copy or mount (``"MNT/node{node}/cifar10"``).
        batch_size: global batch size B (a multiple of the number of ranks).
        comm: an mpi4py communicator, a ``torch.distributed`` process group (its ranks
            talk through a gloo group of the same ranks), or a :class:`lmdbio.comm.Comm`.
            Default: MPI's COMM_WORLD, or under ``torchrun`` (no MPI launcher, and
            ``torch.distributed`` initialized) the default group, with no MPI at all.
            Without MPI only the per-rank variants read (``lmdb``, ``lmdb-get``,
            ``lmdbio-direct``; ``auto`` picks ``lmdbio-direct``): the node-group ones
            (LMM) share MPI-3 windows and are refused.
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
        shuffle, seed, shuffle_block, shuffle_window, shuffle_partitions, last_batch:
            :meth:`epoch`'s order and last batch (:class:`lmdbio.pipeline.EpochPlan`).
            ``shuffle``: False (file order), True or ``"window"`` (each window shuffled
            whole: most random; node readers read whole windows), ``"shard"`` (each rank
            shuffles its own contiguous slice of every window: node readers read only their
            ranks' part, a file-order epoch's bytes; the order depends on the rank count),
            ``"elastic"`` (the shard order over ``shuffle_partitions`` canonical partitions,
            default 64, in place of the ranks: one order at any rank count; node readers
            read only their part of each window where their ranks' positions are whole
            partitions, see :mod:`lmdbio.shuffle`).
        prefetch: batches an epoch's iterator reads ahead in a thread
            (:mod:`lmdbio.pipeline.prefetch`); :meth:`read_batch` reads each batch
            when asked, and warns once that it does not read ahead.
        on_error: what a rank that fails alone does (see above): ``"abort"``
            ends the whole job; ``"raise"`` raises on that rank only (the
            others stop at their timeout). Default: ``$LMDBIO_ON_ERROR`` or
            ``"abort"`` (ipyparallel engines set ``raise`` so one error never
            kills the cluster). Outside a ``with`` block a failing
            :meth:`read_batch` acts on it at once.
    """

    def __init__(self, path, batch_size: int, comm=None,
                 variant: str = "lmdbio-lmm-dio", ranks_per_node: int | None = None,
                 readers_per_node: int = 1, *, options: Options | None = None,
                 coalesce_bytes: int | None = None, stagger_size: int | None = None,
                 build_provenance: bool = False, measure: bool = True,
                 on_error: str | None = None, shuffle: bool | str = False, seed: int = 0,
                 shuffle_block: int | None = None, shuffle_window: int = 4,
                 last_batch: str = "short", prefetch: int = 0,
                 shuffle_partitions: int = DEFAULT_PARTITIONS):
        # The Reader talks on its own duplicate (its first collective call), so none of its
        # messages meets the user's or another Reader's on the same communicator.
        self.user_comm = as_comm(comm)
        self.comm: Comm = self.user_comm.dup()
        comm = self.comm
        self.rank, self.nprocs = comm.rank, comm.size
        self._closed = True
        self._in_with = False
        self._on_error = on_error = on_error if on_error is not None else default_on_error()
        self.lock: bool | None = None   # LMDB reader lock held (None: this rank opens no env)
        self.rec = PhaseRecorder(self.rank, enabled=measure)
        self._totals0 = totals_snapshot()
        self._missing: list[int] = []
        self.topology: Topology | None = None
        self.pipe: Pipeline | None = None
        self._epoch = 0   # what ``for b in reader`` reads (set_epoch)
        #: Where this Reader is: the next batch, the live epoch and its prefetch (set up below).
        self.it: Iteration | None = None
        self._deferred: LmdbioError | None = None   # raised by the next call (an epoch's end)

        def check_args():
            check_settings(on_error)
            check_node_args(ranks_per_node, readers_per_node)
            self.epochs = EpochPlan(shuffle, seed, shuffle_block, shuffle_window, last_batch,
                                    shuffle_partitions)
            self.batch_size = check_batch_size(batch_size, self.nprocs)
            f = db_file(str(path).replace("{node}", str(node)))
            opts, auto = resolve_variant(variant, options, f, chooser=self.rank == 0,
                                         coalesce_bytes=coalesce_bytes, stagger_size=stagger_size)
            if opts is not None and opts.localized and comm.mpi is None and auto is None:
                raise ConfigurationError(
                    f"variant {opts.name!r} shares a node's records through MPI-3 shared "
                    "windows, and this job has no MPI (torch.distributed's ranks, e.g. started "
                    f"by torchrun): use a variant whose ranks each read their own, {PER_RANK_HINT}"
                    ", or launch with mpiexec")
            return opts, auto, f

        try:
            # {node}: every rank takes part in finding node numbers if any rank needs them.
            node = None
            if comm.allreduce(1 if "{node}" in str(path) else 0, "max"):
                node = comm.collective(comm.node_number, ranks_per_node)
            self.options, auto, self.path = comm.collective(check_args)
            #: variant="auto": why this variant was chosen ("" otherwise). Rank 0's choice holds
            #: for every rank, so all read the same way.
            self.auto_reason = ""
            if comm.allreduce(auto is not None, "lor"):
                auto = comm.bcast(auto, root=0)
                if comm.mpi is None and parse_variant(auto[0]).localized:
                    auto = (AUTO_LOCAL, f"{auto[1]}; but this job has no MPI for a node's shared "
                            f"windows (torch.distributed's ranks): {AUTO_LOCAL}, every rank "
                            "preads its own records")
                self.options = parse_variant(auto[0], coalesce_bytes=coalesce_bytes,
                                             stagger_size=stagger_size)
                self.auto_reason = f"auto: {auto[1]}"
            self.variant = self.options.name
            self.per_rank = self.batch_size // self.nprocs

            self.topology = (make_topology(comm.mpi, ranks_per_node, readers_per_node)
                             if self.options.localized else None)
            self.pipe = Pipeline(self.options, comm.native, self.topology, self.per_rank,
                                 build_provenance, self.epochs, prefetch)
            self.is_reader = self.pipe.is_reader

            def meta():   # rank 0 reads the meta page only (no map, no LMDB)
                if self.rank == 0:
                    m = read_meta(self.path)
                    if m.entries == 0:
                        raise LmdbioError(f"{self.path} holds no records; nothing to read")
                    return m
                return None

            m = comm.bcast(comm.collective(meta), root=0)
            self.n, self.meta = m.entries, m
            with self.rec.phase("setup", -1) as row:
                # Every step that can fail is collective, so a failure on one rank raises on all.
                self.pipe.prepare(self.path)
                self._open_agreed()
                mean_size = max(1.0, m.file_size / max(1, m.entries))
                #: Batches per chunk (COAL); the bench starts timing on a multiple of it.
                self.coalesce = self.pipe.setup(self.n, self.batch_size, mean_size, row)
            self.it = Iteration(self.pipe.stream)
        except BaseException as exc:
            if self.nprocs > 1 and not isinstance(exc, Exception):
                self._interrupted_setup(exc)
            self._release()   # every rank gets here together: each failing step is collective
            raise
        self._closed = False
        self._told_no_prefetch = False   # read_batch() with prefetch > 0: said once

    def _interrupted_setup(self, exc: BaseException) -> None:
        """Ctrl-C (or another BaseException) hit this rank between two collective setup steps.

        The other ranks may be inside a blocking MPI call (a window allocation,
        a communicator split) that no timeout can end. If they do not all come
        to a bounded agreement, end the job (whatever ``on_error`` says): it
        is the only way not to leave them spinning for ever.
        """
        try:
            limit = exit_timeout()
        except LmdbioError:
            limit = EXIT_TIMEOUT
        present, _ = self._agree(True, limit)
        if not present:
            print(f"lmdbio: error: rank {self.rank}: {type(exc).__name__} while the Reader was being "
                  f"set up; rank(s) {self._missing} are inside a setup step that cannot time out: "
                  "aborting the job so no rank waits forever", file=sys.stderr, flush=True)
            self.comm.abort(exc)

    def _open_agreed(self, tries: int = 20) -> None:
        """Open the database on the ranks that read it, all at one snapshot. Collective.

        Each opening rank holds a read transaction; their (txnid, entries)
        must agree, or a writer committed between two ranks' opens: then all
        close and try again. ``n`` is the snapshot's own entry count.
        """
        p = self.pipe
        open_fn = (lambda: p.open(self.path, self.meta)) if self.is_reader else (lambda: None)
        for _ in range(tries):
            self.comm.collective(open_fn)
            self.lock = p.locked
            ids = self.comm.allgather(self.comm.collective(p.snapshot_id))
            got = {x for x in ids if x is not None}
            if len(got) <= 1:
                if got:
                    self.txnid, n = got.pop()
                    if n == 0:
                        p.close_handles()
                        raise LmdbioError(f"{self.path} holds no records in the snapshot opened; "
                                          "nothing to read")
                    self.n = n
                return
            p.close_handles()
            self.comm.barrier(what="the snapshot's next try")
        raise SnapshotError(f"{self.path}: the ranks could not open one snapshot in {tries} tries "
                            "(a writer commits too often); try again")

    # ------------------------------------------------------------- reading
    def read_batch(self) -> Batch:
        """This rank's share of the next global batch of the endless stream (batch t holds
        positions ``(t*B + j) mod N``); between epochs it goes on after the last epoch's rows."""
        self._check_usable()
        if self.it.live is not None:
            raise ConfigurationError(
                f"epoch {self.it.live.number} is in progress on this Reader: take its batches from its "
                "iterator, or close that iterator (it.close()) before calling read_batch()")
        if self.pipe.depth and not self._told_no_prefetch:
            self._told_no_prefetch = True
            warnings.warn(f"prefetch={self.pipe.depth} reads ahead in an epoch's iterator only "
                          "(for batch in reader.epoch(e)); read_batch() reads each batch when asked",
                          stacklevel=2)
        return self._next()

    def _next(self) -> Batch:
        it = self.it
        try:
            if it.prefetch is not None:
                batch = it.prefetch.next()
            else:
                live = it.live
                batch = self.pipe.read(it.t, it.schedule, live.rows if live else None, self.rec)
        except Exception as exc:
            # Tell the reader group at once, so its ranks stop waiting for us.
            self._abandon()
            if not self._in_with:
                self._fail(exc)
            raise   # inside ``with``: __exit__ decides, with the other ranks
        it.took()
        return batch

    def _check_usable(self) -> None:
        if self._closed:
            raise LmdbioError("the Reader is closed")
        err, self._deferred = self._deferred, None
        if err is not None:
            raise err

    def epoch(self, e: int):
        """This rank's batches of epoch ``e`` (every record once across the ranks under
        ``"short"``). Collective: every rank iterates the same epochs and takes the same
        number of batches of each (breaking out early is fine when every rank does it at
        the same batch).

        An epoch reads the rows from the first chunk after what was read before; the next
        epoch (or :meth:`read_batch`) goes on after this epoch's last row, however many of
        its batches were taken, so ranks that broke out early agree where reading goes on.
        One epoch at a time: starting another while this one's iterator is alive raises
        ConfigurationError. After :meth:`load_state_dict`, the state's epoch yields only the
        batches the state had not delivered.
        """
        self._check_usable()
        token = object()
        left = self._start_epoch(e, token)
        try:
            for _ in range(left):
                yield self._next()
        finally:
            if self.it is not None and self.it.is_live(token):
                self._end_epoch()

    def _start_epoch(self, e: int, token) -> int:
        """Agree with every rank on epoch ``e``'s start, then lay out its rows. Collective.
        Returns the batches left to deliver (all of them, unless a loaded state resumes)."""
        it = self.it
        t0 = it.next_start()   # epochs start on a chunk
        problem = None
        if it.live is not None:
            problem = (f"epoch {it.live.number} is still in progress on this Reader (its iterator "
                       f"is alive): finish it or close it (it.close()) before starting epoch {e}")
        elif isinstance(e, bool) or not isinstance(e, (int, np.integer)) or e < 0:
            problem = f"epoch must be an int >= 0, got {e!r}"
        elif it.resume is not None and it.resume[0] != e \
                and 0 < it.resume[1] < self._epoch_batches():
            saved, done = it.resume
            problem = (f"the state loaded (load_state_dict) stopped epoch {saved} after {done} of "
                       f"its {self._epoch_batches()} batches, and epoch {e} was asked for: "
                       f"iterate epoch {saved} first (reader.epoch({saved}), or "
                       f"set_epoch({saved})) to deliver the rest of it, or load the state of the "
                       "epoch you mean to read")
        views = self.comm.allgather_within((problem, e, t0, it.last, it.resume),
                                           what=f"the start of epoch {e}")
        bad = [(r, v[0]) for r, v in enumerate(views) if v[0] is not None]
        if bad:
            r, msg = bad[0]
            raise ConfigurationError(msg if r == self.rank else f"rank {r}: {msg}")
        parted = {(v[1], v[2], v[3], v[4]) for v in views}
        if len(parted) > 1:
            where = "; ".join(f"rank {r}: epoch {v[1]}" + (f" after taking {v[3][1]} batches of "
                                                           f"epoch {v[3][0]}" if v[3] else "")
                              for r, v in enumerate(views))
            raise PeerError(
                f"rank {self.rank}: the ranks parted ways before epoch {e} ({where}): every rank "
                "must iterate the same epochs and take the same number of batches of each "
                "(break out of an epoch at the same batch on every rank)")
        rows, schedule = self.comm.collective(self.pipe.start_epoch, int(e), t0, self.rec)
        # A resumed epoch starts at its next batch, on the chunk that holds it.
        skip = it.resume[1] if it.resume is not None and it.resume[0] == e else 0
        it.begin(token, int(e), rows, schedule, t0,
                 self.pipe.prefetch(t0 + skip, t0 + rows.batches, schedule, rows, self.rec),
                 skip)
        return rows.batches - skip

    def _end_epoch(self) -> None:
        """Local: stop reading ahead (every rank's thread reads to the same bound), go back
        to the stream after the epoch's last row. A problem is raised by the next call."""
        try:
            self.it.end(drain=True)
        except LmdbioError as exc:
            self._deferred = exc
        finally:
            self.pipe.end_epoch()

    def set_epoch(self, e: int) -> None:   # as DistributedSampler's: what ``for b in reader`` reads
        self._epoch = e

    def __iter__(self):
        return self.epoch(self._epoch)

    # ------------------------------------------------------------- resuming
    def state_dict(self) -> dict:
        """Where this Reader's epochs are, as plain JSON values (local, no message).

        ``epoch`` and ``batches``: the live epoch and the batches it delivered, else the
        last epoch's (or a loaded state's not resumed yet; ``set_epoch``'s epoch and 0
        before any). The rest says which order they are of: ``batch_size``, ``shuffle``
        (the mode, None for file order), ``seed``, ``block``, ``window``, ``partitions``,
        ``last_batch``, ``nprocs`` and ``dataset`` (the snapshot: its LMDB transaction id
        and record count). Every rank's is the same (every rank takes the same batches), so
        saving rank 0's is enough.
        """
        if self._closed or self.it is None:
            raise LmdbioError("the Reader is closed: take state_dict() before close()")
        epoch, batches = self.it.position(self._epoch)
        return run_state(self.pipe.epochs, epoch, batches, self.batch_size, self.nprocs,
                         self.txnid, self.n)

    def load_state_dict(self, state: dict) -> None:
        """Resume from ``state`` (:meth:`state_dict` of this job or an earlier one): the next
        :meth:`epoch` of its epoch (or ``for b in reader``: the state's epoch is
        :meth:`set_epoch`'s) yields the batches the state had not delivered.

        Collective: every rank loads the same state, between epochs. A state of another
        version of the data set raises SnapshotError, one of another batch size, order
        (shuffle, seed, block, window, partitions), last-batch policy or, under
        ``"shard"``, rank count ConfigurationError, on every rank, naming what differs.
        """
        self._check_usable()
        point = problem = None
        try:
            if self.it.live is not None:
                raise ConfigurationError(
                    f"epoch {self.it.live.number} is in progress on this Reader: load the state "
                    "before starting an epoch, or close its iterator (it.close()) first")
            point = self._resume_point(state)
        except LmdbioError as exc:
            problem = (type(exc), str(exc))
        views = self.comm.allgather_within((problem, point), what="load_state_dict()")
        bad = [(r, v[0]) for r, v in enumerate(views) if v[0] is not None]
        if bad:
            r, (cls, msg) = bad[0]
            raise cls(msg if r == self.rank else f"rank {r}: {msg}")
        if len({v[1] for v in views}) > 1:
            where = "; ".join(f"rank {r}: epoch {v[1][0]} after {v[1][1]} batches"
                              for r, v in enumerate(views))
            raise ConfigurationError(
                f"the ranks loaded different states ({where}): load the same state on every "
                "rank (state_dict() is the same on every rank; saving rank 0's is enough)")
        self.it.resume = point
        self._epoch = point[0]

    def _epoch_batches(self) -> int:
        return num_batches(self.n, self.batch_size, self.pipe.epochs.last_batch)

    def _resume_point(self, state) -> tuple[int, int]:
        """``(epoch, batches delivered)`` of ``state``, or the error saying why this Reader
        cannot resume it."""
        return resume_point(state, self.state_dict(), what="Reader",
                            opened=f"this Reader opened {self.path} at txnid {self.txnid} "
                                   f"with {self.n} records",
                            epoch_batches=self._epoch_batches())

    def _abandon(self) -> None:
        if self.pipe is not None:
            try:
                self.pipe.abandon()
            except Exception:  # noqa: BLE001 - best effort on an error path
                pass

    def _fail(self, exc: BaseException) -> None:
        if self._on_error == "abort" and self.nprocs > 1:
            print(f"lmdbio: error: rank {self.rank}: {type(exc).__name__}: {exc}; "
                  "aborting the job so no rank waits forever", file=sys.stderr, flush=True)
            self.comm.abort(exc)

    # ------------------------------------------------------------- results
    def stats(self) -> list[dict]:
        """This rank's rows: one per (batch, phase) with times, getrusage and I/O counters."""
        extra = {"variant": self.variant, "nprocs": self.nprocs, "is_reader": self.is_reader,
                 "lock": self.lock, "auto_reason": self.auto_reason, **self.pipe.describe()}
        return with_total(self.rec.rows, self._totals0, self.rank, extra)

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
        it = self.it
        problem = None
        try:
            if it is not None:
                it.live = None   # an epoch iterator dropped later must not touch the closed pipeline
                it.stop_prefetch()
            if self.pipe is not None:
                self.pipe.finish(failed, it.t if it is not None else 0)
        except Exception as exc:  # noqa: BLE001 - still let go of everything below
            problem, failed = exc, True
        present, failed_ranks = self._agree(failed, limit)
        try:
            self._release(agree=present)
        except Exception as exc:  # noqa: BLE001
            problem = problem or exc
        return present, failed_ranks, problem

    def _agree(self, failed: bool, limit: float) -> tuple[bool, list[int]]:
        """Find out within ``limit`` seconds whether every rank came and which failed (see
        :func:`lmdbio.collective.agree`); the ranks that did not come are :attr:`_missing`."""
        present, failed_ranks, self._missing = self.comm.agree(failed, limit)
        # A rank that failed or did not come may have left messages in flight (a cursor, a
        # turn, a report): then the communicators are parked at release, not freed.
        self._settled = present and (not failed_ranks or self.nprocs == 1)
        return present, failed_ranks

    def _release(self, agree: bool = True) -> None:
        settled = agree and getattr(self, "_settled", True)
        try:
            if self.pipe is not None:
                self.pipe.release(timeout(), agree)
        except BaseException:
            settled = False   # a wait given up: its request may still be pending
            raise
        finally:
            topo, self.topology = self.topology, None
            comms = [] if topo is None else [topo.readers_comm, topo.group_comm, topo.node_comm]
            # Freed only when nothing can be left in flight: MPI gives a freed communicator's
            # context to the next one, where a late message would be taken as new.
            if comms:
                release_comms(comms, settled)
            self.comm.release(settled)

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
        present, _, _ = self._close(True, exit_timeout())
        if not present and self._on_error == "abort":
            # Alone: the others are stuck or gone; end the job so none waits for ever.
            self._fail(exc)
        # Every rank came (or on_error="raise"): the exception propagates.

