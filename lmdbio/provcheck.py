"""A provenance sidecar checked against its file, leaf by leaf, the check split among ranks (PROV).

:func:`check_share` is :meth:`lmdbio.provenance.Provenance.verify_share`: one
share of the leaf pages read and every node compared with the sidecar's
extents; share 0 also walks the branch pages (:func:`tree_leaves`).
:func:`verify_shares` splits the check among the ranks that hold the same
sidecar and stamps a passed one (:mod:`lmdbio.verified`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from . import format as fmt
from .errors import LmdbFormatError
from .recordindex import pread_pages

__all__ = ["ShareCheck", "check_share", "layout_problem", "tree_leaves", "verify_shares"]

# Leaf pages decoded per numpy batch in a check (memory: psize * batch).
_CHECK_BATCH = 2048


@dataclass(frozen=True)
class ShareCheck:
    """What one share of a sidecar's check against its file covered and cost."""

    part: int
    parts: int
    leaves: int        # leaf pages checked, node by node
    records: int       # records whose extents were compared with their leaf node
    pages: int         # pages read: this share's leaves, plus the branch pages in part 0
    seconds: float


def check_share(prov, fd: int, meta: fmt.MetaInfo, part: int = 0, parts: int = 1) -> ShareCheck:
    """Check share ``part`` of ``parts`` of the sidecar ``prov`` against the file, leaf by leaf.

    The share is the leaves ``k`` with ``k % parts == part``: each such leaf
    page is read (consecutive page numbers in one pread) and must carry its
    own page number and the LEAF flag, hold exactly the sidecar's count of
    records, and give every node's value location (first overflow page, or
    the data inside the leaf) and size exactly as ``prov.extents`` does. Every
    share also checks the sidecar's arrays against ``meta`` and that every
    extent lies in the file (no page read). Part 0 also walks the branch pages
    from ``meta``'s root and requires ``leaf_pgnos`` to be the tree's leaves in
    key order. So the shares of ``parts`` ranks together prove the sidecar
    equals the record index of the file.

    Args:
        fd: the data.mdb, open for reading.
        meta: the meta of the version read (a snapshot's, or ``read_meta``'s).
        part, parts: which share; ``parts=1`` checks everything.
    Returns:
        A :class:`ShareCheck` (what was read, and how long it took).
    Raises:
        StaleProvenanceError: the first record (or leaf) that disagrees, what
            the sidecar says and what the file says, and how to rewrite it.
        LmdbFormatError: a damaged branch page (the file, not the sidecar).
    """
    if parts < 1 or not 0 <= part < parts:
        raise ValueError(f"share {part} of {parts} does not exist; use 0 <= part < parts")
    t0 = time.perf_counter()
    problem = layout_problem(prov, meta)
    if problem:
        raise prov.mismatch(meta, problem)
    offs, sizes = prov.extents(0, prov.n)
    offs, sizes = offs.view(np.int64), sizes.astype(np.int64)
    _check_in_file(prov, fd, meta, offs, sizes)
    pages = 0
    if part == 0:
        pages = _check_leaf_order(prov, fd, meta)
    ks = np.arange(part, len(prov.leaf_pgnos), parts, dtype=np.int64)
    # Read in page order, so leaves that lie back to back cost one pread.
    ks = ks[np.argsort(prov.leaf_pgnos[ks], kind="stable")]
    first: tuple[int, str] | None = None   # (record, problem) with the lowest record
    records = 0
    for b in range(0, len(ks), _CHECK_BATCH):
        kb = ks[b:b + _CHECK_BATCH]
        found = _check_leaves(prov, fd, meta, kb, offs, sizes)
        pages += len(kb)
        records += int((prov.leaf_starts[kb + 1] - prov.leaf_starts[kb]).sum())
        if found is not None and (first is None or found[0] < first[0]):
            first = found
    if first is not None:
        raise prov.mismatch(meta, first[1])
    return ShareCheck(part, parts, len(ks), records, pages, time.perf_counter() - t0)


