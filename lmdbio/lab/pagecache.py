"""The page cache: drop a file's pages (a cold read) and count the pages resident (mincore)."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

import numpy as np

__all__ = ["evict", "resident_pages", "residency"]


def evict(path: str | os.PathLike) -> None:
    """Drop a file's pages from the page cache (posix_fadvise DONTNEED; no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        # Dirty pages cannot be dropped: flush first (works on a read-only fd on Linux).
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


_libc = None


def _lib():
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.mmap.restype = ctypes.c_void_p
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        _libc = libc
    return _libc


def resident_pages(path: str | os.PathLike) -> np.ndarray:
    """Bool per page of a file: True where it is in the page cache.

    mincore over a fresh read-only map; mapping does not fault pages in, so
    measuring does not change the answer.
    """
    size = os.path.getsize(path)
    npages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = np.zeros(npages, dtype=np.uint8)
    if size == 0:
        return vec.astype(bool)
    libc = _lib()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {path} failed: {os.strerror(err)}")
        try:
            if libc.mincore(addr, size, vec.ctypes.data) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore on {path} failed: {os.strerror(err)}")
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return (vec & 1).astype(bool)


def residency(path: str | os.PathLike) -> float:
    """Fraction of a file's pages in the page cache."""
    pages = resident_pages(path)
    return float(pages.mean()) if len(pages) else 0.0
