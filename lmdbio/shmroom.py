"""Room for MPI-3 shared windows in /dev/shm: free space, and pages faulted in without SIGBUS.

MPICH backs each shared window with a file in :data:`SHM_DIR`; a page touched
past the free room of that tmpfs kills the process with SIGBUS, so the node
groups (:mod:`lmdbio.shm`) check the room first (:func:`shm_free`) and fault
their pages in where the kernel can answer "no room" (:func:`populate`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os

import numpy as np

__all__ = ["SHM_DIR", "SHM_MARGIN", "SHM_ADVICE", "shm_free", "populate", "prefault", "size_text"]

#: Where MPI-3 shared windows live on Linux: MPICH backs each with a file there, and a page
#: touched past the free room of that tmpfs kills the process with SIGBUS.
SHM_DIR = "/dev/shm"
#: Room kept free beyond the windows: MPI's own segments, page rounding, other groups.
SHM_MARGIN = 16 << 20
# Linux 5.14+: fault pages in for writing, returning an error where a touch would be SIGBUS.
_MADV_POPULATE_WRITE = 23
#: What to do when the windows do not fit (every room error ends with it).
SHM_ADVICE = (f"Free room in {SHM_DIR} (remove files left by ended jobs, e.g. mpich_shm_*, or "
              f"ask for a larger {SHM_DIR}), or make the slots smaller: a smaller batch_size or "
              "coalesce_bytes, or prefetch=0; a per-rank variant (lmdbio-direct, lmdb) uses no "
              "shared memory")


def shm_free(directory: str = SHM_DIR) -> int | None:
    """Bytes free in ``directory`` (a tmpfs) for this user, or None where it does not exist."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def populate(buf: np.ndarray) -> bool | None:
    """Fault every page of ``buf`` in for writing, without the risk of SIGBUS.

    True when done; False when the memory behind ``buf`` is not there (a full
    tmpfs, where touching the pages would kill the process); None where the
    kernel cannot (before Linux 5.14): :func:`prefault` then touches them.
    """
    if not buf.nbytes:
        return True
    page = mmap.PAGESIZE
    # The pages holding buf's first and last bytes are mapped whole: round out to them.
    start = buf.ctypes.data // page * page
    end = -(-(buf.ctypes.data + buf.nbytes) // page) * page
    madvise = _libc().madvise
    while True:
        if madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_POPULATE_WRITE) == 0:
            return True
        err = ctypes.get_errno()
        if err == errno.EINTR:
            continue
        return None if err in (errno.EINVAL, errno.ENOSYS, errno.EPERM) else False


_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return _LIBC


def size_text(nbytes: int) -> str:
    """``nbytes`` in MiB, for messages."""
    return f"{nbytes / (1 << 20):.1f} MiB"


def prefault(buf: np.ndarray, write: bool = True) -> None:
    """Touch every page of ``buf`` once (writing, or reading where another process writes),
    so the first batches do not pay its page faults."""
    if write:
        buf[::4096] = 0
    else:
        int(buf[::4096].sum())
