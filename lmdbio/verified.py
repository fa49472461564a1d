"""Checks that passed, remembered per file version, so a whole-file check is paid once.

Some checks read every branch and leaf page of a data.mdb (the tree check
before LMDB's C code gets a file, :func:`lmdbio.index.check_tree`). On a slow
file system that is the cost of a full index pass at every open, which
Caffe's reader never pays. After such a check passes, a stamp is written to
the user's cache; a later open of the *same file version* finds it and skips
the walk.

A stamp is a file named by a hash of:

- what was checked (``kind``, and an ``extra`` string such as a sidecar's digest);
- the file's identity from ``fstat`` of the open descriptor: device, inode,
  size, mtime and ctime in nanoseconds. A user can set mtime but not ctime,
  and every write, truncation, rename over or ``utime`` moves ctime, so an
  edited or replaced file never matches;
- the meta the check read: txnid, root, last page, page size and entries, so a
  commit by a writer is a new version.

The cache is ``$LMDBIO_CACHE/verified`` (default ``~/.cache/lmdbio/verified``),
one small file per version, mode 0600 in a 0700 folder: only its owner can
plant a stamp. ``LMDBIO_TRUST_CHECKS=0`` turns stamps off (every open checks).
The cache is best effort: an unreadable, garbled or unwritable stamp means
"not checked yet", never an error.

What a stamp cannot see: a page changed in place without moving ctime (a
damaged disk, or a write in the same clock tick as the file's creation).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

__all__ = ["TRUST_ENV", "CACHE_ENV", "cache_dir", "enabled", "stamp_key", "seen", "record"]

#: Set to ``0`` to check every time (no stamp is read or written).
TRUST_ENV = "LMDBIO_TRUST_CHECKS"
#: Where lmdbio caches things; stamps go to its ``verified/`` folder.
CACHE_ENV = "LMDBIO_CACHE"


def cache_dir() -> Path:
    """The folder stamps live in (not created here)."""
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "lmdbio")
    return Path(root) / "verified"


def enabled() -> bool:
    """Whether stamps are used (``LMDBIO_TRUST_CHECKS`` is not ``0``)."""
    return os.environ.get(TRUST_ENV, "1").strip() != "0"


def stamp_key(kind: str, fd: int, meta, extra: str = "") -> str:
    """The stamp name for check ``kind`` of the file open as ``fd`` at version ``meta``."""
    st = os.fstat(fd)
    parts = [kind, extra, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
             meta.txnid, meta.root, meta.last_pgno, meta.psize, meta.entries, meta.format_version]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def seen(kind: str, fd: int, meta, extra: str = "") -> bool:
    """Whether check ``kind`` passed before on exactly this file version."""
    if not enabled():
        return False
    path = cache_dir() / stamp_key(kind, fd, meta, extra)
    try:
        st = path.lstat()
        if not path.is_file() or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return False
        return json.loads(path.read_text()).get("kind") == kind
    except (OSError, ValueError, AttributeError):
        return False


def record(kind: str, fd: int, meta, extra: str = "", **info) -> Path | None:
    """Remember that check ``kind`` passed on this file version; the stamp's path, or None
    when stamps are off or the cache cannot be written (best effort: never raises OSError)."""
    if not enabled():
        return None
    folder = cache_dir()
    path = folder / stamp_key(kind, fd, meta, extra)
    body = {"kind": kind, "file": meta.path, "txnid": meta.txnid, "written": time.time(), **info}
    tmp = folder / f".{path.name}.{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd_out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd_out, "w") as f:
            json.dump(body, f)
        os.replace(tmp, path)
        return path
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return None
