"""Inspecting an LMDB file with our own parser: ``lmdbio info`` and ``lmdbio dump``.

Kept apart from :mod:`lmdbio.recordindex` so the index does not depend on the
provenance module (provenance builds on the index, inspection on both).
"""

from __future__ import annotations

import os
from typing import TextIO

import numpy as np

from . import format as fmt
from .errors import LmdbFormatError
from .recordindex import build_index
from .provenance import provenance_status

__all__ = ["describe", "dump"]


def describe(path) -> dict:
    """Facts about an LMDB file for ``lmdbio info`` (our parser only; walks the tree to check it)."""
    f = fmt.db_file(path)
    meta = fmt.read_meta(f)
    index = build_index(f)
    used = meta.branch_pages + meta.leaf_pages + meta.overflow_pages
    return {
        "path": str(f),
        "format": meta.format_name,
        "data_version": meta.format_version,
        "page_size": meta.psize,
        "page_header_bytes": meta.header_size,
        "entries": meta.entries,
        "depth": meta.depth,
        "pages": {"meta": 2, "branch": meta.branch_pages, "leaf": meta.leaf_pages,
                  "overflow": meta.overflow_pages,
                  "free_or_other_db": meta.last_pgno + 1 - 2 - used,
                  "last_pgno": meta.last_pgno, "in_file": meta.file_pages},
        "pages_read_to_index": index.pages_read,
        "values_inline": int((~index.overflow).sum()),
        "value_bytes": int(index.sizes.sum(dtype=np.uint64)),
        "txnid": meta.txnid,
        "file_size": meta.file_size,
        "mapsize": meta.mapsize,
        "provenance": provenance_status(f),
    }


_DB_FLAG_NAMES = ((0x02, "reversekey"), (0x04, "dupsort"), (0x08, "integerkey"),
                  (0x10, "dupfixed"), (0x20, "integerdup"), (0x40, "reversedup"))


def dump(path, stream: TextIO) -> None:
    """Write the main DB in ``mdb_dump``'s bytevalue format, using only our parser."""
    f = fmt.db_file(path)
    index = build_index(f)
    meta = index.meta
    head = ["VERSION=3", "format=bytevalue", "type=btree", f"mapsize={meta.mapsize}",
            "maxreaders=126"]
    head += [f"{name}=1" for bit, name in _DB_FLAG_NAMES if meta.db_flags & bit]
    head += [f"db_pagesize={meta.psize}", "HEADER=END"]
    stream.write("\n".join(head) + "\n")
    fd = fmt.open_readonly(f)
    try:
        per = 256
        for s in range(0, len(index), per):
            keys = index.keys(s, s + per)
            lines = []
            for j, key in enumerate(keys):
                off, size = int(index.offsets[s + j]), int(index.sizes[s + j])
                value = os.pread(fd, size, off)
                if len(value) != size:
                    raise LmdbFormatError(f"{f}: record {s + j}: file ends inside the value "
                                          f"({size} bytes at offset {off}); the file is truncated")
                lines.append(f" {key.hex()}\n {value.hex()}\n")
            stream.write("".join(lines))
    finally:
        os.close(fd)
    stream.write("DATA=END\n")
