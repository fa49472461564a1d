"""Requests per explicit read, measured: what one cold ``pread`` of L bytes asks storage for.

The scale model needs how many requests (and bytes) the kernel sends for
an explicit read of ``L`` bytes. Rather than assume ``ceil(L / request)``,
:func:`measure` mounts an lmdbio.lab.pfs file system (the gpfs-2017 profile, one
node), evicts the node's cache, reads ``L`` bytes with one ``preadv`` at a
page-aligned offset that is not block-aligned (as LMDB extents are), and
takes the daemon's request and byte counters before and after. The
difference from ``ceil(L / request)`` is ``e``, the extra requests (the
kernel's readahead window around the read, split requests at block ends).

The ``mmap`` rows fault every page of a cold 4 MiB region in order (a walk
that reads the values): a check of the model's one read-around window per
fault (:func:`lmdbio.lab.model.mechanisms.mmap_requests`); :func:`load_curve`
reads the ``pread`` rows only.

``python -m lmdbio.lab.model.requests [OUT.csv]`` writes
``data/results/model_calibration/requests_per_read.csv`` (one row per read);
:func:`load_curve` turns it into the curve :func:`curve_requests` reads.
"""

from __future__ import annotations

import math
import mmap
import os
import sys
import tempfile
from pathlib import Path

from ..paths import REPO

__all__ = ["LENGTHS", "DEFAULT_CSV", "measure", "load_curve", "curve_requests"]

DEFAULT_CSV = REPO / "data" / "results" / "model_calibration" / "requests_per_read.csv"
#: Read lengths: a few pages, one GPFS block, a CIFAR group of 64 and 256 records, 4 MiB (COAL).
LENGTHS = (16 << 10, 256 << 10, 262144 + 4096 * 3, 790528, 1 << 20, 2 << 20, 4 << 20)
PROFILE = "gpfs-2017"
#: The kernel's cap on one buffered read request without a larger readahead window (io_pages).
IO_PAGES = 128 << 10
#: Bytes of the cold region whose pages are faulted in order (the mmap rows).
FAULT_REGION = 4 << 20


def measure(lengths=LENGTHS, repeats: int = 5, workdir=None, profile: str = PROFILE):
    """Rows ``{length, repeat, offset, requests, bytes, ...}``: one cold read each through a pfs mount.

    Raises :class:`lmdbio.lab.pfs.mount.FuseUnavailable` where FUSE is missing.
    """
    from ..bench.cache import write_random_file
    from ..pfs.model import load_profile
    from ..pfs.mount import check_fuse, mounted

    check_fuse()
    prof = load_profile(profile)
    span = 8 << 20                       # each read in its own 8 MiB region: no overlap
    n = (len(lengths) + 1) * repeats
    base = Path(tempfile.mkdtemp(prefix="requests-per-read-", dir=workdir))
    src = base / "src"
    src.mkdir()
    try:
        write_random_file(src / "data.bin", n * span, seed=3)
        rows = []
        cap = _request_cap(prof)

        def row(kind, L, rep, off, c0, c1, ideal):
            req = c1["requests"] - c0["requests"]
            rows.append({"kind": kind, "profile": profile, "time_scale": prof.time_scale,
                         "read_size": prof.read_size, "readahead": prof.readahead, "request_cap": cap,
                         "length": L, "repeat": rep, "offset": off, "requests": req,
                         "bytes": c1["bytes"] - c0["bytes"], "ceil_l_over_request": ideal,
                         "e": req - ideal})
        with mounted(src, profile=profile, nodes=1, time_scale=prof.time_scale) as m:
            fd = os.open(m.path(0, "data.bin"), os.O_RDONLY)
            try:
                i = 0
                for rep in range(repeats):
                    for L in lengths:
                        # Page-aligned, not block-aligned: 7 pages into the region.
                        off = i * span + 7 * 4096
                        i += 1
                        m.evict(0, "data.bin")
                        c0 = m.counters()["total"]
                        got = os.preadv(fd, [bytearray(L)], off)
                        c1 = m.counters()["total"]
                        if got != L:
                            raise OSError(f"short read through the pfs mount ({got} of {L} bytes)")
                        row("pread", L, rep, off, c0, c1, math.ceil(L / cap))
                # mmap faults: touch every page of a cold region in order, as a walk that reads
                # the values does; the requests the read-around windows become.
                for rep in range(repeats):
                    off = i * span
                    i += 1
                    m.evict(0, "data.bin")
                    c0 = m.counters()["total"]
                    with mmap.mmap(fd, FAULT_REGION, prot=mmap.PROT_READ, offset=off) as mm:
                        for pg in range(0, FAULT_REGION, 4096):
                            mm[pg]
                    c1 = m.counters()["total"]
                    row("mmap", FAULT_REGION, rep, off, c0, c1,
                        math.ceil(FAULT_REGION / max(4096, prof.readahead)))
            finally:
                os.close(fd)
        return rows
    finally:
        import shutil
        shutil.rmtree(base, ignore_errors=True)


def _request_cap(prof) -> int:
    return min(int(prof.read_size), max(int(prof.readahead), IO_PAGES))


def load_curve(path=DEFAULT_CSV) -> tuple[tuple[int, float, float], ...]:
    """``((L, requests, bytes), ...)``: medians per read length of ``requests_per_read.csv``."""
    from .measured import read_measured

    d = read_measured(path, "requests-per-read curve", "python -m lmdbio.lab.model.requests",
                      ("length", "requests", "bytes"))
    if "kind" in d.columns:
        d = d[d["kind"] == "pread"]
    g = d.groupby("length")[["requests", "bytes"]].median().sort_index()
    return tuple((int(L), float(r["requests"]), float(r["bytes"])) for L, r in g.iterrows())


def curve_requests(nbytes: float, request: int, curve) -> tuple[float, float]:
    """``(requests, bytes)`` one cold explicit read of ``nbytes`` sends, from the measured curve.

    ``requests = ceil(L / request) + e(L)`` and ``bytes = L x b(L)``, with
    ``e`` and ``b`` (bytes read per byte asked) linear in L between the
    measured lengths and held at the nearest measured length outside them.
    """
    L = max(1.0, float(nbytes))
    pts = [(x, r - math.ceil(x / request), b / x) for x, r, b in curve]
    if L <= pts[0][0]:
        e, b = pts[0][1], pts[0][2]
    elif L >= pts[-1][0]:
        e, b = pts[-1][1], pts[-1][2]
    else:
        for (x0, e0, b0), (x1, e1, b1) in zip(pts, pts[1:]):
            if x0 <= L <= x1:
                w = (L - x0) / (x1 - x0)
                e, b = e0 + w * (e1 - e0), b0 + w * (b1 - b0)
                break
    return math.ceil(L / request) + e, L * b


def main(argv=None) -> int:
    import pandas as pd

    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else DEFAULT_CSV
    rows = measure()
    out.parent.mkdir(parents=True, exist_ok=True)
    d = pd.DataFrame(rows)
    d.to_csv(out, index=False)
    print(d.groupby(["kind", "length"])[["requests", "bytes", "e"]].median().to_string())
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
