"""Record index of an LMDB main DB: (offset, size) arrays from a branch+leaf walk.

The walk reads branch and leaf pages only, never the overflow pages holding
the values, and is bounded by the meta's page counts and the file size, so a
damaged file gives one :class:`~lmdbio.errors.LmdbFormatError`, never a hang.
:func:`check_tree` is the same walk as a cheap check before LMDB's own C code
is handed a file (the mmap readers). A :class:`Snapshot` holds an LMDB read
transaction so a concurrent writer cannot recycle the pages an index points
to; its py-lmdb calls live in :mod:`lmdbio.lmdbenv`. ``describe`` and
``dump`` live in :mod:`lmdbio.info`, which builds on this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import format as fmt
from . import verified
from .errors import ConfigurationError, LmdbFormatError, SnapshotError

__all__ = ["RecordIndex", "Snapshot", "build_index", "check_tree", "open_snapshot", "pread_pages"]

# Leaf pages decoded per numpy batch: bounds memory (psize * batch) and keeps arrays large.
_LEAF_BATCH = 2048


@dataclass
class RecordIndex:
    """Where every value of the main DB lies in data.mdb, in key (cursor) order."""

    path: Path
    meta: fmt.MetaInfo
    offsets: np.ndarray        # uint64 file offset of each value
    sizes: np.ndarray          # uint32 value sizes
    txnid: int
    pages_read: int            # branch + leaf pages visited
    leaf_pgnos: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    leaf_starts: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))  # record of each leaf, + n

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def overflow(self) -> np.ndarray:
        """Bool per record: the value lives in overflow pages (else inline in its leaf)."""
        return (self.offsets % self.meta.psize) == self.meta.header_size

    def keys(self, start: int = 0, stop: int | None = None) -> list[bytes]:
        """Keys of records [start, stop), read again from their leaf pages."""
        n = len(self)
        start, stop, _ = slice(start, stop).indices(n)
        if start >= stop:
            return []
        first = int(np.searchsorted(self.leaf_starts, start, side="right")) - 1
        last = int(np.searchsorted(self.leaf_starts, stop - 1, side="right")) - 1
        out: list[bytes] = []
        fd = os.open(self.path, os.O_RDONLY)
        try:
            for leaf in range(first, last + 1):
                pgno = int(self.leaf_pgnos[leaf])
                page = fmt.read_page(fd, self.meta, pgno)
                nodes = fmt.leaf_nodes(page, self.meta, pgno)
                base = int(self.leaf_starts[leaf])
                if len(nodes.pos) != int(self.leaf_starts[leaf + 1]) - base:
                    raise SnapshotError(f"{self.path}: leaf page {pgno} changed since the index was "
                                        f"built (txnid {self.txnid}); hold a Snapshot while using it")
                out += fmt.leaf_keys(page, nodes, max(start - base, 0), stop - base)
        finally:
            os.close(fd)
        return out

    def read(self, i: int) -> bytes:
        """Value of record ``i`` by one pread (for tests and tools; readers batch their own)."""
        off, size = int(self.offsets[i]), int(self.sizes[i])
        fd = os.open(self.path, os.O_RDONLY)
        try:
            buf = os.pread(fd, size, off)
        finally:
            os.close(fd)
        if len(buf) != size:
            raise LmdbFormatError(f"{self.path}: record {i}: file ends inside the value "
                                  f"({size} bytes at offset {off})")
        return buf


def _walk(fd: int, meta: fmt.MetaInfo) -> RecordIndex:
    name = meta.path
    if meta.root is None:
        empty = np.zeros(0, np.int64)
        return RecordIndex(Path(name), meta, np.zeros(0, np.uint64), np.zeros(0, np.uint32),
                           meta.txnid, 0, empty, np.zeros(1, np.int64))
    visited: set[int] = set()
    level = np.array([meta.root], dtype=np.int64)
    budget = meta.branch_pages + meta.leaf_pages
    branches = 0
    for depth in range(meta.depth - 1):
        nxt = []
        for pgno in level.tolist():
            if pgno in visited:
                raise fmt.page_error(name, pgno, "page is reached twice (a cycle or shared child)")
            visited.add(pgno)
            if len(visited) > budget:
                raise fmt.page_error(name, pgno, f"walk visits more than the {budget} branch+leaf pages "
                                            "the meta records (cycle or damaged branch)")
            page = fmt.read_page(fd, meta, pgno)
            nxt.append(fmt.branch_children(page, meta, pgno))
            branches += 1
        level = np.concatenate(nxt)
        if len(visited) + len(level) > budget:
            raise fmt.page_error(name, int(level[0]), f"branch pages at depth {depth + 1} point to "
                                                 f"{len(level)} children, more than the meta's "
                                                 f"{budget} branch+leaf pages")
    if branches != meta.branch_pages:
        raise fmt.page_error(name, meta.root, f"walk found {branches} branch pages, meta says "
                                         f"{meta.branch_pages} (damaged tree or meta)")
    leaves = level
    if len(leaves) != meta.leaf_pages:
        raise fmt.page_error(name, meta.root, f"walk found {len(leaves)} leaf pages, meta says "
                                         f"{meta.leaf_pages} (damaged tree or meta)")
    bad = (leaves < 2) | (leaves > meta.last_pgno)
    if bad.any():
        i = int(np.argmax(bad))
        raise fmt.page_error(name, int(leaves[i]), f"leaf page number is outside 2..{meta.last_pgno}")
    bad = leaves >= meta.file_pages
    if bad.any():
        raise fmt.page_error(name, int(leaves[int(np.argmax(bad))]), fmt.past_end(meta))
    dup = np.intersect1d(leaves, np.fromiter(visited, np.int64, len(visited)))
    uniq, seen = np.unique(leaves, return_counts=True)
    if len(dup) or len(uniq) != len(leaves):
        twice = int(dup[0]) if len(dup) else int(uniq[np.argmax(seen > 1)])
        raise fmt.page_error(name, twice, "page is reached twice (a cycle or shared child)")

    psize, hdr = meta.psize, meta.header_size
    offs, sizes, counts = [], [], []
    ov_total = 0
    for b in range(0, len(leaves), _LEAF_BATCH):
        chunk = leaves[b:b + _LEAF_BATCH]
        raw = b"".join(pread_pages(fd, meta, chunk))
        pages = np.frombuffer(raw, dtype=np.uint8).reshape(len(chunk), psize)
        nodes, cnt = fmt.leaf_table(pages, chunk, meta)
        big = (nodes.flags & fmt.F_BIGDATA) != 0
        page_start = np.repeat(chunk, cnt) * psize
        off = np.where(big, nodes.ov_pgno * psize + hdr, page_start + nodes.data_pos)
        if big.any():
            ov, sz = nodes.ov_pgno[big], nodes.size[big]
            npages = fmt.overflow_pages(sz, hdr, psize)
            end = ov + npages - 1
            badov = (ov < 2) | (end > meta.last_pgno) | (end >= meta.file_pages)
            if badov.any():
                j = int(np.argmax(badov))
                pg = int(np.repeat(chunk, cnt)[int(np.flatnonzero(big)[j])])
                where = (f"lies outside 2..{meta.last_pgno}" if end[j] > meta.last_pgno or ov[j] < 2
                         else f"ends past the end of the file ({meta.file_pages} pages of "
                              f"{meta.psize} bytes); the file is truncated")
                raise fmt.page_error(name, pg, f"overflow value at pages {int(ov[j])}..{int(end[j])} "
                                          f"{where}")
            ov_total += int(npages.sum())
        offs.append(off)
        sizes.append(nodes.size)
        counts.append(cnt)
    offsets = np.concatenate(offs).astype(np.uint64)
    size_arr = np.concatenate(sizes)
    counts_arr = np.concatenate(counts)
    if len(offsets) != meta.entries:
        raise fmt.page_error(name, meta.root, f"walk found {len(offsets)} records, meta says "
                                         f"{meta.entries} entries (damaged tree or meta)")
    # LMDB reuses a value's overflow pages in place for a smaller value, so the
    # meta's count may exceed what the sizes need; never the other way round.
    if ov_total > meta.overflow_pages:
        raise fmt.page_error(name, meta.root, f"values use {ov_total} overflow pages, meta says "
                                         f"{meta.overflow_pages} (damaged leaf or meta)")
    starts = np.zeros(len(leaves) + 1, np.int64)
    np.cumsum(counts_arr, out=starts[1:])
    return RecordIndex(Path(name), meta, offsets, size_arr.astype(np.uint32), meta.txnid,
                       branches + len(leaves), leaves, starts)


def pread_pages(fd: int, meta: fmt.MetaInfo, pgnos: np.ndarray) -> list[bytes]:
    """Pages by pread, runs of consecutive page numbers in one call."""
    psize = meta.psize
    out = []
    p = pgnos.tolist()
    i = 0
    while i < len(p):
        j = i + 1
        while j < len(p) and p[j] == p[j - 1] + 1 and j - i < 256:
            j += 1
        buf = os.pread(fd, psize * (j - i), p[i] * psize)
        if len(buf) != psize * (j - i):
            raise fmt.page_error(meta.path, p[i], "the file ends inside the page (it shrank while "
                                             "being read); the file is truncated")
        out.append(buf)
        i = j
    return out


def build_index(path, *, snapshot: Snapshot | None = None) -> RecordIndex:
    """Index the main DB of the LMDB at ``path`` (dir or data.mdb) by walking branch and leaf pages.

    Args:
        path: LMDB directory or data.mdb file.
        snapshot: an open :class:`Snapshot` of the same file; the index then
            describes that snapshot's tree, and its pages stay valid while the
            snapshot is open. Without one, the current meta is used, which is
            only safe when no writer is active.
    Returns:
        A :class:`RecordIndex`.
    """
    f = fmt.db_file(path)
    if snapshot is not None:
        if snapshot.closed:
            raise SnapshotError(f"snapshot of {snapshot.path} is closed; open a new one")
        if os.path.realpath(f) != os.path.realpath(snapshot.path):
            raise ConfigurationError(f"snapshot is of {snapshot.path}, not {f}; pass a snapshot "
                                     "of the same file (or none)")
    # A snapshot's own descriptor holds the file its transaction pins, whatever the path names now.
    own = snapshot is None or snapshot.fd < 0
    fd = os.open(f, os.O_RDONLY) if snapshot is None or own else snapshot.fd
    try:
        meta = snapshot.meta if snapshot is not None else fmt.read_meta(fd, name=str(f))
        meta = _with_path(meta, str(f))
        index = _walk(fd, meta)
    finally:
        if own:
            os.close(fd)
    index.path = f
    return index


def check_tree(path, *, retries: int = 20, fd: int | None = None) -> fmt.MetaInfo:
    """Check the whole main DB tree the way :func:`build_index` walks it; returns the meta.

    Call this before handing a file to LMDB's C code: a cursor there trusts
    every page it meets, and asserts (kills the process) on, for example, a
    branch page where a leaf should be, or reads past the file on a damaged
    node. The walk reads the branch and leaf pages only (for a 60,000-record
    cifar10 file, a few hundred pages), bounded by the meta's page counts.

    A pass is remembered per file version (:mod:`lmdbio.verified`): a later
    open of the same, unchanged file skips the walk.

    Without a read transaction a live writer may recycle pages under the
    walk, so a failure is believed only when the meta's txnid did not change
    meanwhile; otherwise the walk is retried on the new version.

    ``fd``: check the file open there (it stays open), not the one ``path``
    names now; :func:`lmdbio.lmdbenv.acquire` passes the file LMDB mapped.

    Raises:
        LmdbFormatError: naming the file, the page and what is wrong.
        SnapshotError: a writer committed during every retry.
    """
    f = fmt.db_file(path) if fd is None else Path(path)
    own = fd is None
    handle = os.open(f, os.O_RDONLY) if fd is None else fd
    try:
        for _ in range(retries + 1):
            meta = fmt.read_meta(handle, name=str(f))
            bound = verified.binding("tree", handle, meta)
            if verified.trust_stamps() and verified.has_stamp(bound):
                return meta   # this file version passed the walk before (lmdbio.verified)
            try:
                _walk(handle, meta)
                if verified.trust_stamps():
                    verified.write_stamp(bound)
                return meta
            except LmdbFormatError as exc:
                # Pages of the tree a meta names are only rewritten after two more commits.
                if fmt.read_meta(handle, name=str(f)).txnid == meta.txnid:
                    raise
                last = exc
        raise SnapshotError(f"{f}: a writer committed during each of {retries + 1} checks of the "
                            f"tree (last problem seen: {last}); try again when it writes less")
    finally:
        if own:
            os.close(handle)


def _with_path(meta: fmt.MetaInfo, path: str) -> fmt.MetaInfo:
    from dataclasses import replace

    return meta if meta.path == path else replace(meta, path=path)


class Snapshot:
    """An LMDB read transaction held open on a data.mdb, pinning one version of its tree.

    While it is open, a concurrent writer cannot recycle the pages of that
    version, so offsets from :func:`build_index` ``(snapshot=...)`` stay valid.
    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, path, *, retries: int = 20):
        from .lmdbenv import acquire, begin_pinned

        self.path = fmt.db_file(path)
        self.closed = False
        self._handle = acquire(self.path)
        self.locked = self._handle.locked
        #: A descriptor of the file LMDB mapped (the Environment's; not to be closed here).
        self.fd = self._handle.fd
        try:
            self._txn, meta = begin_pinned(self._handle.env, self.path, retries, self.fd)
        except BaseException:
            self._handle.release()
            self.closed = True
            raise
        self.txnid = self._txn.id()
        self.meta = fmt.validate_meta(meta)

    @property
    def txn(self):
        """The py-lmdb read transaction holding the snapshot (for tools and tests)."""
        return self._txn

    def check(self, index_or_txnid) -> None:
        """Raise SnapshotError unless the index (or txnid) belongs to this snapshot."""
        tid = index_or_txnid if isinstance(index_or_txnid, int) else index_or_txnid.txnid
        if self.closed:
            raise SnapshotError(f"snapshot of {self.path} is closed; open a new one and rebuild "
                                "the index")
        if tid != self.txnid:
            raise SnapshotError(f"{self.path}: index is of txnid {tid} but the snapshot is txnid "
                                f"{self.txnid}; rebuild it with build_index(path, snapshot=snap)",
                                expected=self.txnid, found=tid)

    def build_index(self) -> RecordIndex:
        """The record index of this snapshot."""
        return build_index(self.path, snapshot=self)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.fd = -1
            try:
                self._txn.abort()
            finally:
                self._handle.release()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"txnid={self.txnid}"
        return f"Snapshot({str(self.path)!r}, {state})"


def open_snapshot(path) -> Snapshot:
    """Open a :class:`Snapshot` of the LMDB at ``path`` (needs the ``lmdb`` package)."""
    return Snapshot(path)

