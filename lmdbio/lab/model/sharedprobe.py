"""What the shared target S is asked for: requests per read on a node, measured on a 2-node target.

On the shared storage target (:mod:`lmdbio.lab.storage.shared`) a node's read reaches S only
after the node's page cache, readahead and direct-I/O loop device have shaped it.
:func:`measure` builds a 2-node target over a synthetic file (random bytes, no data set of any
sweep), gives S the profile's budget for :data:`PROBE_RANKS` ranks, and for each measurement
evicts the node's file (and S), reads, waits until no request is in flight, and takes S's and
the node device's counters before and after. The kinds:

- ``pread``: one cold ``preadv`` of L at a page-aligned, not block-aligned offset (one extent:
  DIO, PROV, COAL); ``node`` 1 reads a range node 0 has read (each node has its own cache);
- ``pread-seq``: :data:`SEQ_READS` back-to-back preads of L (a lone reader's batches);
- ``pread-cached``: one page every :data:`STRIDE_PAGES` read first (DIO's index pass), then
  one pread of L over them, cut into ``pieces``;
- ``willneed``: ``posix_fadvise(WILLNEED)`` of L, then a pread of L (DM's speculation);
- ``seq4k``: 4 KiB preads in order over :data:`SEQ4K_BYTES` (readahead's window);
- ``mmap``: K processes fault every page of a cold :data:`FAULT_BYTES` file in order
  (:func:`lmdbio.lab.storage.faulters.measure`).

``python -m lmdbio.lab.model.sharedprobe [OUT_DIR]`` writes ``requests.csv``, ``faulters.csv``
(the ``mmap`` rows), ``queue.csv`` (the devices' sysfs queue limits) and ``meta.json`` to
``data/results/model_calibration/shared``; :func:`load_probe` reads them for the model. Needs
root, loop devices and a blkio (or io) controller.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lmdbio.errors import ConfigurationError
from ..paths import REPO

__all__ = ["DEFAULT_DIR", "LENGTHS", "PROBE_RANKS", "Probe", "measure", "write", "load_probe",
           "cached_pages", "pieces", "pread_all", "main"]

DEFAULT_DIR = REPO / "data" / "results" / "model_calibration" / "shared"
PAGE = 4096
#: Explicit read lengths: a few pages, 16 / 64 / 256 CIFAR records (a reader's extent at P = 64,
#: 16, 4 of the shared sweeps' geometry), the node device's largest request, COAL's 4 MiB.
LENGTHS = (16 << 10, 64 << 10, 256 << 10, 1 << 20, 1280 << 10, 2 << 20, 4 << 20)
SEQ_LENGTHS = (64 << 10, 256 << 10, 1 << 20)
SEQ_READS = 6
CACHED_LENGTHS = (256 << 10, 1 << 20, 4 << 20)
#: One cached page every 75 pages: an LMDB leaf page among the 74 one-page values it indexes.
STRIDE_PAGES = 75
WILLNEED_LENGTHS = (256 << 10, 1 << 20, 4 << 20)
FAULTERS = (1, 2, 4)
FAULT_BYTES = 32 << 20
SEQ4K_BYTES = 4 << 20
#: Each measurement reads its own region of the file (evicted before it).
SPAN = 8 << 20
#: S's budget during the probe: the profile's share for this many ranks.
PROBE_RANKS = 16
NODES = 2
COLUMNS = ("kind", "node", "length", "K", "stride", "repeat", "offset", "calls", "pieces",
           "start_resident", "s_ios", "s_bytes", "s_dev_requests", "s_dev_bytes", "node_ios",
           "node_bytes", "wall_s")
QUEUE_KEYS = ("read_ahead_kb", "max_sectors_kb", "max_hw_sectors_kb", "max_segments",
              "max_segment_size", "logical_block_size")


# --- the measurement (root) -----------------------------------------------------------------

def _sysfs(dev: str, rel: str) -> str:
    try:
        return Path("/sys/block", os.path.basename(dev), rel).read_text().strip()
    except OSError:
        return ""


def _queue(dev: str, role: str) -> dict:
    row = {"role": role, "device": dev, "dio": _sysfs(dev, "loop/dio")}
    for k in QUEUE_KEYS:
        v = _sysfs(dev, f"queue/{k}")
        row[k] = int(v) if v.isdigit() else None
    return row


def _settle(devices, timeout_s: float = 5.0) -> None:
    """Wait until no read is in flight on ``devices`` (async readahead finishes after a read)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        busy = 0
        for d in devices:
            parts = _sysfs(d, "inflight").split()
            busy += sum(int(x) for x in parts if x.isdigit())
        if not busy:
            time.sleep(0.02)
            return
        time.sleep(0.01)


