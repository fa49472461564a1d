"""What the emulated PFS layer itself costs: 4 MiB reads through the ``local`` profile vs direct.

The ``local`` profile charges nothing, so any difference is FUSE and the
daemon. One mount, one file; each round reads the whole file in 4 MiB
``preadv`` calls, in this order:

- direct: the source file (warm in the host page cache, or evicted first
  with ``--cold-source``);
- pfs cold: the node view evicted first, so every byte goes through the
  daemon (which reads the source in the state above);
- pfs warm: the same node view again, served by its own page cache (the
  daemon is not involved);
- direct again.

A round's ratio is ``pfs / mean(direct before, direct after)``, so slow
phases of a loaded machine hit both sides; the figures are medians over
the rounds, with the range. CPU is the reader's plus the daemon's CPU
time per GiB (robust to load, as wall time is not).

``--rtt N`` also times N one-page ``O_DIRECT`` reads through the mount
(each one FUSE round trip through the daemon) against the same reads of
the source: the per-request cost of the layer.

Prints numbers; asserts nothing. About 20-30 s at the defaults on 2 CPUs.

Usage: .venv/bin/python benchmarks/bench_pfs_local.py [--mib 256] [--repeats 9] [--cold-source] [--rtt 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from lmdbio.lab.pagecache import evict as evict_file
from lmdbio.lab.pfs import mounted

CHUNK = 4 << 20
_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def read_all(path: str, buf: bytearray, size: int, daemon: int | None = None) -> tuple[float, float]:
    """Read ``path`` in CHUNK preadv calls: (wall seconds, CPU seconds of this process + the daemon)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        c0, d0 = time.process_time(), proc_cpu(daemon) if daemon else 0.0
        t = time.perf_counter()
        for off in range(0, size, CHUNK):
            os.preadv(fd, [buf], off)
        wall = time.perf_counter() - t
        cpu = time.process_time() - c0 + (proc_cpu(daemon) - d0 if daemon else 0.0)
        return wall, cpu
    finally:
        os.close(fd)


def page_reads(path: str, n: int, size: int, flags: int = 0) -> float:
    """Mean seconds of ``n`` one-page preads spread over the file."""
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        pages = size // 4096
        t = time.perf_counter()
        for i in range(n):
            os.pread(fd, 4096, (i * 7919 % pages) * 4096)
        return (time.perf_counter() - t) / n
    finally:
        os.close(fd)


def spread(values) -> str:
    return f"{statistics.median(values):5.2f}x [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="file size in MiB (default 256)")
    ap.add_argument("--repeats", type=int, default=9, help="rounds (default 9)")
    ap.add_argument("--cold-source", action="store_true", help="evict the source before each read too")
    ap.add_argument("--rtt", type=int, default=2000, metavar="N",
                    help="one-page O_DIRECT reads for the per-request cost (0: skip; default 2000)")
    args = ap.parse_args()
    size = args.mib << 20
    buf = bytearray(CHUNK)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="pfs-bench-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        f = src / "data.bin"
        with open(f, "wb") as out:
            for _ in range(args.mib // 4):
                out.write(os.urandom(CHUNK))

        def direct():
            if args.cold_source:
                evict_file(f)
            return read_all(str(f), buf, size)

        rows = []
        with mounted(src, profile="local", nodes=1) as m:
            view = m.path(0, "data.bin")
            read_all(str(f), buf, size)
            for _ in range(args.repeats):
                d1 = direct()
                m.evict(0, "data.bin")
                if args.cold_source:
                    evict_file(f)
                cold = read_all(view, buf, size, m.pid)
                warm = read_all(view, buf, size, m.pid)
                d2 = direct()
                rows.append(((d1[0] + d2[0]) / 2, cold[0], warm[0], (d1[1] + d2[1]) / 2, cold[1], warm[1]))
            rtt = None
            if args.rtt:
                read_all(str(f), buf, size)  # the source warm: this measures the layer only
                rtt = []
                for _ in range(3):
                    rtt.append((page_reads(view, args.rtt, size, os.O_DIRECT),
                                page_reads(str(f), args.rtt, size)))
            st = m.stats()
    gib = size / (1 << 30)
    med = lambda i: statistics.median(r[i] for r in rows)
    k = st["kernel"]
    print(f"{args.mib} MiB in 4 MiB reads, {args.repeats} rounds, source {'cold' if args.cold_source else 'warm'}; "
          f"kernel: max_read {k['max_read'] >> 10} KiB, readahead {k['read_ahead_kb']} KiB, "
          f"splice {'on' if k.get('splice') else 'off'}; {os.cpu_count()} CPUs, "
          f"load {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"  direct    {size / med(0) / 1e9:6.2f} GB/s                       cpu {med(3) / gib * 1e3:5.0f} ms/GiB")
    for name, i in (("pfs cold", 1), ("pfs warm", 2)):
        print(f"  {name:9s} {size / med(i) / 1e9:6.2f} GB/s  {spread([r[i] / r[0] for r in rows])} direct"
              f"  cpu {med(i + 3) / gib * 1e3:5.0f} ms/GiB ({statistics.median(r[i + 3] / r[3] for r in rows):.1f}x)")
    c = st["counters"]["total"]
    print(f"  daemon: {c['requests']} requests, mean {c['mean_request_bytes'] / 1024:.0f} KiB")
    if rtt:
        via = statistics.median(r[0] for r in rtt)
        dir_ = statistics.median(r[1] for r in rtt)
        print(f"  one 4 KiB request: {via * 1e6:.0f} us through the mount (O_DIRECT) vs {dir_ * 1e6:.1f} us "
              f"direct: {(via - dir_) * 1e6:.0f} us per FUSE round trip")


if __name__ == "__main__":
    main()
