"""Shuffled epochs in both shuffle modes (and with the window stage off), against file order and
shuffled lmdb-get, on the emulated GPFS (cold, cifar10 60k, B = 256, 4 ranks per virtual node).
Prints; never asserts.

    PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/bench_window.py P[,P...] ITERS REPEATS OUT.csv [--from-start] [--before] [--file-coal BYTES]

Series: file order; shuffle="window" (each window shuffled whole; node readers read whole
windows); shuffle="shard" (each rank a contiguous slice of every window: node readers read
1/R of it); shuffled lmdb-get. ``--before`` adds "window, no window stage"
(``Table.windowed = False`` on the engines: the chunk-by-chunk path of HEAD before the window
stage). ``--file-coal BYTES`` adds "file order, COAL BYTES" (file order with COAL's target
request size at BYTES: does a larger chunk alone close a gap to the shuffled series?). Series are
interleaved per repeat. Without
``--from-start`` each point is :func:`lmdbio.lab.beyond.epoch_rate` (notebook 12's: epoch 1's first
chunk is read untimed, which with the window stage also reads the first window untimed); with
it the clock starts before epoch 1 starts, so every window read is timed (use ITERS a multiple
of the window's batches).
"""
import sys
import time
from pathlib import Path

from lmdbio.lab import beyond


def run(comm, points):
    """beyond.epoch_rate for each point, the window stage on or off per point (``window``);
    ``from_start`` (a point key) times the epoch's first chunk and window too."""
    import lmdbio
    from lmdbio.pipeline.index import Table
    rows = []
    for q in points:
        q = dict(q)
        Table.windowed = q.pop("window")
        label = q.pop("label")
        for r in beyond.epoch_rate(comm, **q):
            rows.append({**r, "label": label, "lmdbio_file": lmdbio.__file__})
    Table.windowed = True
    return rows


if __name__ == "__main__":
    import pandas as pd

    from lmdbio.lab.cluster import MPICluster
    from lmdbio.lab.experiments import emulated_pfs

    import bench_window   # the engines import the point functions from this module

    FROM_START = "--from-start" in sys.argv
    DATASETS = Path("data/datasets").resolve()
    SERIES = [("auto", False, True, "file order"), ("auto", "window", True, "shuffled, window"),
              ("auto", "shard", True, "shuffled, shard"), ("lmdb-get", True, True, "lmdb-get shuffled")]
    if "--before" in sys.argv:
        SERIES.insert(1, ("auto", "window", False, "shuffled, window, no window stage"))
    FILE_COAL = int(sys.argv[sys.argv.index("--file-coal") + 1]) if "--file-coal" in sys.argv else None
    if FILE_COAL:
        SERIES.insert(1, ("auto", False, True, f"file order, COAL {FILE_COAL}"))
    P = [int(x) for x in sys.argv[1].split(",")]
    ITERS = int(sys.argv[2])
    REPEATS = int(sys.argv[3])
    OUT = sys.argv[4]
    points = [dict(nprocs=p, dataset=str(DATASETS / "cifar10"), variant=v, shuffle=s, window=w, label=lab,
                   batch_size=256, iters=ITERS, cache="cold", repeat=r, ranks_per_node=4,
                   coalesce_bytes=FILE_COAL if lab.startswith("file order, COAL") else None,
                   from_start=FROM_START)
              for p in P for r in range(REPEATS) for v, s, w, lab in SERIES]
    rows = []
    with MPICluster(n=max(P)) as cluster:
        with emulated_pfs(DATASETS, points, "gpfs-2017") as pts:
            for p in P:
                mine = [{k: v for k, v in q.items() if k != "nprocs"} for q in pts if q["nprocs"] == p]
                t0 = time.monotonic()
                rows += cluster.run_root(bench_window.run, p, mine)
                print(f"P={p}: {len(mine)} points in {time.monotonic() - t0:.1f} s", flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(OUT, index=False)
    pd.set_option("display.width", 200)
    print(df.groupby(["nprocs", "label", "variant_used", "coalesce"])["records_per_s"]
          .agg(["median", "min", "max", "size"]).round(0).to_string())
    for p, d in df.groupby("nprocs"):
        piv = d.pivot_table(index="repeat", columns="label", values="records_per_s")
        f, g = piv["file order"], piv["lmdb-get shuffled"]
        ratios = [("shard/file", "shuffled, shard", f), ("window/file", "shuffled, window", f),
                  ("shard/get", "shuffled, shard", g), ("window/get", "shuffled, window", g),
                  ("shard/window", "shuffled, shard", piv["shuffled, window"]),
                  ("file-coal/file", f"file order, COAL {FILE_COAL}", f),
                  ("no-stage/file", "shuffled, window, no window stage", f)]
        for name, label, base in ratios:
            if label in piv:
                ratio = piv[label] / base
                print(f"P={p} {name}: median {ratio.median():.2f} [{ratio.min():.2f}-{ratio.max():.2f}] "
                      "(per-repeat ratios)")
    print("lmdbio on engines:", sorted(set(df["lmdbio_file"])))
