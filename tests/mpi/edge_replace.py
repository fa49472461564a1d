"""Readers opened while same-size damaged copies of data.mdb are renamed into place.

usage: edge_replace.py DB VARIANT OPENS SECONDS   (VARIANT ``acquire``: the open alone)

A thread puts fresh copies of DB's data.mdb in place with ``os.replace``, in
turn an honest copy and one whose last leaf page says it is a branch page
(same size, same meta pages: LMDB's cursor asserts on it when ``next()``
steps onto it, ``IS_LEAF``). The main thread meanwhile opens a Reader
(MPI.COMM_SELF) ``OPENS`` times, or for at most ``SECONDS``, and reads every
record once each time. Prints one line per
outcome kind: ``ok N`` (every record right), ``wrong N`` (a record not the
stored one), ``refused N <first message>`` per LmdbioError type. A crash
(SIGABRT in mdb.c) ends the process by a signal before it prints anything.
"""

import os
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import lmdbio
from lmdbio import format as fmt
from lmdbio.recordindex import build_index, check_tree
from lmdbio.lmdbenv import CursorWalker, acquire

from stored import stored_values

db, variant, opens, seconds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
data = db / "data.mdb"
expected = stored_values(db)
n, B = len(expected), 8

good = db.parent / "good.mdb"
bad = db.parent / "bad.mdb"
shutil.copyfile(data, good)
shutil.copyfile(data, bad)
idx = build_index(db)
pgno = int(idx.leaf_pgnos[-1])
with open(bad, "r+b") as f:   # the leaf's flags word: P_BRANCH instead of P_LEAF
    f.seek(pgno * idx.meta.psize + idx.meta.header_size - 6)
    f.write((fmt.P_BRANCH).to_bytes(2, "little"))

stop = threading.Event()


def swap():
    # A thread, not a process: its renames land while the opening thread has let go of the
    # GIL in py-lmdb's C code, right inside the window between a check and LMDB's own open.
    k = 0
    while not stop.is_set():
        tmp = db / f"swap{k % 2}.tmp"
        shutil.copyfile(bad if k % 2 == 0 else good, tmp)
        os.replace(tmp, data)
        k += 1


swapper = threading.Thread(target=swap, daemon=True)
swapper.start()


def read_all() -> bool:
    """A Reader's one pass over every record: all right?"""
    right = True
    with lmdbio.Reader(str(db), B, MPI.COMM_SELF, variant=variant) as r:
        for t in range(-(-n // B)):
            b = r.read_batch()
            want = np.arange(t * B, (t + 1) * B) % n
            right = right and np.array_equal(b.indices, want) and all(
                bytes(b[j]) == expected[int(want[j])] for j in range(B))
    return right


def walk_all() -> bool:
    """What the walking variants do at open, without the rest of a Reader (so many more opens
    fit in the time): the checked Environment, then a cursor over every record."""
    handle = acquire(db, check=check_tree)
    try:
        walker = CursorWalker(handle.env, n)
        try:
            return [bytes(v) for v in walker.take(n)] == expected
        finally:
            walker.close()
    finally:
        handle.release()


outcomes: dict[str, list] = {}
deadline = time.monotonic() + seconds
try:
    for i in range(opens):
        if time.monotonic() > deadline:
            break
        try:
            right = read_all() if variant != "acquire" else walk_all()
            outcomes.setdefault("ok" if right else "wrong", []).append(i)
        except lmdbio.LmdbioError as exc:
            outcomes.setdefault(f"refused {type(exc).__name__}", []).append(" ".join(str(exc).split()))
finally:
    stop.set()
    swapper.join()
    shutil.copyfile(good, data)
for kind, items in sorted(outcomes.items()):
    first = f" {items[0]}" if kind.startswith("refused") else ""
    print(f"{kind} {len(items)}{first}", flush=True)
