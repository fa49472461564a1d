"""The paper's arithmetic model of PROV: where an append-order writer puts each value, no file read.

:func:`arithmetic_offsets` predicts the file offset of every fixed-size
overflow value from LMDB's page arithmetic alone (reference:
``compute_data_offsets`` in pmodels/lmdbio), for comparing with the truth,
the record index (:func:`lmdbio.recordindex.build_index`) a sidecar holds.
"""

from __future__ import annotations

import numpy as np

__all__ = ["arithmetic_offsets", "model_parameters"]


def _even(x: int) -> int:
    return x + (x & 1)


def model_parameters(*, record_bytes: int, key_bytes: int, psize: int = 4096,
                     header_size: int = 16) -> dict:
    """The paper's provenance numbers for fixed-size overflow records of an append-order writer.

    Returns ``records_per_leaf``, ``keys_per_branch``, ``keys_per_first_branch``
    and ``pages_per_record``, derived from LMDB's node sizes and checked
    against files py-lmdb writes (an appending leaf splits one node before it is
    full; the leftmost branch of a level holds one more, its node 0 has no key).
    """
    nodemax = (((psize - header_size) // 2) & ~1) - 2
    if 8 + key_bytes + record_bytes <= nodemax:
        raise ValueError(f"{record_bytes}-byte values are stored inline (node limit {nodemax}); "
                         "the arithmetic model covers overflow values only")
    if header_size == 16:
        leaf_node = _even(8 + key_bytes + 8) + 2        # key + overflow pgno
    else:
        leaf_node = _even(8 + _even(key_bytes) + 24) + 2  # key + pgno, txnid, page count
    branch_node = _even(8 + key_bytes) + 2
    room = psize - header_size
    return {"records_per_leaf": room // leaf_node - 1,
            # A branch page never fills to the last byte; the leftmost one of a
            # level keeps node 0 with an empty key (10 bytes with its pointer).
            "keys_per_branch": (room - 1) // branch_node,
            "keys_per_first_branch": 1 + (room - 11) // branch_node,
            "pages_per_record": (header_size - 1 + record_bytes) // psize + 1}


def arithmetic_offsets(n_records: int, *, record_bytes: int, psize: int = 4096,
                       header_size: int = 16, key_bytes: int = 8,
                       commit_every: int | None = None, first_leaf_page: int = 2,
                       records_per_leaf: int | None = None, keys_per_branch: int | None = None,
                       pages_per_record: int | None = None) -> np.ndarray:
    """File offsets (uint64) of ``n_records`` fixed-size values as PROV predicts them, no file read.

    Models page allocation of one writer putting keys in ascending order
    (after pmodels/lmdbio ``compute_data_offsets``): each value takes
    ``pages_per_record`` pages; the value that fills a leaf is placed before
    the split's new leaf page, new branch pages and new root; at every
    commit the next transaction copies the root-to-leaf path and writes a
    free-list page, reusing pages freed two transactions earlier from the
    fourth transaction on. Exact for single-transaction writes; with commits
    it drifts where LMDB's free-list reuse differs (measure against an index).
    """
    p = model_parameters(record_bytes=record_bytes, key_bytes=key_bytes, psize=psize,
                         header_size=header_size)
    per_leaf = records_per_leaf or p["records_per_leaf"]
    per_branch = keys_per_branch or p["keys_per_branch"]
    per_first = keys_per_branch or p["keys_per_first_branch"]
    ppr = pages_per_record or p["pages_per_record"]
    pages = np.empty(n_records, np.int64)
    nxt = first_leaf_page + 1
    counts = [0]            # nodes on the rightmost page of each level, leaf level first
    split = [False]         # whether that level has split (its rightmost page is not its first)
    depth = 1
    txn = 1
    freed = []               # pages freed per transaction, newest last
    reusable = 0
    for i in range(n_records):
        if commit_every and i and i % commit_every == 0:
            # New transaction: copy the rightmost path (reusing freed pages when old
            # enough) and write one free-list page for what the last one freed.
            txn += 1
            freed.append(depth)
            if txn >= 4:
                reusable += freed[-3]
            copy = depth + (1 if txn > 2 else 0)
            take = min(reusable, copy)
            reusable -= take
            nxt += copy - take
        pages[i] = nxt
        nxt += ppr
        counts[0] += 1
        if counts[0] > per_leaf:
            counts[0] = 1
            level = 0
            while True:
                nxt += 1 if not reusable else 0
                reusable = max(reusable - 1, 0)
                split[level] = True
                if level + 1 == len(counts):
                    counts.append(2)          # new root over the two pages
                    split.append(False)
                    nxt += 1 if not reusable else 0
                    reusable = max(reusable - 1, 0)
                    depth += 1
                    break
                counts[level + 1] += 1
                if counts[level + 1] <= (per_branch if split[level + 1] else per_first):
                    break
                counts[level + 1] = 1
                level += 1
    return (pages * psize + header_size).astype(np.uint64)
