"""The papers' problem 1 on a real device: K processes faulting the same cold pages of one node.

Each of K processes maps the same cold ``data.mdb`` through one throttled
node device and touches every page in file order, as K LMDB readers on one
node do. The first to fault a page starts its read; the others sleep on the
page's lock and are woken by the I/O completion. Each process reports its
getrusage over the pass: sleep = wall - user - system, voluntary and
involuntary context switches, major faults (as the reference code's
``lmdbio.h`` measures them).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Sequence

__all__ = ["touch_pages", "measure", "run", "COLUMNS", "main"]

#: Columns of faulters.csv (per-process values are means over the K processes).
COLUMNS = ("K", "repeat", "wall_s", "user_s", "sys_s", "sleep_s", "vol_cs", "invol_cs", "majflt",
           "group_wall_s", "sleep_s_sum", "dev_read_bytes", "dev_read_ios", "start_resident",
           "file_bytes", "profile", "time_scale", "read_bps", "read_iops", "read_ahead_kb",
           "ranks_per_node")


def touch_pages(mm) -> int:
    """Read one byte of every page of a map, in file order; returns their sum (keeps the reads)."""
    s = 0
    for off in range(0, len(mm), mmap.PAGESIZE):
        s += mm[off]
    return s


def _child(path: str, join, go_r: int, out_w: int) -> None:
    """One faulter (a forked process): join the node, map, wait for go, touch, report."""
    try:
        join()
        fd = os.open(path, os.O_RDONLY)
        mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        os.write(out_w, b"R")                    # ready
        os.read(go_r, 1)                         # EOF when the parent lets everyone go
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        touch_pages(mm)
        wall = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        user, sys_ = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
        row = {"wall_s": wall, "user_s": user, "sys_s": sys_,
               "sleep_s": max(0.0, wall - user - sys_), "vol_cs": r1.ru_nvcsw - r0.ru_nvcsw,
               "invol_cs": r1.ru_nivcsw - r0.ru_nivcsw, "majflt": r1.ru_majflt - r0.ru_majflt}
        os.write(out_w, (json.dumps(row) + "\n").encode())
        os._exit(0)
    except BaseException as exc:   # pragma: no cover - reported by the parent
        os.write(out_w, (json.dumps({"error": repr(exc)}) + "\n").encode())
        os._exit(1)


def measure(path: str, k: int, join) -> tuple[list[dict], float]:
    """K forked processes touch every page of ``path`` at once; (their rows, the group's wall)."""
    out_r, out_w = os.pipe()
    go_r, go_w = os.pipe()
    pids = []
    try:
        for _ in range(k):
            pid = os.fork()
            if pid == 0:
                os.close(out_r)
                os.close(go_w)
                _child(path, join, go_r, out_w)
            pids.append(pid)
        os.close(out_w)
        os.close(go_r)
        got = b""
        while got.count(b"R") < k:            # every faulter mapped and waiting
            chunk = os.read(out_r, 1)
            if not chunk:
                raise RuntimeError("a faulter ended before it was ready")
            got += chunk
        t0 = time.monotonic()
        os.close(go_w)
        go_w = -1
        data = b""
        while chunk := os.read(out_r, 65536):
            data += chunk
        group_wall = time.monotonic() - t0
    finally:
        for pid in pids:
            os.waitpid(pid, 0)
        for fd in (out_r, go_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
    rows = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    bad = [r["error"] for r in rows if "error" in r]
    if bad or len(rows) != k:
        raise RuntimeError(f"faulters failed: {bad or f'{len(rows)} of {k} reported'}")
    return rows, group_wall


def run(dataset: str | os.PathLike, out_dir: str | os.PathLike | None = None,
        counts: Sequence[int] = (1, 2, 4, 8, 16), repeats: int = 3, profile: str = "gpfs-2017",
        ranks_per_node: int = 4, time_scale: float | None = None, progress: bool = True,
        note: str = ""):
    """The faulters curve on one throttled node; writes faulters.csv and meta.json to ``out_dir``.

    Every (K, repeat) starts cold (the node's file and device buffers
    evicted, checked with mincore) and runs in order K = counts, repeats as
    the outer loop. Returns the DataFrame (one row per K x repeat).
    """
    import pandas as pd

    from lmdbio.lab import pagecache
    from lmdbio.lab.meta import results_meta
    from lmdbio.format import db_file
    from .throttle import device_counters, throttled

    src = db_file(dataset).parent
    rows = []
    with throttled(src, nodes=1, profile=profile, ranks_per_node=ranks_per_node,
                   time_scale=time_scale) as t:
        path = os.path.join(t.path(0, src.name), "data.mdb")
        size = os.path.getsize(path)
        dev = t.devices[0]
        for rep in range(repeats):
            for k in counts:
                t.evict(0, src.name)
                start_res = pagecache.residency(path)
                d0 = device_counters(dev)
                got, group_wall = measure(path, int(k), lambda: t.join(0))
                d1 = device_counters(dev)
                mean = {c: sum(r[c] for r in got) / len(got) for c in got[0]}
                rows.append({"K": int(k), "repeat": rep, **mean, "group_wall_s": group_wall,
                             "sleep_s_sum": sum(r["sleep_s"] for r in got),
                             "dev_read_bytes": d1["read_bytes"] - d0["read_bytes"],
                             "dev_read_ios": d1["read_ios"] - d0["read_ios"],
                             "start_resident": start_res, "file_bytes": size,
                             "profile": profile, "time_scale": t.profile.time_scale,
                             "read_bps": t.read_bps, "read_iops": t.read_iops,
                             "read_ahead_kb": t.profile.read_ahead_kb,
                             "ranks_per_node": ranks_per_node})
                if progress:
                    r = rows[-1]
                    print(f"K={k:2d} repeat {rep}: wall {r['wall_s']:.2f} s, sleep {r['sleep_s']:.2f} s, "
                          f"vol_cs {r['vol_cs']:.0f}, invol_cs {r['invol_cs']:.0f}, "
                          f"majflt {r['majflt']:.1f}, device {r['dev_read_ios']} reads",
                          file=sys.stderr, flush=True)
        stats = t.stats()
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        df.to_csv(out / "faulters.csv", index=False)
        meta = results_meta({
            "experiment": "faulters", "dataset": str(src), "dataset_note": note, "file_bytes": size,
            "counts": list(counts), "repeats": repeats, "profile": stats["profile"],
            "kernel_release": os.uname().release, "device": stats["kernel"],
            "image_bytes": stats["kernel"]["image_bytes"], "argv": sys.argv})
        meta["host"]["kernel"] = os.uname().release
        (out / "meta.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return df


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lmdbio.lab.storage faulters``: the curve, on a dataset made here if none is given."""
    p = argparse.ArgumentParser(prog="python -m lmdbio.lab.storage faulters", description=__doc__)
    p.add_argument("--dataset", help="an LMDB folder (default: a cifar10 dataset of --records, "
                                     "made in a temporary folder)")
    p.add_argument("--records", type=int, default=8000, help="records of the made dataset "
                                                             "(8000: a 33 MB data.mdb)")
    p.add_argument("--counts", default="1,2,4,8,16")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile", default="gpfs-2017")
    p.add_argument("--ranks-per-node", type=int, default=4,
                   help="ranks the node stands for: its share of the profile's client (default 4)")
    p.add_argument("--time-scale", type=float, default=None)
    p.add_argument("--out", default="data/results/throttled")
    args = p.parse_args(argv)
    from .throttle import throttle_available

    ok, why = throttle_available()
    if not ok:
        print(f"faulters: skipped: {why}", file=sys.stderr)
        return 0
    counts = [int(c) for c in args.counts.split(",") if c.strip()]
    with tempfile.TemporaryDirectory(prefix="lmdbio-faulters-") as tmp:
        ds, note = args.dataset, ""
        if ds is None:
            note = f"cifar10 preset, {args.records} records, seed 1, made for this run"
            from lmdbio.datasets import make_dataset

            ds = make_dataset(Path(tmp) / "cifar10", "cifar10", args.records, seed=1,
                              progress=False)
        df = run(ds, args.out, counts, args.repeats, args.profile, args.ranks_per_node,
                 args.time_scale, note=note)
    table = df.groupby("K")[["wall_s", "sleep_s", "vol_cs", "invol_cs", "majflt",
                             "dev_read_ios"]].median()
    print(table.to_string(float_format="{:,.2f}".format))
    print(f"results: {args.out}/faulters.csv, meta.json")
    return 0
