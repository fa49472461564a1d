"""The parallel Reader: the front object that wires a variant's pipeline and runs the
collective protocol (arguments and ``auto``, topology, snapshot agreement, bounded close)."""

from __future__ import annotations

import warnings

from .batch import Batch
from .closing import Closing
from .collective import check_settings, collective, default_on_error
from .comm import PER_RANK_HINT, Comm, as_comm
from .errors import ConfigurationError, LmdbioError
from .format import db_file, read_meta
from .metrics import PhaseRecorder, totals_snapshot, with_total
from .options import AUTO_LOCAL, Options, check_batch_size, parse_variant, resolve_variant
from .pipeline import EpochPlan, Iteration, Pipeline
from .pipeline.epoch import plan_of
from .resume import STATE_VERSION
from .shuffle import DEFAULT_PARTITIONS
from .snapshot import agree_snapshot, content_digest
from .topology import Topology, check_node_args, make_topology, node_path

__all__ = ["Reader", "Batch", "collective", "STATE_VERSION"]

#: The layout of :meth:`Reader.state_dict`'s dict; a state of another version is refused.


class Reader(Closing):
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

    Errors and liveness: every setup step is collective, so a setup error on one rank
    raises on all; waits for peers are bounded by ``LMDBIO_TIMEOUT`` (a silent rank is
    named in :class:`~lmdbio.errors.PeerTimeoutError`), and leaving a ``with`` block with
    an exception follows ``on_error`` (:class:`lmdbio.closing.Closing` says how).

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
        order: :meth:`epoch`'s order, by name from :data:`lmdbio.orders.ORDERS` or an
            :class:`lmdbio.orders.Order`: ``"file"``, ``"window"`` (each window shuffled
            whole: most random; node readers read whole windows), ``"shard"`` (each rank
            shuffles its own slice of every window: node readers read a file-order epoch's
            bytes; the order depends on the rank count), ``"elastic"`` (the shard order over
            ``shuffle_partitions`` canonical partitions, default 64: one order at any rank
            count).
        shuffle, seed, shuffle_block, shuffle_window, shuffle_partitions, last_batch: the
            order's settings (:class:`lmdbio.pipeline.EpochPlan`); ``shuffle`` is the
            shorthand of ``order`` (False: file order; True: ``"window"``).
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

    # Set in __init__; a Reader whose setup failed never reaches its caller (closing.py's
    # error paths find them unset). ``it``: the epochs, the next batch, the live epoch.
    pipe: Pipeline
    it: Iteration

    def __init__(self, path, batch_size: int, comm=None,
                 variant: str = "lmdbio-lmm-dio", ranks_per_node: int | None = None,
                 readers_per_node: int = 1, *, options: Options | None = None,
                 coalesce_bytes: int | None = None, stagger_size: int | None = None,
                 build_provenance: bool = False, measure: bool = True,
                 on_error: str | None = None, shuffle: bool | str = False, seed: int = 0,
                 shuffle_block: int | None = None, shuffle_window: int = 4,
                 last_batch: str = "short", prefetch: int = 0,
                 shuffle_partitions: int = DEFAULT_PARTITIONS, order=None):
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

        orders = dict(shuffle=shuffle, seed=seed, shuffle_block=shuffle_block, order=order,
                      shuffle_window=shuffle_window, last_batch=last_batch,
                      shuffle_partitions=shuffle_partitions)
        try:
            plan = self._arguments(path, batch_size, variant, options, ranks_per_node,
                                   readers_per_node, coalesce_bytes, stagger_size, orders)
            self.topology = (make_topology(comm.mpi, ranks_per_node, readers_per_node)
                             if self.options.localized else None)
            self.pipe = Pipeline(self.options, comm.native, self.topology, self.per_rank,
                                 build_provenance, plan, prefetch)
            self.is_reader = self.pipe.is_reader
            self._open()
        except BaseException as exc:
            if self.nprocs > 1 and not isinstance(exc, Exception):
                self._interrupted_setup(exc)
            self._release()   # every rank gets here together: each failing step is collective
            raise
        self._closed = False

    def _arguments(self, path, batch_size, variant, options, ranks_per_node, readers_per_node,
                   coalesce_bytes, stagger_size, orders: dict) -> EpochPlan:
        """Check the arguments on every rank, find the file (``{node}``) and the variant
        (``auto``: rank 0's choice for all). Collective; returns the order's settings."""
        comm = self.comm

        def check_args():
            check_settings(self._on_error)
            check_node_args(ranks_per_node, readers_per_node)
            plan = plan_of(**orders)
            self.batch_size = check_batch_size(batch_size, self.nprocs)
            f = db_file(local)
            opts, auto = resolve_variant(variant, options, f, chooser=self.rank == 0,
                                         coalesce_bytes=coalesce_bytes, stagger_size=stagger_size)
            if opts is not None and opts.localized and comm.mpi is None and auto is None:
                raise ConfigurationError(
                    f"variant {opts.name!r} shares a node's records through MPI-3 shared "
                    "windows, and this job has no MPI (torch.distributed's ranks, e.g. started "
                    f"by torchrun): use a variant whose ranks each read their own, {PER_RANK_HINT}"
                    ", or launch with mpiexec")
            return opts, auto, f, plan

        local = node_path(comm, path, ranks_per_node)   # {node}: this rank's node's copy
        self.options, auto, self.path, plan = comm.collective(check_args)
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
        return plan

    def _open(self) -> None:
        """Read the meta page, agree on one snapshot, set the pipeline up and start the
        Iteration. Collective: every step that can fail raises on every rank."""
        comm = self.comm

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
            self.pipe.prepare(self.path)
            p = self.pipe   # every reader at one snapshot; n is the snapshot's own entry count
            got = agree_snapshot(comm, (lambda: p.open(self.path, m)) if self.is_reader
                                 else (lambda: None), p.snapshot_id, p.close_handles, self.path)
            self.lock = p.locked
            if got is not None:
                self.txnid, self.n = got
            mean_size = max(1.0, m.file_size / max(1, m.entries))
            #: Batches per chunk (COAL); the bench starts timing on a multiple of it.
            self.coalesce = self.pipe.setup(self.n, self.batch_size, mean_size, row)
        digest = comm.bcast(comm.collective(
            lambda: content_digest(self.path, self.txnid) if self.rank == 0 else None), root=0)
        self.it = Iteration(self.pipe.agreed_stream(), self.pipe.epochs, self.batch_size, self.rank,
                            self.nprocs, {"txnid": self.txnid, "records": self.n, "digest": digest})

    # ------------------------------------------------------------- reading
    def read_batch(self) -> Batch:
        """This rank's share of the next global batch of the endless stream (batch t holds
        positions ``(t*B + j) mod N``); between epochs it goes on after the last epoch's rows."""
        it = None if self._closed else self.it
        # One test on the common path; any reason to look closer takes the checks below.
        if it is None or it.live is not None or it.deferred is not None or \
                (self.pipe.depth and not it.told_no_prefetch):
            self._check_read_batch()
        return self._next()

    def _check_read_batch(self) -> None:
        """read_batch()'s checks: closed, an epoch's error left, an epoch live; warn once that
        it does not read ahead."""
        self._check_usable()
        self.it.idle("take its batches from its iterator, or close that iterator (it.close()) "
                     "before calling read_batch()")
        if self.pipe.depth and not self.it.told_no_prefetch:
            self.it.told_no_prefetch = True
            warnings.warn(f"prefetch={self.pipe.depth} reads ahead in an epoch's iterator only "
                          "(for batch in reader.epoch(e)); read_batch() reads each batch when asked",
                          stacklevel=3)

    def _next(self) -> Batch:
        it = self.it
        try:
            if it.prefetch is not None:
                batch = it.prefetch.next()
            elif it.live is None:
                batch = self.pipe.read(it.t, it.stream, None, self.rec)
            else:
                batch = self.pipe.read(it.t, it.live.schedule, it.live.rows, self.rec)
        except Exception as exc:
            # Tell the reader group at once, so its ranks stop waiting for us.
            self._abandon()
            if not self._in_with:
                self._fail(exc)
            raise   # inside ``with``: __exit__ decides, with the other ranks
        it.took()
        batch.source = self.path  # decode errors name a record's key from it
        return batch

    def _check_usable(self) -> None:
        if self._closed:
            raise LmdbioError("the Reader is closed")
        self.it.check()

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
        """Agree with every rank on epoch ``e``'s start (:meth:`Iteration.reconcile`), then lay
        out its rows. Collective. Returns the batches left to deliver."""
        it = self.it
        views = self.comm.allgather_within(it.start_view(e), what=f"the start of epoch {e}")
        t0, skip = it.reconcile(views)
        rows, schedule = self.comm.collective(self.pipe.start_epoch, int(e), t0, self.rec)
        it.begin(token, int(e), rows, schedule, t0,
                 self.pipe.prefetch(t0 + skip, t0 + rows.batches, schedule, rows, self.rec),
                 skip)
        return rows.batches - skip

    def _end_epoch(self) -> None:
        """Local: stop reading ahead, go back to the stream after the epoch's last row. A
        problem is raised by the next call."""
        self.it.end_deferred(self.pipe.end_epoch)

    def set_epoch(self, e: int) -> None:   # as DistributedSampler's: what ``for b in reader`` reads
        self.it.epoch = e

    def __iter__(self):
        return self.epoch(self.it.epoch)

    @property
    def epochs(self) -> EpochPlan:
        """Deprecated: the order's settings are ``reader.it.plan``."""
        warnings.warn("Reader.epochs is deprecated: the order's settings (block resolved) are "
                      "reader.it.plan", DeprecationWarning, stacklevel=2)
        return self.it.plan if self.it is not None else self.pipe.epochs

    # ------------------------------------------------------------- resuming
    def state_dict(self) -> dict:
        """Where this Reader's epochs are, as plain JSON values (local, no message).

        ``epoch`` and ``batches`` (:meth:`Iteration.position`), the order's settings and
        ``dataset``, the snapshot (:func:`lmdbio.resume.run_state`). Every rank's is the
        same (every rank takes the same batches), so saving rank 0's is enough.
        """
        if self._closed or self.it is None:
            raise LmdbioError("the Reader is closed: take state_dict() before close()")
        return self.it.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume from ``state`` (:meth:`state_dict` of this job or an earlier one): the next
        :meth:`epoch` of its epoch (or ``for b in reader``: the state's epoch is
        :meth:`set_epoch`'s) yields the batches the state had not delivered.

        Collective: every rank loads the same state, between epochs. A state of another
        version of the data set (its txnid, record count, or content digest where the state
        has one: states saved without it are checked on the first two) raises SnapshotError;
        one of another batch size, order (its name and the settings it depends on), last-batch
        policy or, for an order that depends on it (``"shard"``), rank count raises
        ConfigurationError, on every rank, naming what differs.
        """
        self._check_usable()
        opened = f"this Reader opened {self.path} at txnid {self.txnid} with {self.n} records"
        view = self.it.load_view(state, opened)
        self.it.reconcile_load(self.comm.allgather_within(view, what="load_state_dict()"))

    # ------------------------------------------------------------- results
    def stats(self) -> list[dict]:
        """This rank's rows: one per (batch, phase) with times, getrusage and I/O counters."""
        extra = {"variant": self.variant, "nprocs": self.nprocs, "is_reader": self.is_reader,
                 "lock": self.lock, "auto_reason": self.auto_reason, **self.pipe.describe()}
        return with_total(self.rec.rows, self._totals0, self.rank, extra)

