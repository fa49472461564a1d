"""What cached leaf pages cost a cold explicit read on this machine's disk: the microbenchmark
behind the model's DIO reads on the local disk (``Platform.leaf_cut``).

DIO's index pass leaves every leaf page in the node's page cache; a reader's later ``pread``
over them is cut into runs, each read as a request of its own
(:func:`lmdbio.lab.model.mechanisms.leaf_pieces`). Whether that costs time depends on whether
the device serves the pieces side by side. :func:`measure` reads cold regions of a scratch file
of random bytes in ``workdir`` (default ``build/``) once plain and once after preading one page
every :data:`STRIDE_PAGES` (``cached``), alternating the two kinds, with the read's wall time
and, where ``/sys`` counters can be read, its requests and bytes. :func:`load` gives, per
length, the median cached over the median plain time.

``python -m lmdbio.lab.model.leafcut [OUT.csv]`` writes
``data/results/model_calibration/leaf_cut.csv``; ``lmdbio model calibrate`` runs it too
(no root needed).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..paths import REPO

__all__ = ["DEFAULT_CSV", "LENGTHS", "STRIDE_PAGES", "measure", "load", "ratio_at", "main"]

DEFAULT_CSV = REPO / "data" / "results" / "model_calibration" / "leaf_cut.csv"
PAGE = 4096
#: Read lengths: 64 and 256 CIFAR records (a reader's extent at P = 4 and 1), COAL's 4 MiB.
LENGTHS = (256 << 10, 1 << 20, 4 << 20)
#: One cached page every 75 pages: an LMDB leaf page among the 74 one-page values it indexes.
STRIDE_PAGES = 75


def measure(lengths=LENGTHS, repeats: int = 15, workdir=None, stride: int = STRIDE_PAGES) -> list[dict]:
    """Rows ``{length, kind, repeat, offset, pieces, wall_s, requests, bytes}``, one cold read each."""
    from ..bench.cache import write_random_file
    from ..storage.devices import file_device_counters
    from .sharedprobe import cached_pages, pieces, pread_all

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
        write_random_file(path, pos + gap)
        fd = os.open(path, os.O_RDONLY)
        try:
            for rep, L, kind, off in plan:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                if kind == "cached":   # the leaf pages first, as DIO's index pass reads them
                    for p in cached_pages(L, off, stride):
                        os.pread(fd, PAGE, p * PAGE)
                before = file_device_counters(path)
                t0 = time.perf_counter()
                pread_all(fd, off, L)
                wall = time.perf_counter() - t0
                after = file_device_counters(path)
                seen = before is not None and after is not None
                rows.append({"length": L, "kind": kind, "repeat": rep, "offset": off, "stride": stride,
                             "pieces": pieces(L, off, stride) if kind == "cached" else 1, "wall_s": wall,
                             "requests": after["read_ios"] - before["read_ios"] if seen else float("nan"),
                             "bytes": after["read_bytes"] - before["read_bytes"] if seen else float("nan")})
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows


def load(path=DEFAULT_CSV) -> tuple[tuple[int, float, float, float], ...]:
    """``((L, ratio, low, high), ...)``: per length, the median cached time over the median plain
    time, and the range of the repeats' own cached / plain ratios."""
    from lmdbio.errors import ConfigurationError
    from .measured import read_measured

    d = read_measured(path, "leaf-cut measurement", "python -m lmdbio.lab.model.leafcut",
                      ("length", "kind", "repeat", "wall_s"))
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
        raise ConfigurationError(f"{path}: no length has both plain and cached reads")
    return tuple(sorted(out))


def ratio_at(nbytes: float, table) -> float:
    """The measured factor at a read of ``nbytes``: linear in log L between the lengths measured,
    the end's value beyond them."""
    if not table:
        return 1.0
    return float(np.interp(math.log(max(1.0, float(nbytes))), [math.log(t[0]) for t in table],
                           [t[1] for t in table]))


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
