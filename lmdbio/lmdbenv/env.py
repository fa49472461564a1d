"""LMDB environments: one per real file per process, shared and counted; snapshots; errors.

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
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import format as fmt
from ..errors import AccessError, AlreadyOpenError, LmdbFormatError, LmdbioError, SnapshotError

__all__ = ["EnvHandle", "acquire", "LMDB_READERS", "real_location", "lock_path", "lmdb_error",
           "begin_pinned", "entries", "liblmdb_version"]

log = logging.getLogger("lmdbio")

# py-lmdb errors that mean the file's pages are not what LMDB expects.
_LMDB_FORMAT_ERRORS = ("CorruptedError", "PageNotFoundError", "BadValsizeError", "CursorFullError",
                       "InvalidError", "VersionMismatchError", "BadTxnError", "IncompatibleError",
                       "PanicError", "BadChecksumError", "ProblemError", "BadDbiError",
                       "PageFullError", "EnvEncryptionError")


def lmdb_error(exc: Exception, path, doing: str) -> LmdbioError:
    """An LmdbioError for a py-lmdb error met while ``doing`` something with ``path``.

    Damage (corrupted or missing pages, bad sizes, wrong version) becomes an
    :class:`LmdbFormatError`; anything else (reader table full, map resized,
    lock file trouble) a plain :class:`LmdbioError`. Both name the file and
    what to do.
    """
    import lmdb

    kinds = tuple(getattr(lmdb, n) for n in _LMDB_FORMAT_ERRORS if hasattr(lmdb, n))
    what = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    err: LmdbioError
    if isinstance(exc, kinds):
        err = LmdbFormatError(f"{path}: LMDB reports a damaged file while {doing} ({what}); "
                              f"check it with `lmdbio info {path}` and restore or rebuild the "
                              "database")
    else:
        err = LmdbioError(f"{path}: LMDB failed while {doing} ({what}); check the file, its "
                          "directory's permissions and other processes using it, then retry")
    err.__cause__ = exc
    return err


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

    env: Any            # py-lmdb's Environment (untyped)
    path: Path          # the real data file
    locked: bool        # LMDB's reader lock is in force (a writer sees our slots)
    _key: tuple | None
    fd: int = -1        # a descriptor of the very file LMDB mapped (read it, never close it)

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
                try:
                    entry[0].close()
                finally:
                    os.close(entry[3])


#: LMDB's reader table when nothing asks for more (LMDB's own default).
LMDB_READERS = 126


def acquire(path, *, max_readers: int = LMDB_READERS, check=None,
            tries: int = 5) -> EnvHandle:
    """A shared read-only Environment of the LMDB at ``path`` (dir or data file).

    Opened with a lock file where one can be used (so a writer cannot recycle
    the pages of our read transactions), without one on read-only media (with
    a warning). A lock file this call created is removed again when the open
    fails, so a failed open leaves the dataset directory as it was.

    ``lmdb.open`` opens the path by name, so a file renamed into place in
    between is not the one a check looked at. The file LMDB opened is
    therefore compared (device and inode, of its own descriptor) with a
    descriptor opened just before it; on a mismatch the open is tried again,
    ``tries`` times in all. That descriptor stays open with the Environment
    (:attr:`EnvHandle.fd`): whatever reads it reads the file LMDB mapped.

    Args:
        path: LMDB directory or data.mdb file.
        max_readers: LMDB's reader table size (a new Environment only).
        check: a tree check, called as ``check(real_path, fd=fd)`` on the file
            LMDB mapped before this returns (:func:`lmdbio.recordindex.check_tree`, passed
            in so this module needs nothing from the index), as every caller that
            lets LMDB's C code move a cursor must: it asserts (kills the process)
            on some damaged pages. None: no check.
        tries: opens before giving up when data.mdb keeps being replaced.

    Raises:
        LmdbFormatError: LMDB refuses the file (damaged meta, wrong version),
            or ``check`` finds a damaged tree.
        AlreadyOpenError: other code in this process (its own ``lmdb.open``, or
            a forked parent's) holds the environment.
        LmdbioError: data.mdb was replaced during every try, or LMDB fails
            otherwise; the message says what to do.
        AccessError: the file or its directory cannot be read.
    """
    real, where, subdir = real_location(path)
    key = (os.getpid(), where, subdir)
    with _LOCK:
        entry = _ENVS.get(key)
        if entry is None:
            entry = _open_env(real, where, subdir, max_readers, check, tries)
            _ENVS[key] = entry
        elif check and not entry[4]:
            check(real, fd=entry[3])
            entry[4] = True
        entry[2] += 1
        return EnvHandle(entry[0], real, entry[1], key, entry[3])


def _open_env(real: Path, where: str, subdir: bool, max_readers: int, check,
              tries: int) -> list:
    """``[env, locked, 0, fd, checked]``: a new Environment and a descriptor of the file it mapped."""
    import lmdb

    for _ in range(max(1, tries)):
        fd = fmt.open_readonly(real)
        keep = False
        try:
            meta = fmt.read_meta(fd, name=str(real))
            kwargs: dict[str, Any] = dict(
                subdir=subdir, readonly=True, create=False, readahead=True,
                lib_version=1 if meta.format_version == 3 else 0,
                max_readers=max_readers, max_spare_txns=0)
            lock = lock_path(where, subdir)
            existed = os.path.exists(lock)
            before = _open_fds()
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
                    raise AlreadyOpenError(
                        f"{real}: this process already has that LMDB open through other code (its "
                        "own lmdb.open()?); py-lmdb allows one Environment per file per process. "
                        "Close it before making a Reader or Snapshot of the same file, or read "
                        "through lmdbio only", path=str(real)) from exc
                if "ermission" in str(exc):
                    raise AccessError(f"{real}: permission denied opening the LMDB environment "
                                      f"({exc}); check read access to {where}") from exc
                raise lmdb_error(exc, real, "opening the database") from exc
            try:
                same = _lmdb_opened(fd, real, before)
                if same and check:
                    check(real, fd=fd)
            except BaseException:
                env.close()
                raise
            if not same:
                env.close()
                continue   # renamed over between our open and LMDB's: try again
            keep = True
            if not locked:
                _warn_nolock(where)
            return [env, locked, 0, fd, check is not None]
        finally:
            if not keep:
                os.close(fd)
    raise LmdbioError(f"{real} was replaced (another file renamed into its place) while it was "
                      f"being opened, {max(1, tries)} times in a row; LMDB would have read a file "
                      "nobody checked. Wait until whoever replaces it is done, then try again")


def _open_fds() -> dict[int, tuple[int, int]] | None:
    """This process's open descriptors and the file each holds (None without /proc/self/fd).

    Listing the folder opens a descriptor of its own, closed again by the time
    the list is read: numbers that no longer answer ``fstat`` are left out.
    """
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    out = {}
    for name in names:
        try:
            out[int(name)] = _identity(os.fstat(int(name)))
        except (OSError, ValueError):
            pass
    return out


def _lmdb_opened(fd: int, real: Path, before: dict | None) -> bool:
    """Whether the data file LMDB just opened is the file ``fd`` holds.

    LMDB's descriptor is one of those opened since ``before`` (a new number,
    or a number another thread closed and LMDB got) whose file is named
    ``real``, or was, and is now deleted (renamed over). Each of those must be
    ``fd``'s file, and there must be one: a file LMDB opened and someone then
    renamed elsewhere is not found, and the caller tries again. Without /proc,
    the path must still name ``fd``'s file after the open (blind to a file
    swapped out and back in between).
    """
    want = _identity(os.fstat(fd))
    after = _open_fds()
    if before is None or after is None:
        try:
            return _identity(os.stat(real)) == want
        except OSError:
            return False
    seen = False
    for n, ident in sorted(after.items()):
        if before.get(n) == ident:
            continue
        link = f"/proc/self/fd/{n}"
        try:
            name = os.readlink(link)
            st = os.stat(link)
        except OSError:
            continue   # closed meanwhile: not LMDB's, which stays open
        if name.removesuffix(" (deleted)") != str(real) or not stat.S_ISREG(st.st_mode):
            continue
        if _identity(st) != want:
            return False
        seen = True
    return seen


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _already_open(exc: Exception) -> bool:
    return "already open in this process" in str(exc)


def _uses(env) -> int:
    """How many counted uses (:func:`acquire`) of this process hold ``env`` (0: not shared)."""
    with _LOCK:
        return next((e[2] for e in _ENVS.values() if e[0] is env), 0)


def begin_pinned(env, path, retries: int = 20, fd: int | None = None):
    """A read transaction on ``env`` and the meta page of the version it pins: ``(txn, meta)``.

    The meta whose txnid is the transaction's names the version's tree; when
    a writer committed twice between ``begin()`` and reading the metas, try
    again (at most ``retries`` times, then SnapshotError). ``fd``: read the
    metas there (:attr:`EnvHandle.fd`, the file LMDB mapped), not at ``path``.
    """
    import lmdb

    for _ in range(retries):
        try:
            txn = env.begin(buffers=True)
        except lmdb.MapResizedError as exc:
            # A writer in another process grew the data past this environment's map (it opened
            # with a larger map_size). LMDB's answer is set_mapsize(0), which remaps: safe only
            # while no read transaction of this process uses the map, i.e. this is its one use.
            if _uses(env) != 1:
                raise LmdbioError(
                    f"{path}: a writer grew the database past this process's map while another "
                    "reader here holds it open; close the other readers of this file (Reader, "
                    "Snapshot) and open again") from exc
            try:
                env.set_mapsize(0)
            except lmdb.Error as again:
                raise lmdb_error(again, path, "adopting the map size a writer grew") from exc
            continue
        except lmdb.Error as exc:
            raise lmdb_error(exc, path, "beginning a read transaction") from exc
        tid = txn.id()
        found = [m for m in fmt.meta_candidates(path if fd is None else fd, name=str(path))
                 if m.txnid == tid]
        if found:
            return txn, found[0]
        txn.abort()
    raise SnapshotError(f"{path}: could not pin a snapshot in {retries} tries "
                        "(writer too busy); try again")


def entries(env, txn) -> int:
    """Records in the main DB as ``txn`` sees it."""
    return txn.stat(env.open_db(txn=txn))["entries"]


def liblmdb_version() -> str | None:
    """The LMDB library py-lmdb runs (``"0.9.31"``), or None without py-lmdb."""
    try:
        import lmdb
    except ImportError:
        return None
    return ".".join(map(str, lmdb.version()))