def pread_all(fd: int, offset: int, length: int) -> int:
    """Read ``length`` bytes at ``offset`` with one ``preadv`` (and more only on a short read)."""
    buf = bytearray(length)
    mv = memoryview(buf)
    done = calls = 0
    while done < length:
        got = os.preadv(fd, [mv[done:]], offset + done)
        calls += 1
        if got <= 0:
            raise OSError(f"short read at {offset + done} ({length - done} bytes missing)")
        done += got
    return calls


def cached_pages(length: int, offset: int, stride_pages: int) -> list[int]:
    """The page numbers of a read of ``length`` bytes at ``offset`` that are multiples of
    ``stride_pages``: the pages a leaf-page pass leaves cached in it."""
    first, last = offset // PAGE, (offset + length - 1) // PAGE
    return [p for p in range(first - first % stride_pages, last + 1, stride_pages) if first <= p <= last]


def pieces(length: int, offset: int, stride_pages: int) -> int:
    """Runs a read of ``length`` bytes at ``offset`` is cut into by the cached pages at every
    ``stride_pages``-th page (page numbers that are multiples of it), the cached pages left out."""
    if stride_pages <= 0:
        return 1
    first, last = offset // PAGE, (offset + length - 1) // PAGE
    cached = cached_pages(length, offset, stride_pages)
    runs, prev = 0, first - 1
    for p in cached + [last + 1]:
        if p > prev + 1:
            runs += 1
        prev = p
    return runs


