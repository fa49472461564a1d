"""Every LMDB environment lmdbio opens: one per real file per process, shared and counted.

py-lmdb allows one Environment per path per process ("already open in this
process"), and LMDB's reader lock only protects a snapshot when readers and
writers use the *same* lock file. So an environment is opened at the file's
real location (symbolic links resolved: a ``data.mdb`` linked into another
directory is locked next to the real file, where a writer working through
the real directory sees our reader slots), and every Reader and Snapshot of
that file in this process shares it, with a reference count.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from . import format as fmt
from .errors import AccessError, LmdbioError

__all__ = ["EnvHandle", "acquire", "real_location", "lock_path"]

log = logging.getLogger("lmdbio")

_ENVS: dict[tuple, list] = {}
_LOCK = threading.Lock()
_WARNED_NOLOCK: set = set()


def real_location(path) -> tuple[Path, str, bool]:
    """``(real data file, where, subdir)``: what ``lmdb.open(where, subdir=subdir)`` must get.

    Symbolic links (of the file or of any directory above it) are resolved, so
    the lock file is the one a writer using the real path uses.
    """
    real = Path(os.path.realpath(fmt.db_file(path)))
    if real.name == "data.mdb":
        return real, str(real.parent), True
    return real, str(real), False


def lock_path(where: str, subdir: bool) -> str:
    """LMDB's lock file for an environment opened as ``lmdb.open(where, subdir=subdir)``."""
    return os.path.join(where, "lock.mdb") if subdir else where + "-lock"


def _warn_nolock(where: str) -> None:
    if where not in _WARNED_NOLOCK:
        _WARNED_NOLOCK.add(where)
        log.warning("lmdbio: %s: cannot open LMDB's lock file (read-only?); reading without the "
                    "reader lock: a concurrent writer could recycle pages this reader uses", where)


def _lock_unusable(lock: str) -> bool:
    """True if LMDB's lock file cannot be opened for writing (read-only media, no permission)."""
    existed = os.path.exists(lock)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        return exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM)
    os.close(fd)
    if not existed:
        try:
            os.unlink(lock)
        except OSError:
            pass
    return False


@dataclass
class EnvHandle:
    """One counted use of a shared read-only Environment; :meth:`release` when done."""

    env: object
    path: Path          # the real data file
    locked: bool        # LMDB's reader lock is in force (a writer sees our slots)
    _key: tuple | None

    def release(self) -> None:
        key, self._key = self._key, None
        if key is None:
            return
        with _LOCK:
            entry = _ENVS.get(key)
            if entry is None:
                return
            entry[2] -= 1
            if entry[2] <= 0:
                del _ENVS[key]
                entry[0].close()


def acquire(path, *, max_readers: int = 126) -> EnvHandle:
    """A shared read-only Environment of the LMDB at ``path`` (dir or data file).

    Opened with a lock file where one can be used (so a writer cannot recycle
    the pages of our read transactions), without one on read-only media (with
    a warning). A lock file this call created is removed again when the open
    fails, so a failed open leaves the dataset directory as it was.

    Raises:
        LmdbFormatError: LMDB refuses the file (damaged meta, wrong version).
        LmdbioError: other code in this process (its own ``lmdb.open``) holds
            the environment, or LMDB fails otherwise; the message says what to do.
        AccessError: the file or its directory cannot be read.
    """
    import lmdb

    from .io import lmdb_error

    real, where, subdir = real_location(path)
    key = (os.getpid(), where, subdir)
    with _LOCK:
        entry = _ENVS.get(key)
        if entry is None:
            meta = fmt.read_meta(real)
            kwargs = dict(subdir=subdir, readonly=True, create=False, readahead=True,
                          lib_version=1 if meta.format_version == 3 else 0,
                          max_readers=max_readers, max_spare_txns=0)
            lock = lock_path(where, subdir)
            existed = os.path.exists(lock)
            try:
                try:
                    env = lmdb.open(where, lock=True, **kwargs)
                    locked = os.path.exists(lock)   # read-only media: LMDB goes on without one
                except lmdb.Error as exc:
                    if _already_open(exc) or not _lock_unusable(lock):
                        raise
                    env, locked = lmdb.open(where, lock=False, **kwargs), False
            except lmdb.Error as exc:
                if not existed and os.path.exists(lock):
                    try:
                        os.unlink(lock)
                    except OSError:
                        pass
                if _already_open(exc):
                    raise LmdbioError(
                        f"{real}: this process already has that LMDB open through other code (its "
                        "own lmdb.open()?); py-lmdb allows one Environment per file per process. "
                        "Close it before making a Reader or Snapshot of the same file, or read "
                        "through lmdbio only") from exc
                if "ermission" in str(exc):
                    raise AccessError(f"{real}: permission denied opening the LMDB environment "
                                      f"({exc}); check read access to {where}") from exc
                raise lmdb_error(exc, real, "opening the database") from exc
            if not locked:
                _warn_nolock(where)
            entry = _ENVS[key] = [env, locked, 0]
        entry[2] += 1
        return EnvHandle(entry[0], real, entry[1], key)


def _already_open(exc: Exception) -> bool:
    return "already open in this process" in str(exc)
