"""NVIDIA DALI's Caffe reader as a measured peer: ``lmdbio bench --variants dali-caffe``.

DALI (``pip install nvidia-dali-cuda120``: a 424 MB wheel, about 1 GB
installed, that needs ``packaging<=26.3`` while constraints.txt pins 26.4,
so it is in no extra yet) runs on CPU with ``device_id=None``. Each rank builds one pipeline,
``fn.readers.caffe`` with ``num_shards=P, shard_id=rank``, a per-rank batch
of ``batch_size // P`` and ``threads`` CPU threads (one, like our
variants, unless asked). Its outputs are what training needs: the image of
each Datum (the raw ``data`` bytes, or for encoded Datums the image decoded
by ``fn.decoders.image`` on CPU, HWC) and the label, as numpy arrays.

Differences from our variants, stated where they show up:

- DALI's shards are contiguous ranges of the key order (shard k starts at
  record ``k * N // P``), ours interleave each global batch. Warm points
  therefore warm the whole file (:meth:`DaliCaffe.positions`).
- DALI's executor runs ahead of the caller (``prefetch_queue_depth``,
  default 2) on a thread of its own; our readers are synchronous.
- DALI opens LMDB 0.9 files only (data version 1); LMDB 1.0 files fail in
  ``mdb_env_open`` with EINVAL. :func:`check_format` says so first.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lmdbio.errors import ConfigurationError, LmdbioError

__all__ = ["DALI_CAFFE", "PEERS", "DaliCaffe", "check_format", "import_dali", "dali_records"]

DALI_CAFFE = "dali-caffe"


def import_dali():
    """``nvidia.dali`` and its ``fn`` and ``types``, or a clear error saying what to install."""
    try:
        import nvidia.dali as dali
        from nvidia.dali import fn, types
    except ImportError as exc:
        raise ConfigurationError(
            f"the {DALI_CAFFE!r} peer needs NVIDIA DALI ({exc}); install it with "
            "`pip install nvidia-dali-cuda120` (about 1 GB; CPU use needs no GPU)") from None
    return dali, fn, types


def check_format(path) -> Path:
    """The LMDB directory DALI is given, after checking that DALI can open its data.mdb.

    Raises ConfigurationError for an LMDB 1.0 file (DALI's LMDB fails with
    EINVAL on it), naming the format and what to do.
    """
    from lmdbio.format import db_file, read_meta

    f = db_file(path)
    meta = read_meta(f)
    if meta.format_name != "0.9":
        raise ConfigurationError(
            f"{f} is an LMDB {meta.format_name} file (data version {meta.format_version}); "
            "DALI's caffe reader bundles LMDB 0.9 and opens only 0.9 files (data version 1): on "
            "this one mdb_env_open fails with EINVAL. Make the dataset with `lmdbio make-dataset "
            "--lmdb-format 0.9` (the default), or convert it with an LMDB 0.9 build: "
            "`mdb_dump DIR | mdb_load NEWDIR`.")
    return f.parent


def _is_encoded(path: Path) -> bool:
    """Whether the first record is an encoded (JPEG/PNG) Datum."""
    from lmdbio import datum, lmdbenv

    handle = lmdbenv.acquire(path)  # shared with a Reader of the same file in this process
    try:
        with handle.env.begin() as txn:
            first = next(iter(txn.cursor()), None)
    finally:
        handle.release()
    return first is not None and bool(datum.decode(first[1]).encoded)


def _pipeline(path: Path, batch: int, shard: int, shards: int, threads: int, decode: bool,
              prefetch: int):
    dali, fn, types = import_dali()

    pipe = dali.Pipeline(batch_size=batch, num_threads=threads, device_id=None,
                         prefetch_queue_depth=prefetch)
    with pipe:
        images, labels = fn.readers.caffe(path=str(path), shard_id=shard, num_shards=shards,
                                          random_shuffle=False, name="reader")
        if decode:
            images = fn.decoders.image(images, device="cpu", output_type=types.RGB)
        pipe.set_outputs(images, labels)
    try:
        pipe.build()
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[-1]
        raise LmdbioError(f"DALI could not open {path}: {reason}") from None
    return pipe


def _arrays(images, labels) -> tuple[np.ndarray | list, np.ndarray]:
    """A pipeline's outputs as ``(images, labels (n,) int64)``.

    Images of one shape come as one ``(n, ...)`` uint8 array; ragged ones
    (undecoded JPEG files) as a list of arrays.
    """
    images = images.as_array() if images.is_dense_tensor() else [np.array(t) for t in images]
    return images, labels.as_array().reshape(-1).astype(np.int64)


class DaliCaffe:
    """One rank's DALI pipeline, shaped like the bench's sources: ``read_batch() -> (n, bytes)``.

    Args:
        comm: the point's communicator (rank and size pick the shard).
        path: LMDB directory or data.mdb (LMDB 0.9).
        batch_size: global batch; each rank's pipeline gets ``batch_size // comm.size``.
        threads: DALI CPU threads per rank (default: ``$LMDBIO_DALI_THREADS`` or 1).
        decode: decode encoded Datums with ``fn.decoders.image`` (None: when the
            first record is encoded).
        prefetch: DALI's ``prefetch_queue_depth``.
    """

    is_reader = True
    coalesce = 1

    def __init__(self, comm, path, batch_size: int, *, threads: int | None = None,
                 decode: bool | None = None, prefetch: int = 2, **_ignored):
        if batch_size % comm.size:
            raise ValueError(f"batch_size {batch_size} is not a multiple of the {comm.size} ranks")
        threads = int(os.environ.get("LMDBIO_DALI_THREADS", "1")) if threads is None else threads
        if threads <= 0:
            raise ValueError(f"DALI threads must be positive, got {threads}")
        self.path = check_format(path)
        self.decode = _is_encoded(self.path) if decode is None else decode
        self.threads = threads
        self.variant = f"{DALI_CAFFE}(threads={threads}, decode={self.decode})"
        self._pipe = _pipeline(self.path, batch_size // comm.size, comm.rank, comm.size, threads,
                               self.decode, prefetch)

    @staticmethod
    def positions(first_batch: int, nbatches: int, batch_size: int, n: int) -> np.ndarray:
        """Records to prepare in the page cache: all of them (DALI's shards are not ours)."""
        return np.arange(n, dtype=np.int64)

    def read_images(self) -> tuple[np.ndarray | list, np.ndarray]:
        """This rank's next batch: ``(images, labels)`` as numpy arrays."""
        return _arrays(*self._pipe.run())

    def read_batch(self) -> tuple[int, int]:
        images, labels = self.read_images()
        nbytes = images.nbytes if isinstance(images, np.ndarray) else sum(x.nbytes for x in images)
        return len(labels), int(nbytes)

    def stats(self) -> list[dict]:
        return []

    def close(self) -> None:
        self._pipe = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def dali_records(path, count: int, *, shard: int = 0, shards: int = 1, batch: int = 16,
                 decode: bool | None = None) -> tuple[list, np.ndarray]:
    """The first ``count`` records DALI delivers from one shard: ``(images, labels)``.

    For comparisons with lmdbio record for record: a list of arrays, raw
    Datums as their flat ``data`` bytes, encoded ones decoded to HWC RGB
    (or, with ``decode=False``, their JPEG/PNG bytes).
    """
    path = check_format(path)
    decode = _is_encoded(path) if decode is None else decode
    pipe = _pipeline(path, batch, shard, shards, 1, decode, 2)
    images, labels = [], []
    while sum(len(x) for x in labels) < count:
        im, lab = _arrays(*pipe.run())
        images.extend(im)
        labels.append(lab)
    return images[:count], np.concatenate(labels)[:count]


#: The peers the bench runs besides our variants: name -> source class.
PEERS = {DALI_CAFFE: DaliCaffe}
