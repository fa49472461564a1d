"""DM's speculative reads: synchronous page faults per batch with and without them.

Issue 19, part 1. DM hands the cursor around a ring of readers; while a
reader waits for it, it asks the kernel (POSIX_FADV_WILLNEED) for the pages
its next records are predicted to occupy. This measures what that buys:
the same ring of P readers (one per rank, each rank its own virtual node of
the emulated GPFS, so each has a private, cold page cache) reads the same
batches twice per repeat, once with speculation (``lmdbio-lmm-dm``) and once
without (the same Options with ``speculative=False``: the ring alone), the
two interleaved. Per batch and reader it records the major faults of the
walk (getrusage), the walk's time, the speculated bytes, and the scored
pages (touched, missed by the prediction, predicted but not touched); per
run the emulated storage's request count.

Usage (repository root, after `make venv`; needs FUSE like `make bench-pfs`):
    .venv/bin/python benchmarks/bench_dm_speculation.py [--procs 4] [--batches 60]
        [--repeats 3] [--time-scale 1] [--out data/results/04_dm/speculation]
Writes faults.csv (one row per run x reader x batch), summary.csv (per
mode: medians and min/max over repeats), meta.json and
figures/04_dm_speculation.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(mnt: str, rel: str, batches: int, batch_size: int, speculative: bool) -> None:
    """Under mpiexec: rank r reads node r's view; rank 0 prints every reader's rows as JSON."""
    from mpi4py import MPI

    import lmdbio
    from lmdbio.options import Options

    comm = MPI.COMM_WORLD
    path = os.path.join(mnt, f"node{comm.rank}", rel)
    opts = Options(localized=True, locate="ring", fetch="mmap", speculative=speculative)
    with lmdbio.Reader(path, batch_size, comm, ranks_per_node=1, options=opts) as r:
        for _ in range(batches):
            r.read_batch()
        rows = r.stats()
        psize = r.meta.psize
    per_batch: dict[int, dict] = {}
    for x in rows:
        t = x.get("batch", -1)
        if t is None or t < 0 or x.get("phase") == "total":
            continue
        b = per_batch.setdefault(int(t), {"batch": int(t), "rank": comm.rank, "majflt": 0, "minflt": 0,
                                          "read_s": 0.0, "speculated_bytes": 0})
        if x["phase"] == "speculate":
            b["speculated_bytes"] += int(x.get("bytes", 0) or 0)
            continue
        b["majflt"] += int(x.get("majflt", 0) or 0)
        b["minflt"] += int(x.get("minflt", 0) or 0)
        b["read_s"] += float(x.get("wall_s", 0.0) or 0.0)
        if "missed_pages" in x:
            b["touched_pages"] = -(-int(x["bytes"]) // psize)
            b["missed_pages"] = int(x["missed_pages"])
            b["extra_pages"] = int(x["extra_pages"])
    everyone = comm.gather(list(per_batch.values()), root=0)
    if comm.rank == 0:
        print("ROWS " + json.dumps([row for rank in everyone for row in rank]), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=str(ROOT / "data/datasets/cifar10"))
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", default="gpfs-2017")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--out", default=str(ROOT / "data/results/04_dm/speculation"))
    ap.add_argument("--figure", default=str(ROOT / "figures/04_dm_speculation.png"))
    ap.add_argument("--replot", action="store_true", help="only redraw the figure from --out's files")
    ap.add_argument("--worker", nargs=4, metavar=("MNT", "REL", "BATCHES", "SPEC"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        mnt, rel, batches, spec = a.worker
        worker(mnt, rel, int(batches), a.batch_size, spec == "1")
        return 0

    import pandas as pd

    if a.replot:
        out = Path(a.out)
        meta = json.loads((out / "meta.json").read_text())["config"]
        a.procs, a.batch_size, a.repeats = meta["procs"], meta["batch_size"], meta["repeats"]
        a.time_scale, a.profile = meta["time_scale"], meta["storage"].split(":", 1)[1]
        plot(pd.read_csv(out / "faults.csv"), pd.read_csv(out / "runs.csv"), a, Path(a.figure))
        return 0

    from lmdbio.lab.pfs import mount as pfs
    from lmdbio.lab.cluster import mpiexec
    from lmdbio.lab.experiments import pfs_unavailable
    from lmdbio.lab.meta import results_meta

    why = pfs_unavailable()
    if why:
        print(f"bench_dm_speculation: skipped: {why}")
        return 0
    src = Path(a.dataset).resolve()
    runs = []
    with pfs.mounted(src.parent, profile=a.profile, nodes=a.procs, time_scale=a.time_scale) as m:
        for rep in range(a.repeats):
            for spec in ((False, True) if rep % 2 == 0 else (True, False)):
                for node in range(a.procs):
                    m.evict(node, src.name)
                c0 = m.counters()
                cmd = [mpiexec(), "-n", str(a.procs), sys.executable, __file__, "--batch-size",
                       str(a.batch_size), "--worker", m.mnt, src.name, str(a.batches), "1" if spec else "0"]
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
                if p.returncode != 0:
                    print(p.stdout[-2000:], p.stderr[-4000:], file=sys.stderr)
                    raise SystemExit(f"bench_dm_speculation: the run failed (exit {p.returncode})")
                delta = pfs.counters_delta(c0, m.counters())
                delta = delta.get("total", delta)
                line = next(x for x in p.stdout.splitlines() if x.startswith("ROWS "))
                mode = "ring + speculation (DM)" if spec else "ring only"
                for row in json.loads(line[5:]):
                    runs.append({"mode": mode, "repeat": rep, **row,
                                 "pfs_requests_run": delta.get("requests")})
                print(f"repeat {rep}: {mode}: {sum(r['majflt'] for r in runs if r['mode'] == mode and r['repeat'] == rep)}"
                      f" major faults, {delta.get('requests')} storage requests", flush=True)
    df = pd.DataFrame(runs)
    timed = df[df["batch"] >= 2]   # the prediction needs two earlier batches
    per_run = timed.groupby(["mode", "repeat"]).agg(
        majflt_per_batch=("majflt", lambda s: s.sum() / timed["batch"].nunique()),
        read_s_per_batch=("read_s", lambda s: s.sum() / timed["batch"].nunique() / a.procs),
        speculated_mb=("speculated_bytes", lambda s: s.sum() / 1e6),
        touched_pages=("touched_pages", "sum"), missed_pages=("missed_pages", "sum"),
        extra_pages=("extra_pages", "sum"), storage_requests=("pfs_requests_run", "first")).reset_index()
    summary = per_run.groupby("mode").agg(["median", "min", "max"])
    summary.columns = ["_".join(c) for c in summary.columns]
    summary = summary.drop(columns=[c for c in summary.columns if c.startswith("repeat_")]).reset_index()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "faults.csv", index=False)
    per_run.to_csv(out / "runs.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    (out / "meta.json").write_text(json.dumps(results_meta({
        "procs": a.procs, "ranks_per_node": 1, "batches": a.batches, "batch_size": a.batch_size,
        "repeats": a.repeats, "storage": f"pfs:{a.profile}", "time_scale": a.time_scale,
        "dataset": str(src), "scored_from_batch": 2}), indent=2, default=str) + "\n")
    print(summary.to_string(index=False))
    plot(df, per_run, a, Path(a.figure))
    return 0


def plot(df, per_run, a, figure: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    per_batch = df.groupby(["mode", "repeat", "batch"], as_index=False)["majflt"].sum()
    fig, ax = plt.subplots(1, 3, figsize=(15, 4), gridspec_kw={"width_ratios": [2.2, 1.4, 1]})
    sns.lineplot(per_batch, x="batch", y="majflt", hue="mode", errorbar=("pi", 100), ax=ax[0])
    ax[0].set(ylabel=f"major faults per batch, all {a.procs} readers",
              title=f"Synchronous faults (emulated {a.profile}, cold, k = {a.time_scale:g})")
    dm = per_run[per_run["speculated_mb"] > 0]   # the ring alone predicts nothing: no score
    pages = dm.melt(id_vars=["mode", "repeat"], value_vars=["touched_pages", "missed_pages", "extra_pages"],
                    var_name="pages", value_name="count")
    sns.barplot(pages, x="pages", y="count", errorbar=("pi", 100), ax=ax[1], color="C0")
    ax[1].set(ylabel="pages over the scored batches", xlabel="",
              title="DM's prediction: pages touched, missed, extra")
    sns.barplot(per_run, x="mode", y="storage_requests", hue="mode", errorbar=("pi", 100), ax=ax[2])
    ax[2].set(ylabel="storage requests per run", xlabel="", title="Emulated storage requests")
    ax[2].tick_params(axis="x", labelsize=7)
    fig.suptitle(f"DM's speculative reads, {a.procs} readers in a ring, B = {a.batch_size}, "
                 f"{a.repeats} interleaved repeats (bars: median, whiskers: min-max)", fontsize=10)
    fig.tight_layout()
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
