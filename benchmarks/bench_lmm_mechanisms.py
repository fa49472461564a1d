"""LMM's "nearly 20-fold" (HPCC 2017): which mechanism could make K mmap readers on a node slow?

The papers blame problem 1 on the kernel: K processes of one node map the
same LMDB file, fault the same cold pages, and every I/O completion wakes
every waiter. LMM (one reader per node, the others served from shared
memory) removes that. Three candidate mechanisms, each tested here where
this machine can test it, with the faulters of
:mod:`lmdbio.lab.storage.faulters` (K forked processes touch every page of
one cold ``data.mdb`` at once, in file order, and report getrusage):

- ``local-cold``: the file on this machine's local disk, evicted before each
  run (``posix_fadvise(DONTNEED)``, residency checked with mincore). The
  kernel's waiter wake-ups are real; the storage is fast.
- ``pfs-cold``: the file through the emulated GPFS (FUSE, profile
  gpfs-2017): every page-cache miss is a FUSE read served by a user-space
  daemon, the nearest this machine has to GPFS's mmap path through mmfsd.
- ``local-warm``: the file already in the page cache. No I/O: each process
  takes one minor fault per page (its own page tables over one shared
  file), so this isolates the per-process page-table cost.
- The throttled real block device's curve is ``make bench-faulters``
  (``data/results/throttled/faulters.csv``); it is read here, not rerun.

A mechanism that could give LMM a large factor makes the node's time grow
with K (group wall at K over K = 1). Results: ``data/results/lmm_mechanisms/
{faulters.csv, summary.csv, meta.json}``; the table is printed.

Usage: .venv/bin/python benchmarks/bench_lmm_mechanisms.py [--counts 1,2,4,8,16] [--repeats 3]
(FUSE needs fuse3; the pfs setting is skipped with the reason where it is missing.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd

from lmdbio.lab import pagecache
from lmdbio.lab.meta import results_meta
from lmdbio.lab.paths import REPO
from lmdbio.lab.storage.faulters import measure

OUT = REPO / "data" / "results" / "lmm_mechanisms"
THROTTLED = REPO / "data" / "results" / "throttled" / "faulters.csv"
KEEP = ("wall_s", "user_s", "sys_s", "sleep_s", "vol_cs", "invol_cs", "majflt")


def _one(setting: str, path: str, k: int, rep: int, evict) -> dict:
    if evict is not None:
        evict()
    start = pagecache.residency(path)
    rows, group_wall = measure(path, k, lambda: None)
    mean = {c: sum(r[c] for r in rows) / len(rows) for c in KEEP}
    return {"setting": setting, "K": k, "repeat": rep, **mean, "group_wall_s": group_wall,
            "start_resident": start, "file_bytes": os.path.getsize(path)}


def run(counts, repeats: int, records: int) -> pd.DataFrame:
    from lmdbio.datasets import make_dataset
    from lmdbio.lab.experiments import pfs_unavailable

    rows = []
    with tempfile.TemporaryDirectory(prefix="lmdbio-lmm-mech-", dir=REPO / "build") as tmp:
        ds = make_dataset(Path(tmp) / "cifar10", "cifar10", records, seed=1, progress=False)
        local = str(Path(ds) / "data.mdb")
        settings = [("local-cold", local, lambda: pagecache.evict(local)),
                    ("local-warm", local, None)]
        why = pfs_unavailable()
        mount = None
        if why:
            print(f"pfs-cold: skipped: {why}", file=sys.stderr)
        else:
            from lmdbio.lab.pfs.mount import mounted

            mount = mounted(str(Path(ds).parent), profile="gpfs-2017", nodes=1)
            m = mount.__enter__()
            pfs_path = os.path.join(m.path(0, Path(ds).name), "data.mdb")
            settings.append(("pfs-cold", pfs_path, lambda: m.evict(0, Path(ds).name)))
        try:
            pagecache.evict(local)
            with open(local, "rb") as f:      # local-warm starts warm
                while f.read(1 << 20):
                    pass
            for rep in range(repeats):        # repeats outermost, settings and K interleaved
                for setting, path, evict in settings:
                    for k in counts:
                        r = _one(setting, path, int(k), rep, evict)
                        rows.append(r)
                        print(f"{setting:10s} K={k:2d} repeat {rep}: group wall {r['group_wall_s']:.3f} s,"
                              f" sleep {r['sleep_s']:.3f} s, vol_cs {r['vol_cs']:.0f},"
                              f" majflt {r['majflt']:.1f}, start resident {r['start_resident']:.2f}",
                              file=sys.stderr, flush=True)
                        if setting == "local-warm":
                            pagecache.evict(local)   # the cold settings evict their own copies
                            with open(local, "rb") as f:
                                while f.read(1 << 20):
                                    pass
        finally:
            if mount is not None:
                mount.__exit__(None, None, None)
    return pd.DataFrame(rows)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per setting and K: median group wall and its range over repeats, the ratio to K = 1."""
    g = df.groupby(["setting", "K"])
    out = g.agg(repeats=("group_wall_s", "size"), group_wall_s=("group_wall_s", "median"),
                group_wall_min_s=("group_wall_s", "min"), group_wall_max_s=("group_wall_s", "max"),
                sleep_s=("sleep_s", "median"), sys_s=("sys_s", "median"),
                vol_cs=("vol_cs", "median"), majflt=("majflt", "median")).reset_index()
    base = out[out["K"] == 1].set_index("setting")["group_wall_s"]
    out["wall_vs_k1"] = out["group_wall_s"] / out["setting"].map(base)
    if THROTTLED.exists():
        t = pd.read_csv(THROTTLED)
        tg = t.groupby("K").agg(repeats=("group_wall_s", "size"),
                                group_wall_s=("group_wall_s", "median"),
                                group_wall_min_s=("group_wall_s", "min"),
                                group_wall_max_s=("group_wall_s", "max"),
                                sleep_s=("sleep_s", "median"), sys_s=("sys_s", "median"),
                                vol_cs=("vol_cs", "median"), majflt=("majflt", "median")).reset_index()
        tg.insert(0, "setting", "throttled-cold (make bench-faulters)")
        tg["wall_vs_k1"] = tg["group_wall_s"] / float(tg.loc[tg["K"] == 1, "group_wall_s"].iloc[0])
        out = pd.concat([out, tg], ignore_index=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--counts", default="1,2,4,8,16")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--records", type=int, default=8000, help="cifar10 records (8000: a 33 MB file)")
    p.add_argument("--out", default=str(OUT))
    a = p.parse_args(argv)
    counts = [int(c) for c in a.counts.split(",") if c.strip()]
    df = run(counts, a.repeats, a.records)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "faulters.csv", index=False)
    s = summarize(df)
    s.to_csv(out / "summary.csv", index=False)
    meta = results_meta({"experiment": "lmm_mechanisms", "counts": counts,
                         "repeats": a.repeats, "records": a.records,
                         "kernel_release": os.uname().release, "argv": sys.argv,
                         "throttled_source": str(THROTTLED.relative_to(REPO))})
    (out / "meta.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    print(s.to_string(index=False, float_format="{:,.3f}".format))
    print(f"results: {out}/faulters.csv, summary.csv, meta.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
