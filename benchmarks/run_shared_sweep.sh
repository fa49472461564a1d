#!/usr/bin/env bash
# Issue 29 sweep: the papers' seven variants (plus the raw-read limit and the
# lmdb / lmdb-get baselines that bench always adds), cold page cache, read
# through ONE shared storage target (lmdbio.lab.storage.shared, profile
# gpfs-2017): the dataset sits in a node image on loop device S, S carries
# one blkio (v1) or io (v2) read budget, and each virtual node of 4 ranks
# reads S through a direct-I/O loop device of its own (a private page cache).
# Each point sets S's budget to its P ranks' share of one GPFS file system
# (23 GB/s and 65K requests/s over the 256 nodes of the papers' largest
# run; see lmdbio/lab/pfs/shared_profiles.toml) divided by the time scale k.
# cifar10 (60,000 records of 3 KB), global batch 256, 3 interleaved repeats.
#
# Two runs: k = K_MAIN at every P in PROCS, and k = K_CHECK at P = CHECK_PROCS,
# so the ratios to LMDB can be compared across k (benchmarks/shared_report.py).
# Needs root, loop devices and the blkio (v1) or io (v2) cgroup controller;
# says why and stops otherwise.
# Results (commit-ready, no points.csv): data/results/shared/cifar10-cold-k<K>/
# {summary.csv, meta.json, report.txt, s_counters.csv}, and
# data/results/shared/{table.csv, two_k.csv, note.md}; the full points.csv
# stays in build/shared-sweep/.
#
# Usage: benchmarks/run_shared_sweep.sh     (from the repository root, after `make venv`, as root)
#   REPEATS=1 PROCS=4 K_CHECK= benchmarks/run_shared_sweep.sh   for a quicker look
#   PROCS=64 K_MAIN=1 K_CHECK= TAG=p64 benchmarks/run_shared_sweep.sh   P = 64 into its own
#   folder (cifar10-cold-k1-p64), reported with the others
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
DATA=${DATA:-data/datasets}
OUT=${OUT:-data/results/shared}
WORK=${WORK:-build/shared-sweep}
PROCS=${PROCS:-4,16}
K_MAIN=${K_MAIN:-0.25}
K_CHECK=${K_CHECK-0.5}            # empty: no second time scale
CHECK_PROCS=${CHECK_PROCS:-16}
REPEATS=${REPEATS:-3}
VARIANTS=${VARIANTS:-all}
BATCH=${BATCH:-256}
PROFILE=${PROFILE:-gpfs-2017}
RANKS_PER_NODE=${RANKS_PER_NODE:-4}
WARMUP=${WARMUP:-40}    # the throttled sweep's first ~40 cold batches were off (DIO +25%, raw -35%)
ITERS=${ITERS:-64}      # timed: 4 of COAL's 16-batch chunks at P = 16; cold needs
                        # (warmup + iters + 64) * 256 <= 60,000 records
RECORDS=${RECORDS:-60000}

why=$("$BIN/python" -c "from lmdbio.lab.storage.shared import shared_available as a; ok, why = a(); print('' if ok else why)")
if [ -n "$why" ]; then
    echo "run_shared_sweep.sh: skipped: $why" >&2
    exit 0
fi

dir=$DATA/cifar10
if [ ! -f "$dir/data.mdb" ]; then
    "$BIN/lmdbio" make-dataset --preset cifar10 --records "$RECORDS" --out "$dir" --force
fi
"$BIN/lmdbio" index "$dir" >/dev/null   # PROV's sidecar must be current before the read-only image

run() {   # run K PROCS
    local k=$1 procs=$2 name="cifar10-cold-k$1${TAG:+-$TAG}"
    time LMDBIO_SHARED_TIME_SCALE=$k "$BIN/lmdbio" bench --dataset "$dir" --variants "$VARIANTS" \
        --procs "$procs" --cache cold --batch-size "$BATCH" --iters "$ITERS" --warmup "$WARMUP" \
        --repeats "$REPEATS" --ranks-per-node "$RANKS_PER_NODE" --storage "shared:$PROFILE" \
        --timeout 600 --quiet --out "$WORK/$name"
    mkdir -p "$OUT/$name"
    cp "$WORK/$name/summary.csv" "$WORK/$name/meta.json" "$OUT/$name/"
    "$BIN/python" -c "import sys; from lmdbio.lab.bench.settings import s_counter_table as t; \
t(sys.argv[1]).to_csv(sys.argv[2], index=False)" "$WORK/$name/points.csv" "$OUT/$name/s_counters.csv"
    "$BIN/lmdbio" bench --report "$OUT/$name" > "$OUT/$name/report.txt"
}

run "$K_MAIN" "$PROCS"
if [ -n "$K_CHECK" ]; then
    run "$K_CHECK" "$CHECK_PROCS"
fi
"$BIN/python" benchmarks/shared_report.py "$OUT"
echo "results: $OUT/*/{summary.csv,meta.json,report.txt,s_counters.csv}, $OUT/{table.csv,two_k.csv,note.md}"
