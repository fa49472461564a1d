"""Verified stamps: a whole-file check paid once per file version, not at every open.

Two checks read every branch and leaf page of a data.mdb: the tree walk
before LMDB's C code is handed a file (:func:`lmdbio.index.check_tree`, kind
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
the cache folder: it is made private (0700, files 0600). What a stamp cannot
see: a page changed in place without moving ctime (a failing disk).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

__all__ = ["TRUST_ENV", "cache_dir", "trust_stamps", "binding", "stamp_path", "has_stamp",
           "write_stamp"]

log = logging.getLogger("lmdbio")

#: Set to ``0`` (or ``no``/``false``) to run every check at every open.
TRUST_ENV = "LMDBIO_TRUST_CHECKS"
_SCHEMA = 1


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


def has_stamp(bound: dict) -> bool:
    """Whether a stamp of exactly ``bound`` exists; an unreadable or garbage one does not count."""
    try:
        with open(stamp_path(bound), encoding="utf-8") as f:
            return json.load(f) == bound
    except (OSError, ValueError, UnicodeDecodeError):
        return False


def write_stamp(bound: dict) -> Path | None:
    """Record that the check of ``bound`` passed (atomic, mode 0600).

    A cache that cannot be written costs only the next open's check: logged, not raised.
    """
    path = stamp_path(bound)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
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
