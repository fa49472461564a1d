"""LMDB's on-disk layout: page and node flags, the two formats, and the decoded meta and pages.

The constants follow LMDB's ``mdb.c`` (``MDB_meta``, ``MDB_page``,
``MDB_node``): format 1 is what LMDB 0.9 writes (16-byte page header), format 3
what LMDB 1.0 writes (24-byte header; node offsets count from the header's end).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import LmdbFormatError

__all__ = ["MAGIC", "P_BRANCH", "P_LEAF", "P_OVERFLOW", "P_META", "P_DIRTY", "P_LEAF2", "P_SUBP",
           "F_BIGDATA", "F_SUBDATA", "F_DUPDATA", "P_INVALID", "MAX_DEPTH", "FORMATS",
           "FORMAT_NAMES", "MetaInfo", "PageHeader", "LeafNodes", "page_error", "past_end"]

MAGIC = 0xBEEFC0DE
P_BRANCH, P_LEAF, P_OVERFLOW, P_META = 0x01, 0x02, 0x04, 0x08
P_DIRTY, P_LEAF2, P_SUBP = 0x10, 0x20, 0x40
F_BIGDATA, F_SUBDATA, F_DUPDATA = 0x01, 0x02, 0x04
P_INVALID = 0xFFFFFFFFFFFFFFFF
# LMDB's cursor stack is 32 deep; no real tree comes close.
MAX_DEPTH = 32

# format_version -> (page header size, PAGEBASE). 0.9 writes data version 1,
# 1.0 writes data version 3 with a 24-byte header (pgno, txnid, pad, flags, lower, upper).
FORMATS = {1: (16, 0), 3: (24, 24)}
FORMAT_NAMES = {1: "0.9", 3: "1.0"}


@dataclass(frozen=True)
class MetaInfo:
    """The current meta page of a data.mdb: format, page size and main DB record."""

    format_version: int      # 1 (LMDB 0.9 files) or 3 (LMDB 1.0 files)
    psize: int
    header_size: int         # page header bytes: 16 (0.9) or 24 (1.0)
    txnid: int
    last_pgno: int
    root: int | None         # root page of the main DB; None when the DB is empty
    depth: int
    entries: int
    branch_pages: int
    leaf_pages: int
    overflow_pages: int
    mapsize: int
    file_size: int
    db_flags: int = 0        # main DB flags (DUPSORT 0x04, INTEGERKEY 0x08, ...)
    meta_page: int = 0       # which meta page (0 or 1) is current
    path: str = ""           # the data.mdb this came from (for error messages)
    free_root: int | None = None  # root page of the free-page DB; None when it is empty
    free_pages: int = 0      # branch + leaf + overflow pages of the free-page DB
    free_flags: int = 0      # free-page DB flags (INTEGERKEY)
    free_depth: int = 0
    db_pad: int = 0          # main DB md_pad (LEAF2 key size; 0 for plain DBs)

    @property
    def format_name(self) -> str:
        """``"0.9"`` or ``"1.0"``."""
        return FORMAT_NAMES[self.format_version]

    @property
    def pagebase(self) -> int:
        """Where node offsets and lower/upper count from: 0 (0.9) or 24 (1.0)."""
        return FORMATS[self.format_version][1]

    @property
    def file_pages(self) -> int:
        return self.file_size // self.psize

    def identity(self) -> dict:
        """The fields that change when the database changes (for staleness checks)."""
        return {"format_version": self.format_version, "psize": self.psize, "txnid": self.txnid,
                "last_pgno": self.last_pgno, "file_size": self.file_size}


@dataclass(frozen=True)
class PageHeader:
    """The fixed header of one page."""

    pgno: int
    flags: int
    lower: int    # for overflow pages: low half of the page count
    upper: int    # for overflow pages: high half of the page count


@dataclass(frozen=True)
class LeafNodes:
    """The node table of one leaf page, decoded into arrays (one entry per node)."""

    pos: np.ndarray        # int64 node start within the page
    ksize: np.ndarray      # int64 key size
    flags: np.ndarray      # int64 node flags
    size: np.ndarray       # int64 value size
    data_pos: np.ndarray   # int64 start of the node's data field within the page
    ov_pgno: np.ndarray    # int64 first overflow page of BIGDATA nodes, -1 elsewhere


def page_error(path, pgno, problem: str) -> LmdbFormatError:
    where = f"page {pgno}" if pgno is not None else "file"
    return LmdbFormatError(f"{path}: {where}: {problem}")


def past_end(meta: MetaInfo, last: int | None = None) -> str:
    """The message for a page the tree uses that lies past the end of the file."""
    what = "the page lies" if last is None else f"page {last} lies"
    return (f"{what} past the end of the file ({meta.file_pages} pages of {meta.psize} bytes); "
            "the file is truncated")
