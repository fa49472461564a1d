#!/usr/bin/env bash
# Issue #6 sweep: every variant, the raw-read limit and the lmdb baseline,
# P = 1, 4, 16 ranks, warm and cold page cache, cifar10 (60,000 records of
# 3 KB) and imagenet (2,000 records of 196 KB), global batch 256, 3 repeats.
# Results: data/results/bench_issue6/<dataset>-<cache>/{points,summary}.csv, meta.json
#
# Usage: benchmarks/run_issue6.sh            (from the repository root, after `make venv`)
#   REPEATS=1 PROCS=1,4 benchmarks/run_issue6.sh   for a quicker look
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
DATA=${DATA:-data/datasets}
OUT=${OUT:-data/results/bench_issue6}
PROCS=${PROCS:-1,4,16}
REPEATS=${REPEATS:-3}
VARIANTS=${VARIANTS:-all}
BATCH=${BATCH:-256}

dataset() {  # name preset records
    local dir=$DATA/$1
    if [ ! -f "$dir/data.mdb" ]; then
        "$BIN/lmdbio" make-dataset --preset "$2" --records "$3" --out "$dir" --force
    fi
    # Always refresh the provenance sidecar: its schema follows the lmdbio version.
    "$BIN/lmdbio" index "$dir" >/dev/null
}
dataset cifar10 cifar10 60000
dataset imagenet imagenet 2000

# Cold points read each record once ((1 + iters) * 256 <= records), so what
# they read is really uncached: one epoch, cifar10 230 batches, imagenet 6.
# Warm points may wrap around and run about four epochs, so they last long
# enough (tenths of a second at least) to rise above timer and scheduling noise.
run() {  # name cache iters
    "$BIN/lmdbio" bench --dataset "$DATA/$1" --variants "$VARIANTS" --procs "$PROCS" \
        --cache "$2" --batch-size "$BATCH" --iters "$3" --warmup 1 --repeats "$REPEATS" \
        --timeout 600 --out "$OUT/$1-$2"
}
time run cifar10 warm 1000
time run cifar10 cold 230
time run imagenet warm 30
time run imagenet cold 6
