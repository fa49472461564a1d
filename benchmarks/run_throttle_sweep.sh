#!/usr/bin/env bash
# Issue 19 (part 2) sweep: the papers' seven variants (plus the raw-read limit
# and the lmdb / lmdb-get baselines that bench always adds), cold page cache,
# read through throttled real block devices (lmdbio.lab.storage, profile
# gpfs-2017: one read-only loop device and one blkio cgroup per virtual node
# of 4 ranks, each node 1/9 of a 2017 GPFS client's budget at time scale 4:
# 27.8 MB/s and 222 requests/s), P = 1, 4, 16, cifar10 (60,000 records of
# 3 KB), global batch 256. Needs root, loop devices and the blkio (v1) or io
# (v2) cgroup controller; says why and stops otherwise.
# Results (commit-ready, no points.csv): data/results/throttled/cifar10-cold/
# {summary.csv, meta.json}; the full points.csv stays in build/throttle-sweep/.
#
# Duration on the 2-core machine: see docs/storage.md ("A throttled real block
# device"); REPEATS=1 is about a third of the default.
#
# Usage: benchmarks/run_throttle_sweep.sh     (from the repository root, after `make venv`, as root)
#   REPEATS=1 PROCS=1,4 benchmarks/run_throttle_sweep.sh   for a quicker look
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
DATA=${DATA:-data/datasets}
OUT=${OUT:-data/results/throttled}
WORK=${WORK:-build/throttle-sweep}
PROCS=${PROCS:-1,4,16}
REPEATS=${REPEATS:-3}
VARIANTS=${VARIANTS:-all}
BATCH=${BATCH:-256}
PROFILE=${PROFILE:-gpfs-2017}
RANKS_PER_NODE=${RANKS_PER_NODE:-4}
ITERS=${ITERS:-160}     # cold: each record read once, (1 + iters + 64) * 256 <= 60,000; 40 was
                        # too short at P = 16 (DIO +25%, raw -35% in the first ~40 batches)
RECORDS=${RECORDS:-60000}

why=$("$BIN/python" -c "from lmdbio.lab.storage import throttle_available as a; ok, why = a(); print('' if ok else why)")
if [ -n "$why" ]; then
    echo "run_throttle_sweep.sh: skipped: $why" >&2
    exit 0
fi

dir=$DATA/cifar10
if [ ! -f "$dir/data.mdb" ]; then
    "$BIN/lmdbio" make-dataset --preset cifar10 --records "$RECORDS" --out "$dir" --force
fi
"$BIN/lmdbio" index "$dir" >/dev/null   # PROV's sidecar must be current before the read-only image

time "$BIN/lmdbio" bench --dataset "$dir" --variants "$VARIANTS" --procs "$PROCS" \
    --cache cold --batch-size "$BATCH" --iters "$ITERS" --warmup 1 --repeats "$REPEATS" \
    --ranks-per-node "$RANKS_PER_NODE" --storage "throttle:$PROFILE" \
    --timeout 600 --out "$WORK/cifar10-cold"
mkdir -p "$OUT/cifar10-cold"
cp "$WORK/cifar10-cold/summary.csv" "$WORK/cifar10-cold/meta.json" "$OUT/cifar10-cold/"
"$BIN/lmdbio" bench --report "$OUT/cifar10-cold" > "$OUT/cifar10-cold/report.txt"
echo "results: $OUT/cifar10-cold/{summary.csv,meta.json,report.txt}"
