"""Verified stamps: a whole-file check paid once per file version, not at every open.

Two checks read every branch and leaf page of a data.mdb: the tree walk
before LMDB's C code is handed a file (:func:`lmdbio.recordindex.check_tree`, kind
``"tree"``) and PROV's full sidecar check (:func:`lmdbio.provenance.verify_shares`,
kind ``"prov"``). On a slow file system each costs about an index pass, which
Caffe's reader never pays. After one passes, a stamp goes to the user's cache
(``$LMDBIO_CACHE``, else ``~/.cache/lmdbio``) under ``{kind}-verified/``. It
binds, and a later open skips the check only when all are the same:

- what was checked: the kind, and for PROV the sidecar's content (its sha256
  digest: an edited or forged sidecar has another one);
- the data file, by ``fstat`` of the open descriptor: device, inode, size,
  mtime and ctime in ns (no user can set ctime, so a rewritten, truncated or
  touched file never matches);
- the version read: the meta's txnid, last page, root page and page size.

A stamp that is missing, unreadable or garbage is no stamp (the check runs).
``LMDBIO_TRUST_CHECKS=0`` never uses one. The stamps are only as trustworthy as
the folder they sit in, so a stamp counts only when its ``{kind}-verified/``
folder and the stamp file are this user's own (``os.getuid()``), are not
symbolic links, and are not writable by group or others: anyone else who can
write there could plant a stamp for a forged sidecar. The folder is made
0700 and the files 0600; a folder that fails these tests is named in one
warning and its stamps are ignored (never written either). What a stamp
cannot see: a page changed in place without moving ctime (a failing disk).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path

__all__ = ["TRUST_ENV", "cache_dir", "trust_stamps", "binding", "stamp_path", "has_stamp",
           "write_stamp", "unsafe"]

log = logging.getLogger("lmdbio")

#: Set to ``0`` (or ``no``/``false``) to run every check at every open.
TRUST_ENV = "LMDBIO_TRUST_CHECKS"
# A stamp of another schema is no stamp: the number names what the checks cover (the tree
# walk refuses named sub-databases).
_SCHEMA = 2
_WARNED: set = set()


def cache_dir() -> Path:
    """The user's lmdbio cache: ``$LMDBIO_CACHE`` if set, else ``~/.cache/lmdbio``."""
    return Path(os.environ.get("LMDBIO_CACHE") or Path.home() / ".cache" / "lmdbio")


def trust_stamps() -> bool:
    """False when ``LMDBIO_TRUST_CHECKS`` is ``0``/``no``/``false``: every open checks."""
    return os.environ.get(TRUST_ENV, "1").strip().lower() not in ("0", "no", "false")


def binding(kind: str, fd: int, meta, digest: str = "") -> dict:
    """What a stamp vouches for: the check, the open file's identity, the meta read."""
    st = os.fstat(fd)
    return {"schema": _SCHEMA, "kind": kind, "digest": digest,
            "file": {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size,
                     "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns},
            "meta": {"txnid": meta.txnid, "last_pgno": meta.last_pgno, "root": meta.root,
                     "psize": meta.psize}}


def stamp_path(bound: dict) -> Path:
    """Where the stamp of ``bound`` lives (named by a hash of it)."""
    name = hashlib.sha256(json.dumps(bound, sort_keys=True).encode()).hexdigest()[:40]
    return cache_dir() / f"{bound['kind']}-verified" / f"{name}.json"


def unsafe(st: os.stat_result) -> str:
    """Why a stamp folder or file with this ``lstat`` may not be trusted ("" when it may)."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if st.st_uid != os.getuid():
        return f"it belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or others may write it (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def _folder_ok(folder: Path) -> bool:
    """Whether stamps in ``folder`` may be used (or written); warns once per folder when not."""
    try:
        why = unsafe(os.lstat(folder))
        if not why and not stat.S_ISDIR(os.lstat(folder).st_mode):
            why = "it is not a directory"
    except FileNotFoundError:
        return True   # nothing there yet: write_stamp makes it, private
    except OSError as exc:
        why = f"it cannot be inspected ({exc})"
    if why and str(folder) not in _WARNED:
        _WARNED.add(str(folder))
        log.warning("lmdbio: ignoring the verified stamps in %s: %s, so anyone else could plant "
                    "one; every check runs in full. Make it this user's own with mode 0700 "
                    "(or remove it, or point LMDBIO_CACHE at a private folder)", folder, why)
    return not why


def has_stamp(bound: dict) -> bool:
    """Whether a trusted stamp of exactly ``bound`` exists.

    An unreadable or garbage stamp does not count, nor does one in a folder,
    or in a file, that is a symbolic link, is not this user's, or that group
    or others may write.
    """
    path = stamp_path(bound)
    if not _folder_ok(path.parent):
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if unsafe(st) or not stat.S_ISREG(st.st_mode):
            return False
        with os.fdopen(fd, encoding="utf-8") as f:
            fd = -1
            return json.load(f) == bound
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    finally:
        if fd >= 0:
            os.close(fd)


def write_stamp(bound: dict) -> Path | None:
    """Record that the check of ``bound`` passed (atomic, mode 0600).

    A cache that cannot be written costs only the next open's check: logged, not raised.
    """
    path = stamp_path(bound)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _folder_ok(path.parent):
            return None   # a stamp there would not be used (and others could replace it)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(bound, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("lmdbio: could not record a passed %s check in %s (%s); the next open "
                    "checks again", bound["kind"], path.parent, exc)
        try:
            tmp.unlink()
        except OSError:
            pass
        return None
    return path
