"""Cache preparation: make a point's records warm or cold on every node, and measure residency."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from lmdbio.waiting import polite_barrier

__all__ = ["EvictionWarning", "page_mask", "batch_positions", "warm", "prepare_cache",
           "measure_residency"]


class EvictionWarning(UserWarning):
    """Eviction left a cold point's data in the page cache: the point is not cold."""


def page_mask(offsets: np.ndarray, sizes: np.ndarray, npages: int) -> np.ndarray:
    """Bool per page: some byte of some record (offset, size) lies in it."""
    ps = mmap.PAGESIZE
    first = offsets.astype(np.int64) // ps
    last = (offsets.astype(np.int64) + np.maximum(sizes.astype(np.int64), 1) - 1) // ps
    diff = np.zeros(npages + 1, dtype=np.int64)
    np.add.at(diff, np.clip(first, 0, npages), 1)
    np.add.at(diff, np.clip(last + 1, 0, npages), -1)
    return np.cumsum(diff[:npages]) > 0


def batch_positions(first_batch: int, nbatches: int, batch_size: int, n: int) -> np.ndarray:
    """Record positions read by global batches first_batch .. first_batch+nbatches-1."""
    start = first_batch * batch_size
    return (start + np.arange(nbatches * batch_size, dtype=np.int64)) % n


def warm(path, offsets: np.ndarray, sizes: np.ndarray, chunk: int = 16 << 20) -> None:
    """Read the pages holding the given records once, so they are in the page cache."""
    from lmdbio.plan import plan_extents

    ext_start, ext_len, _ = plan_extents(offsets, sizes, max_gap=1 << 20)
    buf = np.empty(chunk, dtype=np.uint8)
    mv = memoryview(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        for off, length in zip(ext_start.tolist(), ext_len.tolist()):
            end = off + length
            while off < end:
                got = os.preadv(fd, [mv[:min(chunk, end - off)]], off)
                if got <= 0:
                    break
                off += got
    finally:
        os.close(fd)


def _residency(path, offsets: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    from lmdbio import metrics

    pages = metrics.resident_pages(path)
    whole = float(pages.mean()) if len(pages) else 0.0
    mask = page_mask(offsets, sizes, len(pages))
    return (float(pages[mask].mean()) if mask.any() else 0.0), whole


def measure_residency(comm, path: Path, leader: bool, cache: str, offsets: np.ndarray,
                      sizes: np.ndarray, positions: np.ndarray) -> tuple[float, float]:
    """Fraction of the records' pages (and of the file) resident, worst over nodes. Collective.

    Worst means the highest for a cold point and the lowest for a warm one;
    ``leader`` marks the one rank per page cache (node) that measures.
    """
    from mpi4py import MPI

    res = file_res = 1.0 if cache == "warm" else 0.0
    if leader:
        res, file_res = _residency(path, offsets[positions], sizes[positions])
    op = MPI.MAX if cache == "cold" else MPI.MIN
    return comm.allreduce(res, op=op), comm.allreduce(file_res, op=op)


def prepare_cache(comm, path: Path, leader: bool, cache: str, offsets: np.ndarray,
                  sizes: np.ndarray, positions: np.ndarray, evict=None) -> tuple[float, float]:
    """Make the records at ``positions`` warm (read them) or the file cold (evict it). Collective.

    One rank per page cache (``leader``) does it for its node, on ``path``
    (the file as its node sees it). ``evict`` replaces
    :func:`lmdbio.metrics.evict` (an emulated PFS evicts through its node view).
    Returns :func:`measure_residency` right after.
    """
    from lmdbio import metrics

    polite_barrier(comm)   # nobody is still reading
    if leader:
        if cache == "cold":
            (evict or metrics.evict)(path)
        else:
            warm(path, offsets[positions], sizes[positions])
    out = measure_residency(comm, path, leader, cache, offsets, sizes, positions)
    polite_barrier(comm)
    return out
