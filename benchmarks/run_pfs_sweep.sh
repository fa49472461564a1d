#!/usr/bin/env bash
# Issue #10 sweep: the papers' seven variants (plus the raw-read limit and the
# lmdb / lmdb-get baselines that bench always adds), cold page cache, read
# through the emulated GPFS of 2017 (lmdbio.lab.pfs, profile gpfs-2017), with
# P = 1, 4, 16 ranks on virtual nodes of 4 ranks (each node its own FUSE view
# and page cache, all nodes sharing the emulated targets), cifar10 (60,000
# records of 3 KB) and imagenet (2,000 records of 196 KB), global batch 256,
# 3 repeats.
# Results: data/results/pfs_sweep/<dataset>-cold/{points,summary}.csv, meta.json
#
# Duration (measured on the 2-core machine while other jobs ran, load ~15;
# about a third less when idle): per point about 2.5 s of start-up (mpiexec,
# imports, eviction) plus the reading. At TIME_SCALE=1 the reading of one
# repeat over P = 1, 4, 16 takes about 70 s for cifar10 at 40 iterations
# (about 410 s for the full epoch, 230 iterations) and about 160 s for
# imagenet at 6 iterations. 180 points in all:
#   defaults (CIFAR_ITERS=40, TIME_SCALE=1):   about 19 min loaded, 13-15 min idle
#   CIFAR_ITERS=230 (one full cifar10 epoch):  about 36 min loaded
#   TIME_SCALE=2 roughly adds 60% of the reading time (the model's share).
# The time scale is recorded in every point's meta.json (the mount's profile).
#
# Usage: benchmarks/run_pfs_sweep.sh            (from the repository root, after `make venv`)
#   REPEATS=1 PROCS=1,4 benchmarks/run_pfs_sweep.sh   for a quicker look
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
DATA=${DATA:-data/datasets}
OUT=${OUT:-data/results/pfs_sweep}
PROCS=${PROCS:-1,4,16}
REPEATS=${REPEATS:-3}
VARIANTS=${VARIANTS:-all}
BATCH=${BATCH:-256}
PROFILE=${PROFILE:-gpfs-2017}
RANKS_PER_NODE=${RANKS_PER_NODE:-4}
CIFAR_ITERS=${CIFAR_ITERS:-40}      # cold: each record read once, (1 + iters) * 256 <= 60,000
IMAGENET_ITERS=${IMAGENET_ITERS:-6}  # (1 + 6) * 256 = 1,792 <= 2,000
export LMDBIO_PFS_TIME_SCALE=${TIME_SCALE:-1}

dataset() {  # name preset records
    local dir=$DATA/$1
    if [ ! -f "$dir/data.mdb" ]; then
        "$BIN/lmdbio" make-dataset --preset "$2" --records "$3" --out "$dir" --force
    fi
    "$BIN/lmdbio" index "$dir" >/dev/null
}
dataset cifar10 cifar10 60000
dataset imagenet imagenet 2000

# Never start on top of a stale emulator mount (a crashed earlier run).
grep -q ' fuse.lmdbio-pfs ' /proc/mounts && {
    echo "run_pfs_sweep.sh: an lmdbio pfs mount is still there (see /proc/mounts);" \
         "unmount it with: $BIN/lmdbio pfs umount MNT" >&2
    exit 1
}

run() {  # name iters
    "$BIN/lmdbio" bench --dataset "$DATA/$1" --variants "$VARIANTS" --procs "$PROCS" \
        --cache cold --batch-size "$BATCH" --iters "$2" --warmup 1 --repeats "$REPEATS" \
        --ranks-per-node "$RANKS_PER_NODE" --storage "pfs:$PROFILE" \
        --timeout 600 --out "$OUT/$1-cold"
}
time run cifar10 "$CIFAR_ITERS"
time run imagenet "$IMAGENET_ITERS"
