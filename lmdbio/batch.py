"""Batch: one rank's share of a global batch, one buffer plus offset and size arrays."""

from __future__ import annotations

import numpy as np

from . import datum

__all__ = ["Batch"]


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

    def as_datum_array(self, out: np.ndarray | None = None,
                       threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Decode the records as Caffe Datums: ``(n, c, h, w)`` uint8 images and labels.

        ``threads`` decode encoded (JPEG/PNG) records in parallel (see
        :func:`lmdbio.datum.decode_records`).
        """
        return datum.decode_records(self.buffer, self.offsets, self.sizes, out=out,
                                    threads=threads)
