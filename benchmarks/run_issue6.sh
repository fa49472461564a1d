#!/usr/bin/env bash
# Issue #6 sweep: every variant, the raw-read limit and the lmdb baseline,
# P = 1, 4, 16 ranks, warm and cold page cache, cifar10 (60,000 records) and
# imagenet (2,000 records of 196 KB), global batch 256, 3 repeats.
# Results: data/results/bench_issue6/{cifar10,imagenet}/{points,summary}.csv, meta.json
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
    if [ ! -f "$dir/lmdbio-provenance.npz" ]; then
        "$BIN/lmdbio" index "$dir" >/dev/null
    fi
}
dataset cifar10 cifar10 60000
dataset imagenet imagenet 2000

# Iterations keep the timed records distinct (no record read twice, so a cold
# point stays cold): cifar10 1+200 batches of 256 <= 60,000 records,
# imagenet 1+6 batches of 256 <= 2,000 records (about 300 MB timed).
run() {  # name iters
    "$BIN/lmdbio" bench --dataset "$DATA/$1" --variants "$VARIANTS" --procs "$PROCS" \
        --cache warm,cold --batch-size "$BATCH" --iters "$2" --warmup 1 --repeats "$REPEATS" \
        --timeout 600 --out "$OUT/$1"
}
time run cifar10 200
time run imagenet 6