def _check_leaf_order(prov, fd: int, meta: fmt.MetaInfo) -> int:
    """``prov.leaf_pgnos`` must be the file's leaves in key order (read from its branch pages);
    returns the pages read."""
    tree, pages = tree_leaves(fd, meta)
    ours = prov.leaf_pgnos.astype(np.int64)
    m = min(len(tree), len(ours))
    differ = np.flatnonzero(tree[:m] != ours[:m])
    if len(differ) or len(tree) != len(ours):
        k = int(differ[0]) if len(differ) else m
        say = f"page {int(ours[k])}" if k < len(ours) else "no more leaves"
        truth = f"page {int(tree[k])}" if k < len(tree) else "no more leaves"
        raise prov.mismatch(meta, f"leaf {k} in key order (records from "
                                  f"{int(prov.leaf_starts[min(k, len(ours))])}): the "
                                  f"sidecar says {say}, the file's tree says {truth} "
                                  f"({len(ours)} vs {len(tree)} leaves)")
    return pages


def _check_leaves(prov, fd: int, meta: fmt.MetaInfo, kb: np.ndarray, offs: np.ndarray,
                  sizes: np.ndarray) -> tuple[int, str] | None:
    """Leaves ``kb`` (ascending pages) against the sidecar: the first bad record, or None."""
    ps, hdr = meta.psize, meta.header_size
    pg = prov.leaf_pgnos[kb].astype(np.int64)
    lo = prov.leaf_starts[kb]
    want = prov.leaf_starts[kb + 1] - lo
    bad = (pg < 2) | (pg > meta.last_pgno) | (pg >= meta.file_pages)
    if bad.any():
        j = int(np.argmin(np.where(bad, lo, np.iinfo(np.int64).max)))
        return int(lo[j]), (f"leaf {int(kb[j])} (records from {int(lo[j])}): the sidecar says "
                            f"leaf page {int(pg[j])}, which is not a page of the tree "
                            f"(2..{meta.last_pgno}, file of {meta.file_pages} pages)")
    raw = b"".join(pread_pages(fd, meta, pg))
    leaves = np.frombuffer(raw, dtype=np.uint8).reshape(len(pg), ps)
    try:
        nodes, cnt = fmt.leaf_table(leaves, pg, meta)
    except LmdbFormatError as exc:
        # The sidecar names these pages as leaves; one is not a readable leaf.
        return int(lo.min()), (f"a page the sidecar gives as a leaf of records "
                               f"{int(lo.min())}.. is not a readable leaf page ({exc})")
    bad = cnt != want
    if bad.any():
        j = int(np.argmin(np.where(bad, lo, np.iinfo(np.int64).max)))
        return int(lo[j]), (f"leaf page {int(pg[j])} (leaf {int(kb[j])}): the sidecar says it "
                            f"holds records {int(lo[j])}..{int(lo[j] + want[j]) - 1} "
                            f"({int(want[j])} records), the file says {int(cnt[j])} records")
    slot = np.arange(len(nodes.size), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    rec = np.repeat(lo, cnt) + slot
    page = np.repeat(pg, cnt)
    big = (nodes.flags & fmt.F_BIGDATA) != 0
    where = np.where(big, nodes.ov_pgno * ps + hdr, page * ps + nodes.data_pos)
    bad = (where != offs[rec]) | (nodes.size != sizes[rec])
    if not bad.any():
        return None
    i = int(np.argmin(np.where(bad, rec, np.iinfo(np.int64).max)))
    return int(rec[i]), (f"record {int(rec[i])} (node {int(slot[i])} of leaf page "
                         f"{int(page[i])}): the sidecar says offset {int(offs[rec[i]])} size "
                         f"{int(sizes[rec[i]])}, the file says offset {int(where[i])} size "
                         f"{int(nodes.size[i])}")


def layout_problem(prov, meta: fmt.MetaInfo) -> str | None:
    """What makes ``prov``'s arrays unusable for ``meta``'s version (no page read), or None."""
    mine = (prov.format_version, prov.psize, prov.header_size, prov.txnid, prov.last_pgno)
    theirs = (meta.format_version, meta.psize, meta.header_size, meta.txnid, meta.last_pgno)
    if mine != theirs or prov.n != meta.entries:
        return (f"it describes (format, page size, header, txnid, last page, entries) "
                f"{mine + (prov.n,)}, the file is {theirs + (meta.entries,)}")
    arrays = ("run_start", "run_base", "run_stride", "size_run_start", "size_run_value",
              "size_array", "leaf_pgnos", "leaf_starts")
    for k in arrays:
        a = getattr(prov, k)
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            return f"its {k} is not a 1-D integer array ({a.dtype}, shape {a.shape})"
    n = prov.n

    def runs(start, *others) -> str | None:
        if any(len(o) != len(start) for o in others):
            return "has arrays of different lengths"
        if n and (len(start) == 0 or start[0] != 0 or (np.diff(start) <= 0).any()
                  or start[-1] >= n):
            return f"does not cover records 0..{n - 1} in increasing runs"
        return None

    problem = runs(prov.run_start, prov.run_base, prov.run_stride)
    if problem:
        return f"its offset runs {problem}"
    if prov.size_const < 0:
        if len(prov.size_array):
            if len(prov.size_array) != n:
                return f"its size array has {len(prov.size_array)} entries for {n} records"
        else:
            problem = runs(prov.size_run_start, prov.size_run_value)
            if problem:
                return f"its size runs {problem}"
    ls = prov.leaf_starts
    if (len(ls) != len(prov.leaf_pgnos) + 1 or ls[0] != 0 or ls[-1] != n
            or (np.diff(ls) < 0).any()):
        return (f"its leaf_starts ({len(ls)} entries for {len(prov.leaf_pgnos)} leaves) do not "
                f"rise from 0 to {n} records")
    return None


def _check_in_file(prov, fd: int, meta: fmt.MetaInfo, offs: np.ndarray,
                   sizes: np.ndarray) -> None:
    """Every extent after the two meta pages and inside the file (and the version's pages)."""
    end = min(os.fstat(fd).st_size, (meta.last_pgno + 1) * meta.psize)
    bad = (offs < 2 * meta.psize) | (sizes < 0) | (offs + sizes > end)
    if bad.any():
        i = int(np.argmax(bad))
        raise prov.mismatch(meta, f"record {i}: the sidecar says offset {int(offs[i])} size "
                                  f"{int(sizes[i])}, which lies outside the records' part of "
                                  f"the file (bytes {2 * meta.psize}..{end})")


def tree_leaves(fd: int, meta: fmt.MetaInfo) -> tuple[np.ndarray, int]:
    """The main DB's leaf pages in key order from its branch pages alone; and pages read.

    Bounded like :func:`lmdbio.recordindex.build_index`'s walk (the meta's page
    counts), so a damaged tree is one LmdbFormatError, never a hang.
    """
    if meta.root is None:
        return np.zeros(0, np.int64), 0
    level = np.array([meta.root], dtype=np.int64)
    budget = meta.branch_pages + meta.leaf_pages
    branches = 0
    for _ in range(meta.depth - 1):
        bad = (level < 2) | (level > meta.last_pgno) | (level >= meta.file_pages)
        if bad.any():
            raise fmt.page_error(meta.path, int(level[int(np.argmax(bad))]),
                            f"branch page number is outside the file's pages 2..{meta.last_pgno}")
        branches += len(level)
        if branches > budget:
            raise fmt.page_error(meta.path, meta.root, f"the tree has more than the meta's {budget} "
                                                  "branch+leaf pages (cycle or damaged branch)")
        raw = b"".join(pread_pages(fd, meta, level))
        ps = meta.psize
        level = np.concatenate([fmt.branch_children(raw[i * ps:(i + 1) * ps], meta, pgno)
                                for i, pgno in enumerate(level.tolist())])
        if branches + len(level) > budget:
            raise fmt.page_error(meta.path, meta.root, f"the tree has more than the meta's {budget} "
                                                  "branch+leaf pages (cycle or damaged branch)")
    if branches != meta.branch_pages or len(level) != meta.leaf_pages \
            or len(np.unique(level)) != len(level):
        raise fmt.page_error(meta.path, meta.root, f"the tree has {branches} branch and {len(level)} "
                                              f"leaf pages ({len(np.unique(level))} distinct), the "
                                              f"meta says {meta.branch_pages} and "
                                              f"{meta.leaf_pages} (damaged tree or meta)")
    return level, branches


def verify_shares(comm, prov, fd: int, meta: fmt.MetaInfo,
                  row: dict | None = None, *, trust: bool | None = None,
                  force: bool = False) -> ShareCheck | None:
    """Collective over ``comm``: its ranks split the full check of their sidecars, once.

    Ranks whose sidecars have the same content (digest) form a group. If every
    rank of a group finds a verified stamp of its sidecar, file and meta
    (:mod:`lmdbio.verified`), the group skips the check. Otherwise they split
    its leaves, one share each (:func:`check_share`), so the group
    checks all of it once; a rank with a sidecar of its own (another ``{node}``
    copy) checks all of that one. When every share of a group passed, a stamp
    is written for each file the group read, so the next open of that version
    with that sidecar skips the check. Every rank reaches the same two
    exchanges before anything can raise. Raises StaleProvenanceError on the
    ranks whose share disagrees only: call it inside the Reader's
    ``collective`` so every rank learns of it.

    Args:
        row: setup counters to fill: ``prov_check_s`` (all of it, exchanges
            included), ``prov_check_pages``, ``prov_check_leaves``,
            ``prov_check_share`` (``"part/parts"``, or ``"stamp"`` when the
            stamp stood in for the check), ``prov_stamp`` (``"used"``,
            ``"written"``, ``"not written"`` or ``"off"``) and
            ``prov_stamp_used`` (1 or 0: the numeric form, which summed rows keep).
        trust: use and write stamps; default: unless ``LMDBIO_TRUST_CHECKS=0``.
        force: check even where a stamp exists (and stamp again).
    Returns:
        This rank's :class:`ShareCheck`, or None when the stamp stood in for it.
    """
    import socket

    from .verified import binding, has_stamp, trust_stamps, write_stamp

    t0 = time.perf_counter()
    trust = trust_stamps() if trust is None else trust
    key = prov.content_digest()
    bound = binding("prov", fd, meta, key)
    mine = (key, bound, trust and not force and has_stamp(bound), socket.gethostname())
    single = comm is None or comm.size == 1
    got = [mine] if single else comm.allgather(mine)
    me = 0 if comm is None else comm.rank
    same = [r for r, g in enumerate(got) if g[0] == key]
    check, stamp = None, "off" if not trust else "used"
    if not all(got[r][2] for r in same):
        try:
            check, err = prov.verify_share(fd, meta, part=same.index(me), parts=len(same)), None
        except Exception as exc:   # joins the exchange below, so no rank is left waiting
            err = exc
        passed = [err is None] if single else comm.allgather(err is None)
        if err is not None:
            raise err
        # Every file the group read passed as much as it does at an open without a stamp
        # (node views or {node} copies split one check), so each gets a stamp: written by
        # the first rank with that file on each host (a cache may be node-local).
        stamp = "written" if all(passed[r] for r in same) else "not written"
        first = next(r for r in same if got[r][1] == bound and got[r][3] == mine[3])
        if trust and stamp == "written" and me == first and write_stamp(bound) is None:
            stamp = "not written"
        stamp = stamp if trust else "off"
    if row is not None:
        row.update(prov_check_s=time.perf_counter() - t0, prov_stamp=stamp,
                   prov_stamp_used=int(check is None),
                   prov_check_pages=check.pages if check else 0,
                   prov_check_leaves=check.leaves if check else 0,
                   prov_check_share=f"{check.part}/{check.parts}" if check else "stamp")
    return check
