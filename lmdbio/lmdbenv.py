"""Every py-lmdb call lmdbio makes: environments, snapshots, cursor walks, error translation.

Environments: one per real file per process, shared and counted.

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

import numpy as np

from . import format as fmt
from .errors import AccessError, DatasetError, LmdbFormatError, LmdbioError, SnapshotError

__all__ = ["EnvHandle", "acquire", "real_location", "lock_path", "lmdb_error", "begin_pinned",
           "CursorWalker", "RecordWriter", "liblmdb_version"]

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

    env: object
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


def acquire(path, *, max_readers: int = 126, check=None, tries: int = 5) -> EnvHandle:
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
        LmdbioError: other code in this process (its own ``lmdb.open``) holds
            the environment, data.mdb was replaced during every try, or LMDB
            fails otherwise; the message says what to do.
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
            kwargs = dict(subdir=subdir, readonly=True, create=False, readahead=True,
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
                    raise LmdbioError(
                        f"{real}: this process already has that LMDB open through other code (its "
                        "own lmdb.open()?); py-lmdb allows one Environment per file per process. "
                        "Close it before making a Reader or Snapshot of the same file, or read "
                        "through lmdbio only") from exc
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


class CursorWalker:
    """An LMDB cursor that moves the way Caffe's does: ``next()``, wrapping at the end.

    It knows its record position so a caller can ask to walk to a target
    position; every step is counted. Values are memoryviews into LMDB's map
    (valid while the read transaction lives), so copying them is where the
    page faults happen.
    """

    def __init__(self, env, n: int, path=None):
        import lmdb

        self.env = env
        self.n = n
        if path is None:
            where = Path(env.path())
            path = where / "data.mdb" if where.is_dir() else where
        self.path = path
        self._lmdb_error = lmdb.Error
        self.txn = self.cursor = None
        self.fd = -1   # data.mdb: the size check, DM's read-ahead advice
        try:
            self.txn = env.begin(buffers=True)
            self.cursor = self.txn.cursor()
            found = self.cursor.first()
        except lmdb.Error as exc:
            self.close()
            raise lmdb_error(exc, self.path, "opening a cursor") from exc
        try:
            self.fd = os.open(self.path, os.O_RDONLY)
            self.need = self._snapshot_bytes()
        except BaseException:
            self.close()
            raise
        if not found:
            self.close()
            raise LmdbioError(f"{self.path}: the database has no records")
        self.pos = 0
        self.walked = 0

    def _snapshot_bytes(self) -> int:
        """Bytes of data.mdb this read transaction's pages lie in: (its meta's last page + 1) pages."""
        tid = self.txn.id()
        metas = [m for m in fmt.meta_candidates(self.fd, name=str(self.path)) if m.txnid == tid]
        if metas:
            return (metas[0].last_pgno + 1) * metas[0].psize
        # A writer committed twice since begin(): the newest meta's pages include ours.
        m = fmt.read_meta(self.fd, name=str(self.path))
        return (m.last_pgno + 1) * m.psize

    def check_size(self) -> None:
        """Raise LmdbFormatError if data.mdb shrank below this snapshot's pages.

        Touching a mapped page past the end of a file kills the process with
        SIGBUS, so the mmap readers look before each walk and each copy. A
        truncation between this check and the copy is still fatal (a race
        no user-space check can close); it needs someone truncating a live
        database, which LMDB itself never does.
        """
        size = os.fstat(self.fd).st_size
        if size < self.need:
            raise LmdbFormatError(
                f"{self.path}: the file shrank to {size} bytes while being read; this reader's "
                f"snapshot needs {self.need} bytes. Another process truncated or replaced it: "
                "restore the database, then start the job again")

    def skip_to(self, target: int) -> None:
        """Walk ``next()`` until the cursor is on record ``target`` (mod n)."""
        self.check_size()
        steps = (target - self.pos) % self.n
        nxt, first = self.cursor.next, self.cursor.first
        try:
            for _ in range(steps):
                if not nxt():
                    first()
        except self._lmdb_error as exc:
            raise lmdb_error(exc, self.path, f"walking the cursor to record {target % self.n}") from exc
        self.pos = target % self.n
        self.walked += steps

    def seek_key(self, key: bytes, pos: int) -> None:
        """Position on ``key`` (record ``pos``): a B-tree descent, DM's portable cursor."""
        self.check_size()
        try:
            found = self.cursor.set_key(key)
        except self._lmdb_error as exc:
            raise lmdb_error(exc, self.path, f"seeking key {key!r}") from exc
        if not found:
            raise LmdbioError(f"{self.path}: portable cursor key {key!r} is not in the database "
                              "(the file changed or is damaged)")
        self.pos = pos % self.n

    def take(self, count: int) -> list:
        """The next ``count`` values (walking over them); the cursor ends after the last."""
        self.check_size()
        out = []
        cur = self.cursor
        append, value, nxt, first = out.append, cur.value, cur.next, cur.first
        try:
            for _ in range(count):
                append(value())
                if not nxt():
                    first()
        except self._lmdb_error as exc:
            raise lmdb_error(exc, self.path, f"reading record {(self.pos + len(out)) % self.n}") from exc
        self.pos = (self.pos + count) % self.n
        self.walked += count
        return out

    def step_back(self, count: int) -> None:
        """Walk ``count`` records back with ``prev()`` (wrapping at the start)."""
        self.check_size()
        prev, last = self.cursor.prev, self.cursor.last
        try:
            for _ in range(count):
                if not prev():
                    last()
        except self._lmdb_error as exc:
            raise lmdb_error(exc, self.path, f"stepping back from record {self.pos}") from exc
        self.pos = (self.pos - count) % self.n
        self.walked += count

    def take_runs(self, runs) -> list:
        """Each (first, count) run's values, walking the cursor to it: forward with ``next()``,
        or back with ``prev()`` when the run starts a little behind (an epoch's last batch,
        the next epoch's start), never around the whole file for that."""
        values = []
        for first, count in runs:
            back = (self.pos - first) % self.n
            if 0 < back < self.n // 2:
                self.step_back(back)
            else:
                self.skip_to(first)
            values += self.take(count)
        return values

    def map_base(self, psize: int, header_size: int) -> int | None:
        """The address at which LMDB mapped page 0 of the file, or None if it cannot be told.

        ``env.info()["map_addr"]`` is 0 unless the map is fixed (MDB_FIXEDMAP), so
        take a pointer known to lie in the map: the current key, which lives
        in its leaf page. That page starts at the key's address rounded down
        to the page size (the map is page-aligned) and begins with its own
        page number, so page 0 is ``psize * pgno`` below it.
        """
        import ctypes

        key = self.cursor.key()
        if not len(key):
            return None
        addr = np.frombuffer(key, dtype=np.uint8).ctypes.data
        page = addr - addr % psize
        pgno = int.from_bytes(ctypes.string_at(page, 8), "little")
        flags = int.from_bytes(ctypes.string_at(page + header_size - 6, 2), "little")
        if pgno <= 1 or pgno * psize >= self.need or not flags & 0x02:   # not a leaf page: give up
            return None
        return page - pgno * psize

    def map_address(self, psize: int, header_size: int) -> int | None:
        """Where LMDB mapped page 0: ``env.info()`` when it knows (a fixed map), else :meth:`map_base`."""
        return self.env.info()["map_addr"] or self.map_base(psize, header_size)

    def advise(self, offset: int, length: int) -> None:
        """Ask the kernel to read ``length`` bytes at ``offset`` of data.mdb ahead (WILLNEED)."""
        os.posix_fadvise(self.fd, offset, length, os.POSIX_FADV_WILLNEED)

    def snapshot_id(self) -> tuple[int, int]:
        """``(txnid, entries)`` of this walker's read transaction."""
        return self.txn.id(), entries(self.env, self.txn)

    def txnid(self) -> int:
        return self.txn.id()

    def getter(self):
        """``txn.get`` of this walker's snapshot (values are memoryviews into the map)."""
        return self.txn.get

    def keys_where(self, want: np.ndarray) -> list[bytes]:
        """Keys of the records ``i`` with ``want[i]``, listed by a cursor over every key.

        A cursor listing keys still reads the first page of every overflow
        value (LMDB returns the value with the key): on cold storage that is
        the whole file, so it is a fallback only.
        """
        cur = self.txn.cursor()
        try:
            return [bytes(k) for i, k in enumerate(cur.iternext(keys=True, values=False)) if want[i]]
        finally:
            cur.close()

    def key(self) -> bytes:
        try:
            return bytes(self.cursor.key())
        except self._lmdb_error as exc:
            raise lmdb_error(exc, self.path, "reading the cursor's key") from exc

    def close(self) -> None:
        if self.cursor is not None:
            self.cursor.close()
            self.cursor = None
        if self.txn is not None:
            self.txn.abort()
            self.txn = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def liblmdb_version() -> str | None:
    """The LMDB library py-lmdb runs (``"0.9.31"``), or None without py-lmdb."""
    try:
        import lmdb
    except ImportError:
        return None
    return ".".join(map(str, lmdb.version()))


