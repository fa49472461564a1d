"""One snapshot for every rank: the ranks open a database and agree on its version
(:func:`agree_snapshot`), and what tells two files of one txnid apart (:func:`content_digest`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

from . import format as fmt
from .errors import LmdbioError, SnapshotError

__all__ = ["TRIES", "agree_snapshot", "content_digest"]

#: How many times the ranks open again when a writer commits between their opens.
TRIES = 20


def agree_snapshot(comm, open_fn: Callable[[], Any], snapshot_id_fn: Callable[[], Any],
                   close_fn: Callable[[], Any] | None, path, tries: int = TRIES, *,
                   what: str = "the snapshot") -> tuple[int, int] | None:
    """Open ``path`` on the ranks and agree on one version of it. Collective over ``comm``.

    Every rank calls ``open_fn`` (a rank that reads nothing may do nothing), then
    ``snapshot_id_fn``: ``(txnid, entries)`` of what it opened, or None if it opened
    nothing. When the ranks that opened see different versions, a writer committed
    between their opens: every rank calls ``close_fn`` and all open again, up to
    ``tries`` times. Both calls are collective steps, so an error on one rank raises
    on every rank.

    Args:
        comm: a :class:`lmdbio.comm.Comm`.
        close_fn: lets go of what ``open_fn`` opened (local), or None when opening
            holds nothing (e.g. reading the meta page only).
        path: the database, named in the errors.
        what: what the ranks wait for, named when one does not come.

    Returns:
        ``(txnid, entries)`` of the agreed snapshot, or None when no rank opened one.

    Raises:
        SnapshotError: the ranks saw different versions ``tries`` times in a row.
        LmdbioError: the agreed snapshot holds no records.
    """
    for _ in range(tries):
        comm.collective(open_fn)
        ids = comm.allgather_within(comm.collective(snapshot_id_fn), what=what)
        got = {tuple(x) for x in ids if x is not None}
        if len(got) <= 1:
            if not got:
                return None
            txnid, n = got.pop()
            if n == 0:
                if close_fn is not None:
                    close_fn()
                raise LmdbioError(f"{path} holds no records in the snapshot opened; "
                                  "nothing to read")
            return int(txnid), int(n)
        if close_fn is not None:
            close_fn()
        comm.barrier(what=f"{what}'s next try")
    raise SnapshotError(f"{path}: the ranks could not open one snapshot in {tries} tries "
                        "(a writer commits too often); try again",
                        found=sorted(got) if tries else None)


def content_digest(path, txnid: int) -> str | None:
    """A digest of snapshot ``txnid``'s content, beyond its txnid and record count.

    Two files with the same txnid and record count (e.g. one data set built twice with
    other seeds) differ in their pages: this hashes the main DB's root page, its leftmost
    leaf page (and the branch pages between) and that leaf's first overflow page (the
    first record's value where it is large), read with :mod:`lmdbio.format` (one pread a
    page, no LMDB environment). Their page numbers, separator keys and the first records'
    bytes go in, so a twin's digest differs unless those pages are byte for byte the same.

    Returns:
        16 hex digits, or None when no meta page of the file is at ``txnid`` any more (two
        commits since), the main DB is empty, or its pages are of a kind lmdbio's format
        reader refuses (the caller then checks txnid and record count only).
    """
    f = fmt.db_file(path)
    fd = fmt.open_readonly(f)
    try:
        metas = [m for m in fmt.meta_candidates(fd, name=str(f)) if m.txnid == txnid]
        m = metas[0] if metas else None
        if m is None or m.root is None:
            return None
        h = hashlib.sha256(repr((m.entries, m.depth, m.branch_pages, m.leaf_pages,
                                 m.overflow_pages, m.db_flags)).encode())
        pgno = m.root
        for _ in range(max(1, m.depth)):
            page = fmt.read_page(fd, m, pgno)
            h.update(page)
            if fmt.page_header(page, m.header_size).flags & fmt.P_BRANCH:
                pgno = int(fmt.branch_children(page, m, pgno)[0])
                continue
            nodes = fmt.leaf_nodes(page, m, pgno)
            big = nodes.ov_pgno[nodes.ov_pgno >= 0]
            if len(big):
                h.update(fmt.read_page(fd, m, int(big[0])))
            break
        return h.hexdigest()[:16]
    except LmdbioError:
        return None
    finally:
        os.close(fd)
