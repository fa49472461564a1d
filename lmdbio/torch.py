"""A PyTorch ``IterableDataset`` over a Reader's epochs (torch is imported only when used).

    ds = lmdbio.torch.LmdbDataset("cifar10", batch_size=256, shuffle=True, prefetch=2)
    loader = torch.utils.data.DataLoader(ds, batch_size=None)   # the dataset batches
    for epoch in range(epochs):
        ds.set_epoch(epoch)                                     # as DistributedSampler
        for images, labels in loader: ...

``ds.state_dict()`` / ``ds.load_state_dict(state)`` are what torchdata's
``StatefulDataLoader`` calls on an iterable dataset (``loader.state_dict()`` holds the
dataset's): a job stopped mid-epoch and restarted with the same arguments gets that epoch's
remaining batches (:meth:`lmdbio.Reader.load_state_dict`), then the next epochs.

Each item is this rank's share of one global batch: ``(images, labels)``
tensors made with ``torch.from_numpy`` from the decoded batch (no copy), or
the raw :class:`~lmdbio.batch.Batch` with ``decode=False``. The ranks are
MPI's (launch with ``mpiexec``); when ``torch.distributed`` is initialized its
rank and world size must be MPI's, so DistributedDataParallel's ranks read
their own shares. Read ahead with ``prefetch=d`` (a thread in this process),
not with DataLoader workers: the Reader is collective over the ranks and
opens LMDB in the process that reads (``num_workers > 0`` is refused).
"""

from __future__ import annotations

from .errors import ConfigurationError

__all__ = ["LmdbDataset", "check_dataset_state"]

_CLASS = None


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise ImportError("lmdbio.torch needs PyTorch: pip install torch "
                          "(CPU only: --index-url set to the PyTorch CPU wheel index from pytorch.org's install page)") from exc
    return torch


def check_dataset_state(state) -> tuple[int, dict | None]:
    """``(epoch, reader state)`` of an :meth:`LmdbDataset.state_dict` dict, or
    ConfigurationError saying what is wrong with it (no torch needed)."""
    if not isinstance(state, dict) or not {"epoch", "reader"} <= state.keys():
        raise ConfigurationError(f"an LmdbDataset state is a dict with 'epoch' and 'reader' "
                                 f"(LmdbDataset.state_dict()), got {state!r:.200}")
    epoch, reader = state["epoch"], state["reader"]
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ConfigurationError(f"the state's epoch must be an int >= 0, got {epoch!r}")
    if reader is not None and not isinstance(reader, dict):
        raise ConfigurationError(f"the state's 'reader' must be None or a dict from "
                                 f"Reader.state_dict(), got a {type(reader).__name__}")
    return epoch, reader


def _dataset_class():
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    torch = _torch()

    class LmdbDataset(torch.utils.data.IterableDataset):
        """This rank's batches of each epoch (see :mod:`lmdbio.torch`).

        Args:
            path: LMDB directory or data.mdb.
            batch_size: the global batch (a multiple of the number of ranks).
            decode: yield ``(images, labels)`` tensors (True) or Batches.
            comm: MPI communicator (default COMM_WORLD).
            **reader_args: for :class:`lmdbio.Reader` (variant, shuffle, seed,
                shuffle_block, shuffle_window, last_batch, prefetch, ...).
        """

        def __init__(self, path, batch_size: int, decode: bool = True, comm=None,
                     variant: str = "lmdbio-direct", **reader_args):
            super().__init__()
            self.path, self.batch_size, self.decode = path, batch_size, decode
            self.comm, self.variant, self.reader_args = comm, variant, reader_args
            self.epoch = 0
            self.reader = None
            self._resume = None   # a loaded Reader state, until the next iteration applies it

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def state_dict(self) -> dict:
            """``{"epoch": set_epoch's epoch, "reader": Reader.state_dict()}`` (plain values,
            the same on every rank; "reader" is None until the first iteration opens it)."""
            reader = self._resume
            if reader is None and self.reader is not None:
                reader = self.reader.state_dict()
            return {"epoch": int(self.epoch), "reader": reader}

        def load_state_dict(self, state: dict) -> None:
            """Resume from :meth:`state_dict`'s dict: the next iteration (every rank's, as
            StatefulDataLoader makes it) loads the Reader's state, collectively, and yields
            the batches of its epoch not delivered yet."""
            self.epoch, self._resume = check_dataset_state(state)

        def _open(self):
            from mpi4py import MPI

            from .reader import Reader

            if torch.utils.data.get_worker_info() is not None:
                raise ConfigurationError(
                    "lmdbio.torch.LmdbDataset reads in the training process: use "
                    "DataLoader(ds, batch_size=None) with num_workers=0, and prefetch=d to read "
                    "ahead")
            comm = self.comm if self.comm is not None else MPI.COMM_WORLD
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                got = (dist.get_rank(), dist.get_world_size())
                if got != (comm.rank, comm.size):
                    raise ConfigurationError(
                        f"torch.distributed has rank {got[0]} of {got[1]} but MPI rank "
                        f"{comm.rank} of {comm.size}: launch with mpiexec (one MPI rank per "
                        "torch rank, in the same order)")
            self.reader = Reader(self.path, self.batch_size, comm, variant=self.variant,
                                 **self.reader_args)

        def __iter__(self):
            if self.reader is None:
                self._open()
            resume, self._resume = self._resume, None
            if resume is not None:
                self.reader.load_state_dict(resume)
            for batch in self.reader.epoch(self.epoch):
                if not self.decode:
                    yield batch
                    continue
                images, labels = batch.as_datum_array()
                yield torch.from_numpy(images), torch.from_numpy(labels)

        def close(self) -> None:
            """Close the Reader (collective over its ranks)."""
            reader, self.reader = self.reader, None
            if reader is not None:
                reader.close()

    _CLASS = LmdbDataset
    return _CLASS


def __getattr__(name):
    if name == "LmdbDataset":
        return _dataset_class()
    raise AttributeError(f"module 'lmdbio.torch' has no attribute {name!r}")
