"""LMDB pages read and decoded: headers checked, branch children, leaf node tables in bulk.

Pure functions over bytes, plus :func:`read_page` / :func:`read_pages` that
fetch pages with ``os.pread``. Every problem is one :class:`LmdbFormatError`
naming the file, the page and what is wrong.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from .errors import LmdbFormatError
from .layout import (F_BIGDATA, F_DUPDATA, F_SUBDATA, P_BRANCH, P_DIRTY, P_LEAF, P_LEAF2, P_META,
                     P_OVERFLOW, P_SUBP, LeafNodes, MetaInfo, PageHeader, page_error, past_end)

__all__ = ["pread_exact", "read_page", "read_pages", "page_header", "check_page", "node_pointers",
           "branch_children", "branch_keys", "leaf_table", "leaf_nodes", "leaf_keys",
           "overflow_pages"]


def pread_exact(fd: int, n: int, off: int, path, pgno) -> bytes:
    buf = os.pread(fd, n, off)
    if len(buf) != n:
        raise page_error(path, pgno, f"file ends inside the page (wanted {n} bytes at offset {off}, "
                                f"got {len(buf)}); the file is truncated")
    return buf


def read_page(fd: int, meta: MetaInfo, pgno: int) -> bytes:
    """One page by pread; page numbers are checked against the meta and the file first."""
    if pgno < 2 or pgno > meta.last_pgno:
        raise page_error(meta.path, pgno, f"page number is outside 2..{meta.last_pgno}")
    if pgno >= meta.file_pages:
        raise page_error(meta.path, pgno, past_end(meta))
    return pread_exact(fd, meta.psize, pgno * meta.psize, meta.path, pgno)


def read_pages(fd: int, meta: MetaInfo, pgno: int, count: int) -> bytes:
    """``count`` consecutive pages from ``pgno`` in one pread."""
    last = pgno + count - 1
    if pgno < 2 or last > meta.last_pgno:
        raise page_error(meta.path, pgno, f"pages {pgno}..{last} are outside 2..{meta.last_pgno}")
    if last >= meta.file_pages:
        raise page_error(meta.path, pgno, past_end(meta, last))
    return pread_exact(fd, meta.psize * count, pgno * meta.psize, meta.path, pgno)


def page_header(page: bytes, header_size: int) -> PageHeader:
    """Decode the fixed header of a page (either format)."""
    pgno = struct.unpack_from("<Q", page, 0)[0]
    _pad, flags, lower, upper = struct.unpack_from("<HHHH", page, header_size - 8)
    return PageHeader(pgno, flags, lower, upper)


def check_page(page: bytes, meta: MetaInfo, pgno: int, want_flag: int) -> PageHeader:
    """Header of a branch/leaf page, checked: own pgno, type, lower/upper bounds."""
    h = page_header(page, meta.header_size)
    kind = {P_BRANCH: "branch", P_LEAF: "leaf", P_OVERFLOW: "overflow"}[want_flag]
    if h.pgno != pgno:
        raise page_error(meta.path, pgno, f"page header says pgno {h.pgno} (zeroed or misplaced page)")
    if h.flags & (P_BRANCH | P_LEAF | P_OVERFLOW | P_META | P_LEAF2 | P_SUBP) != want_flag:
        raise page_error(meta.path, pgno, f"expected a {kind} page, flags are {h.flags:#x}")
    if meta.format_version == 1 and h.flags & P_DIRTY:
        raise page_error(meta.path, pgno, f"page has the DIRTY flag ({h.flags:#x}), which a committed "
                                     "page never has")
    if meta.format_version == 3:
        txnid = struct.unpack_from("<Q", page, 8)[0]
        if txnid > meta.txnid:
            # LMDB 1.0 takes such a page for one being written, and refuses it.
            raise page_error(meta.path, pgno, f"page header says txnid {txnid}, newer than the "
                                         f"database's {meta.txnid}")
    if want_flag != P_OVERFLOW:
        base = meta.pagebase
        if (h.lower & 1 or h.lower < meta.header_size - base or h.lower > h.upper
                or h.upper + base > meta.psize):
            raise page_error(meta.path, pgno, f"bad node table bounds lower={h.lower} upper={h.upper}")
    return h


def node_pointers(page: bytes, meta: MetaInfo, pgno: int, h: PageHeader) -> np.ndarray:
    """Node start offsets within the page (int64), checked to lie inside the node area."""
    base = meta.pagebase
    n = (h.lower - (meta.header_size - base)) // 2
    ptr = np.frombuffer(page, dtype="<u2", count=n, offset=meta.header_size).astype(np.int64) + base
    if n:
        lo, hi = h.upper + base, meta.psize - 8
        bad = (ptr < lo) | (ptr > hi) | (ptr & 1).astype(bool)
        if bad.any():
            i = int(np.argmax(bad))
            raise page_error(meta.path, pgno, f"node {i} offset {int(ptr[i])} is outside the node area "
                                         f"{lo}..{hi} or odd")
    return ptr


def _u16_fields(page: bytes, ptr: np.ndarray) -> tuple[np.ndarray, ...]:
    words = np.frombuffer(page, dtype="<u2")
    w = ptr // 2
    return (words[w].astype(np.int64), words[w + 1].astype(np.int64),
            words[w + 2].astype(np.int64), words[w + 3].astype(np.int64))


def branch_children(page: bytes, meta: MetaInfo, pgno: int) -> np.ndarray:
    """Child page numbers (int64) of a branch page, in key order."""
    h = check_page(page, meta, pgno, P_BRANCH)
    ptr = node_pointers(page, meta, pgno, h)
    if len(ptr) < 2:
        # LMDB merges a branch page that falls under two keys, and asserts on one it meets.
        raise page_error(meta.path, pgno, f"branch page has {len(ptr)} node(s); every branch page of "
                                     "an LMDB main DB has at least 2")
    lo, hi, fl, ksize = _u16_fields(page, ptr)
    end = ptr + 8 + ksize
    if (end > meta.psize).any():
        i = int(np.argmax(end > meta.psize))
        raise page_error(meta.path, pgno, f"branch node {i} key of {int(ksize[i])} bytes runs past the page end")
    return lo | (hi << 16) | (fl << 32)


def branch_keys(page: bytes, meta: MetaInfo, pgno: int) -> list[bytes]:
    """Separator keys of a branch page (the first is empty)."""
    h = check_page(page, meta, pgno, P_BRANCH)
    ptr = node_pointers(page, meta, pgno, h)
    _, _, _, ksize = _u16_fields(page, ptr)
    return [bytes(page[p + 8:p + 8 + k]) for p, k in zip(ptr.tolist(), ksize.tolist())]


def leaf_table(pages: np.ndarray, pgnos: np.ndarray, meta: MetaInfo) -> tuple[LeafNodes, np.ndarray]:
    """Decode the node tables of many leaf pages at once with numpy.

    Args:
        pages: uint8 array (n_pages, psize), the raw leaf pages.
        pgnos: int64 page numbers the pages were read from.
        meta: the file's meta (format, page size).
    Returns:
        (nodes of all pages concatenated in page order, int64 node count per page).
    Raises:
        LmdbFormatError naming the first bad page: wrong pgno or type, node table
        bounds, node offsets or sizes past the page end, DUPSORT nodes.
    """
    hdr, base, psize = meta.header_size, meta.pagebase, meta.psize
    words = pages.view("<u2")
    upper, counts = _leaf_headers(pages, pgnos, meta)
    total = int(counts.sum())
    page_of = np.repeat(np.arange(pages.shape[0], dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    slot = np.arange(total, dtype=np.int64) - np.repeat(first, counts)
    ptr = words[page_of, hdr // 2 + slot].astype(np.int64) + base
    bad = (ptr < np.repeat(upper, counts) + base) | (ptr > psize - 8) | (ptr & 1).astype(bool)
    if bad.any():
        i = int(np.argmax(bad))
        raise page_error(meta.path, int(pgnos[page_of[i]]), f"node {int(slot[i])} offset {int(ptr[i])} "
                                                        "is outside the node area or odd")
    flat = words.reshape(-1)
    w = page_of * (psize // 2) + ptr // 2
    lo, hi, fl, ksize = (flat[w].astype(np.int64), flat[w + 1].astype(np.int64),
                         flat[w + 2].astype(np.int64), flat[w + 3].astype(np.int64))
    size = lo | (hi << 16)
    kend = ptr + 8 + ksize
    data_pos = kend + (kend & 1) if meta.format_version == 3 else kend
    if (fl & F_DUPDATA).any():
        i = int(np.argmax((fl & F_DUPDATA) != 0))
        raise page_error(meta.path, int(pgnos[page_of[i]]), "DUPSORT node in the main DB; lmdbio reads "
                                                        "plain key/value databases only")
    if (fl & F_SUBDATA).any():
        raise _subdatabases(pages, page_of, ptr, ksize, fl, pgnos, meta)
    big = (fl & F_BIGDATA) != 0
    field = np.where(big, 8 if meta.format_version == 1 else 24, size)
    bad = data_pos + field > psize
    if bad.any():
        i = int(np.argmax(bad))
        raise page_error(meta.path, int(pgnos[page_of[i]]),
                    f"leaf node {int(slot[i])} (key {int(ksize[i])} bytes, data {int(field[i])} "
                    f"bytes at {int(data_pos[i])}) runs past the page end")
    ov = _overflow_starts(pages, pgnos, meta, page_of, slot, data_pos, big)
    return LeafNodes(ptr, ksize, fl, size, data_pos, ov), counts


def _leaf_headers(pages: np.ndarray, pgnos: np.ndarray, meta: MetaInfo) -> tuple[np.ndarray, np.ndarray]:
    """Each leaf page's header checked (own pgno, LEAF, no DIRTY or newer txnid, node table
    bounds, at least one node); returns (``upper`` per page, node count per page)."""
    hdr, base, psize = meta.header_size, meta.pagebase, meta.psize
    words = pages.view("<u2")
    own = np.ascontiguousarray(pages[:, :8]).view("<u8").ravel()
    flags, lower, upper = (words[:, (hdr - 6) // 2].astype(np.int64),
                           words[:, (hdr - 4) // 2].astype(np.int64),
                           words[:, (hdr - 2) // 2].astype(np.int64))
    kinds = flags & (P_BRANCH | P_LEAF | P_OVERFLOW | P_META | P_LEAF2 | P_SUBP)
    bad = own != pgnos.astype(np.uint64)
    if bad.any():
        i = int(np.argmax(bad))
        raise page_error(meta.path, int(pgnos[i]), f"page header says pgno {int(own[i])} "
                                               "(zeroed or misplaced page)")
    bad = kinds != P_LEAF
    if bad.any():
        i = int(np.argmax(bad))
        raise page_error(meta.path, int(pgnos[i]), f"expected a leaf page, flags are {int(flags[i]):#x}")
    if meta.format_version == 1:
        bad = (flags & P_DIRTY) != 0
        if bad.any():
            i = int(np.argmax(bad))
            raise page_error(meta.path, int(pgnos[i]), f"page has the DIRTY flag ({int(flags[i]):#x}), "
                                                   "which a committed page never has")
    if meta.format_version == 3:
        txnids = np.ascontiguousarray(pages[:, 8:16]).view("<u8").ravel()
        bad = txnids > meta.txnid
        if bad.any():
            i = int(np.argmax(bad))
            raise page_error(meta.path, int(pgnos[i]), f"page header says txnid {int(txnids[i])}, newer "
                                                   f"than the database's {meta.txnid}")
    bad = (lower & 1).astype(bool) | (lower < hdr - base) | (lower > upper) | (upper + base > psize)
    if bad.any():
        i = int(np.argmax(bad))
        raise page_error(meta.path, int(pgnos[i]), f"bad node table bounds lower={int(lower[i])} "
                                               f"upper={int(upper[i])}")
    counts = (lower - (hdr - base)) // 2
    bad = counts == 0
    if bad.any():
        # LMDB never keeps an empty leaf in a tree (an empty DB has no root), and its
        # cursor would read node 0 of one anyway.
        raise page_error(meta.path, int(pgnos[int(np.argmax(bad))]), "leaf page has no nodes")
    return upper, counts


def _overflow_starts(pages: np.ndarray, pgnos: np.ndarray, meta: MetaInfo, page_of: np.ndarray,
                     slot: np.ndarray, data_pos: np.ndarray, big: np.ndarray) -> np.ndarray:
    """The first overflow page of each BIGDATA node (-1 elsewhere), checked to be a tree page."""
    ov = np.full(len(big), -1, dtype=np.int64)
    if big.any():
        at = page_of[big] * meta.psize + data_pos[big]
        raw = pages.reshape(-1)[at[:, None] + np.arange(8)]
        pg = np.ascontiguousarray(raw).view("<u8").ravel()
        bad = (pg < 2) | (pg > meta.last_pgno)
        if bad.any():
            i = int(np.flatnonzero(big)[np.argmax(bad)])
            raise page_error(meta.path, int(pgnos[page_of[i]]),
                        f"leaf node {int(slot[i])}: overflow value at page {int(pg[np.argmax(bad)])} "
                        f"is outside 2..{meta.last_pgno}")
        ov[big] = pg.astype(np.int64)
    return ov


def _subdatabases(pages, page_of, ptr, ksize, fl, pgnos, meta) -> LmdbFormatError:
    """The error for a main DB that holds named sub-databases (nodes flagged SUBDATA).

    Such a node's value is the sub-database's 48-byte descriptor, not a record:
    reading it as one would deliver the descriptor. A main DB with both plain
    records and named sub-databases is refused too: which of them are "the
    dataset" is not ours to guess.
    """
    sub = np.flatnonzero((fl & F_SUBDATA) != 0)
    flat = pages.reshape(-1)
    psize = pages.shape[1]
    names = []
    for i in sub[:8].tolist():
        at = int(page_of[i]) * psize + int(ptr[i]) + 8
        names.append(bytes(flat[at:at + int(ksize[i])]).decode("utf-8", "backslashreplace"))
    more = f" and {len(sub) - len(names)} more" if len(sub) > len(names) else ""
    plain = len(fl) - len(sub)
    also = (f"; the same leaf pages also hold {plain} plain record(s), refused with them"
            if plain else "")
    return page_error(meta.path, int(pgnos[page_of[sub[0]]]),
                 f"the main database holds named sub-database(s) "
                 f"{', '.join(map(repr, names))}{more}{also}. lmdbio reads the records of the "
                 "main (unnamed) database only, and would deliver each sub-database's 48-byte "
                 "descriptor as a record. Write the records into the main database (py-lmdb: "
                 "txn.put(key, value) without db=, as Caffe's convert_imageset does), or copy "
                 "the named database's records into the main database of a new file")


def leaf_nodes(page: bytes, meta: MetaInfo, pgno: int) -> LeafNodes:
    """Decode one leaf page's node table (see :func:`leaf_table`)."""
    arr = np.frombuffer(page, dtype=np.uint8).reshape(1, -1)
    nodes, _ = leaf_table(arr, np.array([pgno], dtype=np.int64), meta)
    return nodes


def leaf_keys(page: bytes, nodes: LeafNodes, start: int = 0, stop: int | None = None) -> list[bytes]:
    """Keys of nodes [start, stop) of a decoded leaf page."""
    pos = nodes.pos[start:stop].tolist()
    ks = nodes.ksize[start:stop].tolist()
    return [bytes(page[p + 8:p + 8 + k]) for p, k in zip(pos, ks)]


def overflow_pages(size, header_size: int, psize: int):
    """Pages an overflow value of ``size`` bytes occupies (LMDB's OVPAGES); works on arrays."""
    return (header_size - 1 + size) // psize + 1
