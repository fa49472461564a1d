"""What cached leaf pages cost a cold explicit read on this machine's disk: the microbenchmark
behind the model's DIO reads on the local disk.

DIO's index pass preads every leaf page of the file, and those pages stay
in the node's page cache. A reader's later ``pread`` of its extent runs
over them, and the kernel reads the runs between them as requests of their
own (:func:`lmdbio.lab.model.mechanisms.leaf_pieces` counts them). Whether
the extra requests cost time depends on the device: one readahead pass
submits every piece before the reader waits, so a device that serves
requests side by side reads the pieces together, while a device that
serves one request at a time adds a request's latency per piece.

:func:`measure` writes a scratch file of random bytes (no data set of any
sweep) in ``workdir`` (default: ``build/`` of the repository, on the disk
the sweeps read), and for each read length L, ``repeats`` times, reads
one cold region with one ``pread`` (``plain``) and another after preading
one page every :data:`STRIDE_PAGES` pages of it first (``cached``: an LMDB
leaf page among the one-page values it indexes, as the shared target's
probe does), evicting the file before each. The two kinds alternate, so a
drift of the disk's speed weighs on both. Each row has the read's wall
time and, where the disk's ``/sys`` counters can be read, its requests and
bytes. :func:`load` gives, per length, the median ``cached`` over the median
``plain`` time: the factor the model puts on DIO's leaf-cut reads on the
local disk (``Platform.leaf_cut``).

``python -m lmdbio.lab.model.leafcut [OUT.csv]`` writes
``data/results/model_calibration/leaf_cut.csv``; ``lmdbio model calibrate``
runs it too. Needs no root.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ..paths import REPO

__all__ = ["DEFAULT_CSV", "LENGTHS", "STRIDE_PAGES", "measure", "load", "ratio_at", "main"]

DEFAULT_CSV = REPO / "data" / "results" / "model_calibration" / "leaf_cut.csv"
PAGE = 4096
#: Read lengths: 64 and 256 CIFAR records (a reader's extent at P = 4 and 1), COAL's 4 MiB.
LENGTHS = (256 << 10, 1 << 20, 4 << 20)
#: One cached page every 75 pages: an LMDB leaf page among the 74 one-page values it indexes.
STRIDE_PAGES = 75


def _device_stat(path: Path):
    """``(reads completed, bytes read)`` of the block device holding ``path``, or None."""
    st = os.stat(path)
    try:
        fields = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat").read_text().split()
        return int(fields[0]), int(fields[2]) * 512
    except (OSError, IndexError, ValueError):
        return None


def _pieces(offset: int, length: int, stride: int) -> int:
    """Runs of the read between the pages cached at every ``stride``-th page number."""
    first, last = offset // PAGE, (offset + length - 1) // PAGE
    cached = [p for p in range(first - first % stride, last + 1, stride) if p >= first]
    runs, start = 0, first
    for p in cached + [last + 1]:
        if p > start:
            runs += 1
        start = p + 1
    return runs


def measure(lengths=LENGTHS, repeats: int = 15, workdir=None, stride: int = STRIDE_PAGES) -> list[dict]:
    """Rows ``{length, kind, repeat, offset, pieces, wall_s, requests, bytes}``, one cold read each."""
    if repeats < 1 or not lengths:
        raise ValueError("measure needs at least one length and one repeat")
    root = Path(workdir) if workdir is not None else REPO / "build"
    root.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="leaf-cut-", dir=root))
    gap = 1 << 20
    # Every read its own region (page-aligned, not block-aligned, as LMDB extents are).
    plan, pos = [], 0
    for rep in range(repeats):
        for L in lengths:
            kinds = ("plain", "cached") if rep % 2 == 0 else ("cached", "plain")
            for kind in kinds:
                plan.append((rep, L, kind, pos + 7 * PAGE))
                pos += L + gap
    path = base / "data.bin"
    rows = []
    try:
        with open(path, "wb") as f:
            left = pos + gap
            while left > 0:
                n = min(left, 8 << 20)
                f.write(os.urandom(n))
                left -= n
            f.flush()
            os.fsync(f.fileno())
        fd = os.open(path, os.O_RDONLY)
        try:
            for rep, L, kind, off in plan:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                pieces = 1
                if kind == "cached":
                    first, last = off // PAGE, (off + L - 1) // PAGE
                    for p in range(first - first % stride, last + 1, stride):
                        if p >= first:
                            os.pread(fd, PAGE, p * PAGE)
                    pieces = _pieces(off, L, stride)
                before = _device_stat(path)
                t0 = time.perf_counter()
                got = 0
                while got < L:
                    b = os.pread(fd, L - got, off + got)
                    if not b:
                        break
                    got += len(b)
                wall = time.perf_counter() - t0
                after = _device_stat(path)
                reqs = after[0] - before[0] if before and after else float("nan")
                nbytes = after[1] - before[1] if before and after else float("nan")
                rows.append({"length": L, "kind": kind, "repeat": rep, "offset": off, "stride": stride,
                             "pieces": pieces, "wall_s": wall, "requests": reqs, "bytes": nbytes})
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows


def load(path=DEFAULT_CSV) -> tuple[tuple[int, float, float, float], ...]:
    """``((L, ratio, low, high), ...)``: per length, the median cached time over the median plain
    time, and the range of the repeats' own cached / plain ratios."""
    import pandas as pd

    from lmdbio.errors import ConfigurationError

    f = Path(path)
    if not f.is_absolute():
        f = REPO / f
    if not f.exists():
        raise ConfigurationError(f"leaf-cut measurement {f} not found "
                                 "(python -m lmdbio.lab.model.leafcut writes it)")
    d = pd.read_csv(f)
    if not {"length", "kind", "repeat", "wall_s"} <= set(d.columns) or d.empty:
        raise ConfigurationError(f"{f}: needs rows with columns length, kind, repeat and wall_s")
    out = []
    for L, g in d.groupby("length"):
        plain = g[g["kind"] == "plain"].set_index("repeat")["wall_s"]
        cached = g[g["kind"] == "cached"].set_index("repeat")["wall_s"]
        if plain.empty or cached.empty:
            continue
        pairs = (cached / plain).dropna()
        ratio = float(cached.median() / plain.median())
        out.append((int(L), ratio, float(pairs.min()) if len(pairs) else ratio,
                    float(pairs.max()) if len(pairs) else ratio))
    if not out:
        raise ConfigurationError(f"{f}: no length has both plain and cached reads")
    return tuple(sorted(out))


def ratio_at(nbytes: float, table) -> float:
    """The measured factor at a read of ``nbytes``: linear in log L between the lengths measured,
    the end's value beyond them."""
    if not table:
        return 1.0
    xs = [math.log(t[0]) for t in table]
    ys = [t[1] for t in table]
    x = math.log(max(1.0, float(nbytes)))
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


def main(argv=None) -> int:
    import pandas as pd

    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else DEFAULT_CSV
    d = pd.DataFrame(measure())
    out.parent.mkdir(parents=True, exist_ok=True)
    d.to_csv(out, index=False)
    print(d.groupby(["length", "kind"])[["pieces", "wall_s", "requests", "bytes"]].median().to_string())
    for L, r, lo, hi in load(out):
        print(f"L = {L >> 10} KiB: cached / plain time {r:.2f} (repeats {lo:.2f}-{hi:.2f})")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