class RecordWriter:
    """Writes a new database's records, ``commit_every`` per write transaction (as Caffe's
    ``convert_imageset`` does). A full map is a :class:`~lmdbio.errors.DatasetError`.

    Args:
        path: the LMDB directory (created by LMDB if missing).
        map_size: the map's size in bytes (the largest the file may grow to).
        commit_every: records per write transaction.
        lmdb_format: ``"0.9"`` (Caffe's) or ``"1.0"`` (LMDB 1.0's on-disk format).
    """

    def __init__(self, path, map_size: int, commit_every: int, lmdb_format: str = "0.9"):
        import lmdb

        self._full = lmdb.MapFullError
        self.path = str(path)
        self.commit_every = commit_every
        self.env = lmdb.open(self.path, map_size=map_size, subdir=True, meminit=True,
                             lib_version=1 if lmdb_format == "1.0" else 0)
        self.txn = None
        self.in_txn = 0

    def put(self, key: bytes, value: bytes) -> None:
        try:
            if self.txn is None:
                self.txn = self.env.begin(write=True)
            self.txn.put(key, value)
            self.in_txn += 1
            if self.in_txn == self.commit_every:
                self.commit()
        except self._full:
            raise self._map_full() from None

    def commit(self) -> None:
        txn, self.txn, self.in_txn = self.txn, None, 0
        if txn is not None:
            try:
                txn.commit()
            except self._full:
                raise self._map_full() from None

    def _map_full(self) -> DatasetError:
        return DatasetError(f"LMDB map full while writing {self.path}: the size estimate was "
                            "too small")

    def close(self) -> None:
        """Commit what is pending and close the environment."""
        try:
            self.commit()
        finally:
            self.env.close()

    def abort(self) -> None:
        """Drop what is pending (not committed) and close the environment."""
        txn, self.txn = self.txn, None
        try:
            if txn is not None:
                txn.abort()
        finally:
            self.env.close()
