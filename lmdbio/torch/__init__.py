"""A PyTorch ``IterableDataset`` over a Reader's epochs (torch is imported only when used).

    ds = lmdbio.torch.LmdbDataset("cifar10", batch_size=256, shuffle=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=4,
                                         persistent_workers=True)   # the dataset batches
    for epoch in range(epochs):
        ds.set_epoch(epoch)                                         # as DistributedSampler
        for images, labels in loader: ...

Each item is this rank's share of one global batch: ``(images, labels)``
tensors made with ``torch.from_numpy`` from the decoded batch (no copy), or
the raw :class:`~lmdbio.batch.Batch` with ``decode=False``; ``len(ds)`` (and
``ds.batches_per_epoch``) is the rank's items per epoch. The ranks are MPI's
(launched with ``mpiexec``: when ``torch.distributed`` is initialized its rank
and world size must be MPI's, so DistributedDataParallel's ranks read their own
shares) or, under ``torchrun`` with no MPI launcher, ``torch.distributed``'s
default group (a per-rank variant: the default ``lmdbio-direct``, ``lmdb``,
``lmdb-get`` or ``auto``; mpi4py is not imported). Making the dataset is
collective: the ranks agree on the snapshot
(:func:`lmdbio.snapshot.agree_snapshot`, as a Reader's ranks do) and the order
(:class:`RankPlan`, plain values; :func:`make_plan`).

``num_workers = 0``: a :class:`lmdbio.Reader` in the training process reads
each epoch (any variant; ``prefetch=d`` reads ahead in a thread).
``num_workers = W > 0``: worker ``w`` delivers the rank's batches
``w, w + W, w + 2W, ...`` of the epoch (:func:`worker_batches`), in the order
DataLoader takes its workers' items, so the loader yields the same records in
the same order as with ``W = 0``. A worker reads with no MPI and no messages
(:class:`WorkerReader`): through the ``lmdbio-direct`` pipeline's stages on a
one-process communicator (:class:`~lmdbio.comm.LocalComm`), opening
LMDB itself, read-only, when it reads its first batch and holding its own read
transaction on the plan's snapshot. Nothing unpicklable travels to the workers
(``fork``, ``spawn`` or ``forkserver``). A fork-started worker cannot open a
file its training process holds open (py-lmdb allows one environment per file
per process, :class:`~lmdbio.errors.AlreadyOpenError`): close a Reader or an
``LmdbDataset`` iterated with ``num_workers=0`` on the same file first, or use
``multiprocessing_context="spawn"``. LMDB's reader table is sized for ``ranks
on the node x (W + 1)`` transactions (at least
:data:`~lmdbio.lmdbenv.LMDB_READERS`, LMDB's default), or ``max_readers``; a
table too small for the workers raises ConfigurationError naming
``max_readers`` and the numbers.

``set_epoch(e)`` reaches workers that were started before it
(``persistent_workers=True``): the training process keeps its epoch and a
loaded state in a small block of shared memory the dataset carries to its
workers (:class:`Position`), which each worker reads when an iteration starts.
It has no file, so nothing is left behind however the process ends.

``ds.state_dict()`` / ``ds.load_state_dict(state)`` are what torchdata's
``StatefulDataLoader`` calls on an iterable dataset: in the training process
with ``num_workers=0``, in each worker with ``W > 0`` (a worker's state says
which of the rank's batches it delivers next, and the loader keeps one per
worker). A job stopped mid-epoch and restarted with the same arguments gets
that epoch's remaining batches (:meth:`lmdbio.Reader.load_state_dict`), then
the next epochs. A plain ``DataLoader`` with workers does not show the
training process its workers' batches: there ``ds.state_dict(batches=k)``
gives the state after the epoch's first ``k`` batches.
"""

from __future__ import annotations

from ..lmdbenv import LMDB_READERS
from ..resume import STATE_VERSION
from .need import need_torch
from .plan import RankPlan, check_dataset_state, make_plan, worker_batches
from .position import Position
from .worker import LocalComm, WorkerReader

__all__ = ["LmdbDataset",  # noqa: F822 - the module __getattr__ makes it, when torch is needed
           "check_dataset_state", "RankPlan", "make_plan", "WorkerReader", "LocalComm", "Position",
           "worker_batches", "STATE_VERSION", "LMDB_READERS"]

_CLASS = None


def _dataset_class():
    global _CLASS
    if _CLASS is None:
        from .dataset import dataset_class

        cls = dataset_class(need_torch())
        cls.__module__, cls.__qualname__ = __name__, "LmdbDataset"
        _CLASS = cls
    return _CLASS


def __getattr__(name):
    if name == "LmdbDataset":
        return _dataset_class()
    raise AttributeError(f"module 'lmdbio.torch' has no attribute {name!r}")