def measure(repeats: int = 3, workdir=None, profile: str = "gpfs-2017", progress: bool = True,
            lengths=LENGTHS, faulter_counts=FAULTERS):
    """Rows (:data:`COLUMNS`), the devices' queue limits, the target's stats and S's budget.

    Raises :class:`lmdbio.lab.storage.throttle.ThrottleUnavailable` where a
    shared target cannot be made.
    """
    from lmdbio.lab import pagecache
    from ..bench.cache import write_random_file
    from ..storage import faulters
    from ..storage.shared import load_shared_profile, shared

    regions = (len(lengths) + 1 + len(SEQ_LENGTHS) + len(CACHED_LENGTHS)
               + len(WILLNEED_LENGTHS) + 1)
    base = Path(tempfile.mkdtemp(prefix="lmdbio-sharedprobe-", dir=workdir))
    src = base / "probe"
    src.mkdir()
    try:
        write_random_file(src / "data.bin", regions * SPAN)
        write_random_file(src / "fault.bin", FAULT_BYTES)
        bps, iops = load_shared_profile(profile, 1.0).limits(PROBE_RANKS)
        rows: list[dict] = []
        with shared(src, nodes=NODES, profile=profile, ranks_per_node=PROBE_RANKS // NODES,
                    time_scale=1.0, workdir=workdir, read_bps=bps, read_iops=iops) as s:
            s.join()
            devs = list(s.devices) + [s.s_device]
            queue = ([_queue(d, f"node{k}") for k, d in enumerate(s.devices)]
                     + [_queue(s.s_device, "S")])
            stats = s.stats()

            def counters(node):
                c = s.counters()
                return {"s_ios": c["s"]["ios"], "s_bytes": c["s"]["bytes"],
                        "s_dev_requests": c["s"]["dev_requests"],
                        "s_dev_bytes": c["s"]["dev_bytes"],
                        "node_ios": c["nodes"][node]["read_ios"],
                        "node_bytes": c["nodes"][node]["read_bytes"]}

            def one(kind, node, rel, length, region, rep, fn, K=1, stride=0, npieces=1):
                path = s.path(node, f"probe/{rel}")
                s.evict(node, f"probe/{rel}")
                res = pagecache.residency(path)
                fd = os.open(path, os.O_RDONLY)
                try:
                    off = region * SPAN + 7 * PAGE if region is not None else 0
                    prep = getattr(fn, "prepare", None)
                    if prep is not None:
                        prep(fd, off)
                        _settle(devs)
                    c0 = counters(node)
                    t0 = time.perf_counter()
                    calls = fn(fd, off)
                    wall = time.perf_counter() - t0
                    _settle(devs)
                    c1 = counters(node)
                finally:
                    os.close(fd)
                row = {"kind": kind, "node": node, "length": length, "K": K, "stride": stride,
                       "repeat": rep, "offset": off, "calls": calls, "pieces": npieces,
                       "start_resident": res, "wall_s": wall,
                       **{k: c1[k] - c0[k] for k in c0}}
                rows.append(row)
                if progress:
                    print(f"[sharedprobe] {kind:12s} node {node} L={length:>8d} K={K} rep {rep}: "
                          f"S {row['s_ios']} ios, {row['s_bytes']} bytes", file=sys.stderr,
                          flush=True)

            for rep in range(repeats):
                region = 0
                for L in lengths:
                    one("pread", 0, "data.bin", L, region, rep,
                        lambda fd, off, L=L: pread_all(fd, off, L))
                    region += 1
                # Node 1 reads what node 0 read (after node 0, without evicting node 0's copy).
                for node in (0, 1):
                    one("pread", node, "data.bin", 1 << 20, region, rep,
                        lambda fd, off: pread_all(fd, off, 1 << 20))
                region += 1
                for L in SEQ_LENGTHS:
                    def seq(fd, off, L=L):
                        return sum(pread_all(fd, off + i * L, L) for i in range(SEQ_READS))
                    one("pread-seq", 0, "data.bin", L, region, rep, seq)
                    region += 1
                for L in CACHED_LENGTHS:
                    def cached(fd, off, L=L):
                        return pread_all(fd, off, L)

                    def warm_leaves(fd, off, L=L):
                        for p in cached_pages(L, off, STRIDE_PAGES):
                            os.pread(fd, PAGE, p * PAGE)
                    cached.prepare = warm_leaves
                    off = region * SPAN + 7 * PAGE
                    one("pread-cached", 0, "data.bin", L, region, rep, cached, stride=STRIDE_PAGES,
                        npieces=pieces(L, off, STRIDE_PAGES))
                    region += 1
                for L in WILLNEED_LENGTHS:
                    def willneed(fd, off, L=L):
                        os.posix_fadvise(fd, off, L, os.POSIX_FADV_WILLNEED)
                        return 1 + pread_all(fd, off, L)
                    one("willneed", 0, "data.bin", L, region, rep, willneed)
                    region += 1

                def seq4k(fd, off):
                    for i in range(SEQ4K_BYTES // PAGE):
                        os.pread(fd, PAGE, off + i * PAGE)
                    return SEQ4K_BYTES // PAGE
                one("seq4k", 0, "data.bin", SEQ4K_BYTES, region, rep, seq4k)
                for K in faulter_counts:
                    def fault(fd, off, K=K):
                        faulters.measure(s.path(0, "probe/fault.bin"), K, lambda: s.join())
                        return K * (FAULT_BYTES // PAGE)
                    one("mmap", 0, "fault.bin", FAULT_BYTES, None, rep, fault, K=K)
        return rows, queue, stats, {"read_bps": bps, "read_iops": iops, "profile": profile,
                                     "ranks": PROBE_RANKS, "nodes": NODES}
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def write(rows, queue, stats, budget, out_dir=DEFAULT_DIR, config: dict | None = None) -> Path:
    """``requests.csv``, ``faulters.csv``, ``queue.csv`` and ``meta.json`` in ``out_dir``."""
    import pandas as pd

    from lmdbio.lab.meta import write_results_meta

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    d = pd.DataFrame(rows, columns=list(COLUMNS))
    d.to_csv(out / "requests.csv", index=False)
    m = d[d["kind"] == "mmap"]
    pd.DataFrame({"K": m["K"], "repeat": m["repeat"], "dev_read_ios": m["s_ios"],
                  "dev_read_bytes": m["s_bytes"], "s_dev_requests": m["s_dev_requests"],
                  "node_ios": m["node_ios"], "wall_s": m["wall_s"],
                  "file_bytes": FAULT_BYTES}).to_csv(out / "faulters.csv", index=False)
    pd.DataFrame(queue).to_csv(out / "queue.csv", index=False)
    write_results_meta(
        out, config or {}, files=["requests.csv", "faulters.csv", "queue.csv"], budget=budget,
        target={k: stats.get(k) for k in ("kind", "profile", "kernel", "nodes")},
        kernel_release=os.uname().release,
        data="a synthetic file of random bytes made for the probe; no data set of any sweep",
        columns={"s_ios": "bios the blkio (io) rule charged on S: what its IOPS budget counts",
                 "s_bytes": "bytes the rule charged on S",
                 "s_dev_requests": "S's completed reads after the block layer merged them",
                 "node_ios": "the node device's completed reads (before its direct I/O to S)",
                 "pieces": "runs of the read between cached pages (pread-cached)",
                 "calls": "system calls (preads, the advice, or K x pages touched)"},
        note="each measurement on an evicted node file and S; counters after no read is in flight")
    return out


# --- what the model reads -------------------------------------------------------------------

@dataclass(frozen=True)
class Probe:
    """The probe's medians, as the model uses them (all sizes in bytes)."""

    path: str
    #: ``((L, requests, bytes), ...)``: one cold pread of L on a node (requests.curve_requests).
    pread: tuple
    #: ``((L, requests, bytes), ...)`` per read of back-to-back preads of L.
    seq: tuple
    #: ``((L, requests, bytes), ...)``: WILLNEED of L and the pread that waits for it.
    willneed: tuple
    #: ``((L, pieces, requests), ...)``: a pread of L over cached pages.
    cached: tuple
    #: The node device's readahead window and largest request; S's largest request.
    node_read_ahead: int
    node_max_request: int
    s_max_request: int
    #: ``faulters.csv`` next to requests.csv (the K-faulters curve on S).
    faulters_csv: str


def _curve(d, kind):
    g = d[(d["kind"] == kind) & (d["node"] == 0)].groupby("length")[["s_ios", "s_bytes"]].median()
    if kind in ("pread-seq",):
        g = g / SEQ_READS
    return tuple((int(L), float(r["s_ios"]), float(r["s_bytes"]))
                 for L, r in g.sort_index().iterrows())


def load_probe(path=DEFAULT_DIR) -> Probe:
    """The probe in ``path`` (a directory written by :func:`write`)."""
    import pandas as pd

    p = Path(path)
    if not p.is_absolute():
        p = REPO / p
    need = [p / f for f in ("requests.csv", "faulters.csv", "queue.csv")]
    missing = [str(f) for f in need if not f.exists()]
    if missing:
        raise ConfigurationError(f"shared-target probe incomplete: {', '.join(missing)} missing "
                                 "(python -m lmdbio.lab.model.sharedprobe writes them; root only)")
    d = pd.read_csv(need[0])
    cols = {"kind", "node", "length", "s_ios", "s_bytes", "pieces"}
    if not cols <= set(d.columns) or d[d["kind"] == "pread"].empty:
        raise ConfigurationError(f"{need[0]}: needs columns {', '.join(sorted(cols))} and "
                                 "pread rows")
    q = pd.read_csv(need[2])
    node = q[q["role"].astype(str).str.startswith("node")]
    s = q[q["role"] == "S"]
    if node.empty or s.empty:
        raise ConfigurationError(f"{need[2]}: needs a node row and an S row")
    c = d[d["kind"] == "pread-cached"].groupby("length")[["pieces", "s_ios"]].median()
    return Probe(path=str(p), pread=_curve(d, "pread"), seq=_curve(d, "pread-seq"),
                 willneed=_curve(d, "willneed"),
                 cached=tuple((int(L), float(r["pieces"]), float(r["s_ios"]))
                              for L, r in c.sort_index().iterrows()),
                 node_read_ahead=int(node["read_ahead_kb"].iloc[0]) * 1024,
                 node_max_request=int(node["max_sectors_kb"].iloc[0]) * 1024,
                 s_max_request=int(s["max_sectors_kb"].iloc[0]) * 1024,
                 faulters_csv=str(need[1]))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else DEFAULT_DIR
    from ..storage.shared import shared_available

    ok, why = shared_available()
    if not ok:
        print(f"sharedprobe: skipped: {why}", file=sys.stderr)
        return 0
    load0 = os.getloadavg()[0]
    rows, queue, stats, budget = measure()
    write(rows, queue, stats, budget, out, config={"argv": sys.argv, "repeats": 3,
                                                    "loadavg_1min": [load0, os.getloadavg()[0]]})
    import pandas as pd

    d = pd.DataFrame(rows)
    cols = ["s_ios", "s_bytes", "s_dev_requests", "pieces"]
    print(d.groupby(["kind", "node", "length", "K"])[cols].median().to_string())
    print(pd.DataFrame(queue).to_string(index=False))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
