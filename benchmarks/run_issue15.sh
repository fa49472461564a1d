#!/usr/bin/env bash
# Issue #15 table: the best LMDBIO variant, lmdbio-direct and auto against the
# raw limit, lmdb and lmdb-get (both baselines are always added), cifar10
# (60,000 records of 3 KB), global batch 256, P = 1, 4, 16, 2 repeats:
#   1. warm, long run:  --iters 700 --warmup 40   (the issue's command)
#   2. warm, short run: --iters 40 --warmup 1     (what a user timing 40 batches sees)
#   3. cold local disk: --iters 160 --warmup 1    (each timed record read once:
#      (warmup rounded up to the largest coalescing, 64 batches, + 160) * 256 <= 60,000)
# Results: data/results/bench_issue15/{warm-700,warm-40,cold-160}/{points,summary}.csv, meta.json
#
# Expected duration on an idle 2-core machine: about 10 minutes
# (7 variants x 3 P x 2 repeats = 42 points per run, 1-5 s each, mostly mpiexec start-up).
#
# Usage (from the repository root, after `make venv`, on an otherwise idle machine):
#   benchmarks/run_issue15.sh
#   TINY=1 benchmarks/run_issue15.sh     smoke test: 2,000 records, a few iterations (~1-2 min)
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
DATA=${DATA:-data/datasets}
OUT=${OUT:-data/results/bench_issue15}
PROCS=${PROCS:-1,4,16}
REPEATS=${REPEATS:-2}
BATCH=${BATCH:-256}
VARIANTS=${VARIANTS:-lmdbio-lmm-dio,lmdbio-lmm-dio-prov-coal,lmdbio-direct,auto}
RECORDS=60000
LONG=(700 40) SHORT=(40 1) COLD=(160 1)
if [ -n "${TINY:-}" ]; then
    DATA=${TINY_DATA:-build/issue15-tiny/datasets}
    OUT=${TINY_OUT:-build/issue15-tiny/results}
    RECORDS=2000 REPEATS=1 PROCS=${TINY_PROCS:-1,4}
    LONG=(20 2) SHORT=(5 1) COLD=(3 1)
fi

dir=$DATA/cifar10
if [ ! -f "$dir/data.mdb" ]; then
    "$BIN/lmdbio" make-dataset --preset cifar10 --records "$RECORDS" --out "$dir" --force
fi
"$BIN/lmdbio" index "$dir" >/dev/null   # a current provenance sidecar (PROV, direct, auto)

run() {  # name cache iters warmup
    "$BIN/lmdbio" bench --dataset "$dir" --variants "$VARIANTS" --procs "$PROCS" \
        --cache "$2" --batch-size "$BATCH" --iters "$3" --warmup "$4" --repeats "$REPEATS" \
        --timeout 600 --quiet --out "$OUT/$1"
}
time run warm-${LONG[0]} warm "${LONG[@]}"
time run warm-${SHORT[0]} warm "${SHORT[@]}"
time run cold-${COLD[0]} cold "${COLD[@]}"
