"""Verified stamps: PROV's full sidecar check paid once per (file version, sidecar).

After every rank of a group has checked a sidecar against its data.mdb
(:func:`lmdbio.provenance.verify_shares`), a stamp is written to the user's
cache (``$LMDBIO_CACHE``, else ``~/.cache/lmdbio``) under ``prov-verified/``.
It binds three things, and a later open may skip the full check only when all
three are the same:

- the sidecar's content (its sha256 digest: an edited or forged sidecar has
  another one);
- the data file, by ``fstat`` of the open descriptor: device, inode, size,
  mtime and ctime in ns (no user can set ctime, so a rewritten or touched
  file never matches);
- the version read: the meta's txnid, last page, root page and page size.

A stamp that is missing, unreadable or garbage is no stamp (the full check
runs). ``LMDBIO_PROV_TRUST=0`` never uses a stamp. The stamps are only as
trustworthy as the cache directory: it is made private (0700, files 0600).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

__all__ = ["cache_dir", "trust_stamps", "binding", "stamp_path", "has_stamp", "write_stamp"]

log = logging.getLogger("lmdbio")

_SCHEMA = 1
_FOLDER = "prov-verified"


def cache_dir() -> Path:
    """The user's lmdbio cache: ``$LMDBIO_CACHE`` if set, else ``~/.cache/lmdbio``."""
    return Path(os.environ.get("LMDBIO_CACHE") or Path.home() / ".cache" / "lmdbio")


def trust_stamps() -> bool:
    """False when ``LMDBIO_PROV_TRUST=0`` (or ``no``/``false``): every open runs the full check."""
    return os.environ.get("LMDBIO_PROV_TRUST", "1").strip().lower() not in ("0", "no", "false")


def binding(digest: str, fd: int, meta) -> dict:
    """What a stamp vouches for: the sidecar's digest, the open file's identity, the meta read."""
    st = os.fstat(fd)
    return {"schema": _SCHEMA, "digest": digest,
            "file": {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size,
                     "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns},
            "meta": {"txnid": meta.txnid, "last_pgno": meta.last_pgno, "root": meta.root,
                     "psize": meta.psize}}


def stamp_path(bound: dict) -> Path:
    """Where the stamp of ``bound`` lives (named by a hash of it)."""
    name = hashlib.sha256(json.dumps(bound, sort_keys=True).encode()).hexdigest()[:40]
    return cache_dir() / _FOLDER / f"{name}.json"


def has_stamp(bound: dict) -> bool:
    """Whether a stamp of exactly ``bound`` exists; an unreadable or garbage one does not count."""
    try:
        with open(stamp_path(bound), encoding="utf-8") as f:
            return json.load(f) == bound
    except (OSError, ValueError, UnicodeDecodeError):
        return False


def write_stamp(bound: dict) -> Path | None:
    """Record that the sidecar and file of ``bound`` passed the full check (atomic, mode 0600).

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
        log.warning("lmdbio: could not record the provenance check in %s (%s); the next open "
                    "checks the sidecar again", path.parent, exc)
        try:
            tmp.unlink()
        except OSError:
            pass
        return None
    return path
