"""Helpers for the format/index tests: small LMDBs written by py-lmdb, truth from its cursor, damage."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import lmdb

LIB = {"0.9": 0, "1.0": 1}
HDR = {"0.9": 16, "1.0": 24}


def make_db(path, items, *, fmt: str = "0.9", commit_every: int | None = None,
            deletes=(), map_size: int = 1 << 28) -> Path:
    """Write ``items`` (key, value) in the given order, committing every ``commit_every``;
    then delete the keys in ``deletes`` (one more transaction)."""
    path = Path(path)
    shutil.rmtree(path, ignore_errors=True)
    env = lmdb.open(str(path), map_size=map_size, lib_version=LIB[fmt])
    try:
        txn = env.begin(write=True)
        for i, (k, v) in enumerate(items, 1):
            txn.put(k, v)
            if commit_every and i % commit_every == 0:
                txn.commit()
                txn = env.begin(write=True)
        txn.commit()
        if deletes:
            with env.begin(write=True) as txn:
                for k in deletes:
                    txn.delete(k)
    finally:
        env.close()
    return path


def lmdb_items(path, fmt: str = "0.9") -> list[tuple[bytes, bytes]]:
    """All records in cursor order, as py-lmdb reads them (the truth)."""
    env = lmdb.open(str(path), readonly=True, lock=False, lib_version=LIB[fmt])
    try:
        with env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor()]
    finally:
        env.close()


def page_size(path) -> int:
    """Page size recorded in a data.mdb's first meta page."""
    with open(path, "rb") as f:
        head = f.read(128)
    for hdr in (16, 24):
        if struct.unpack_from("<I", head, hdr)[0] == 0xBEEFC0DE:
            return struct.unpack_from("<I", head, hdr + 24)[0]
    raise ValueError("not an LMDB file")


def copy_db(src, dst) -> Path:
    """Copy an LMDB dir's data.mdb to a fresh dir; returns the new data.mdb path."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(src) / "data.mdb", dst / "data.mdb")
    return dst / "data.mdb"


def patch(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def read_at(path, offset: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)


def have_mdb_tools() -> bool:
    return shutil.which("mdb_dump") is not None and shutil.which("mdb_load") is not None


def ensure_mdb_tools() -> str | None:
    """Install Debian's lmdb-utils when missing and we are root; returns a skip reason or None."""
    if have_mdb_tools():
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "mdb_dump/mdb_load missing and cannot install lmdb-utils (not root or no apt-get)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "lmdb-utils"], capture_output=True, env=env)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update"], capture_output=True, env=env)
        r = subprocess.run(["apt-get", "install", "-y", "lmdb-utils"], capture_output=True, env=env)
    if have_mdb_tools():
        return None
    return f"could not install lmdb-utils: {r.stderr.decode(errors='replace')[-300:]}"
