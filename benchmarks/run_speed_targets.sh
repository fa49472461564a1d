#!/usr/bin/env bash
# Issue 32's speed targets, measured (prints only; ratios within one run, 3 interleaved repeats):
#   1. decoded / raw >= 0.8 at P = 1, 4, 16: read_batch() decoded by the batch decoder against
#      read_batch() alone (benchmarks/bench_decode.py, series read,batch; cifar10, warm);
#   2. JPEG Datums >= DALI's CPU decoder with the same threads (benchmarks/bench_jpeg.py;
#      a synthetic encoded imagenet-preset set made here; DALI from $DALI_PATH if installed);
#   3. auto >= 0.8 of raw at P = 16 (lmdbio bench, warm, cifar10).
# The whole output goes to $OUT/speed_targets.log.
#
# Usage: benchmarks/run_speed_targets.sh    (repository root, after `make venv`; about 15 min)
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
DATA=${DATA:-data/datasets}
OUT=${OUT:-build/speed-targets}
REPEATS=${REPEATS:-3}
DALI_PATH=${DALI_PATH:-${XDG_CACHE_HOME:-$HOME/.cache}/lmdbio/dali}
mkdir -p "$OUT"
exec > >(tee "$OUT/speed_targets.log") 2>&1

cifar=$DATA/cifar10
if [ ! -f "$cifar/data.mdb" ]; then
    "$BIN/lmdbio" make-dataset --preset cifar10 --records 60000 --out "$cifar" --force
fi
jpeg=$OUT/imagenet-jpeg
if [ ! -f "$jpeg/data.mdb" ]; then
    "$BIN/lmdbio" make-dataset --preset imagenet --encoded --records 1200 --out "$jpeg" --force --quiet
fi
"$BIN/lmdbio" index "$cifar" >/dev/null
"$BIN/lmdbio" index "$jpeg" >/dev/null
pp=.
[ -d "$DALI_PATH/nvidia" ] && pp=".:$DALI_PATH"

echo "== 1. decoded / raw (bench_decode.py read,batch), cifar10, $(date +%T)"
for p in 1 4 16; do
    echo "-- P = $p"
    PYTHONPATH=$pp "$BIN/mpiexec" -n "$p" "$BIN/python" benchmarks/bench_decode.py "$cifar" auto 100 "$REPEATS" read,batch 1
done

echo "== 2. JPEG Datums: lmdbio vs DALI, P = 1, 1 and 2 threads, $(date +%T)"
PYTHONPATH=$pp "$BIN/mpiexec" -n 1 "$BIN/python" benchmarks/bench_jpeg.py "$jpeg" 20 "$REPEATS" 1,2

echo "== 3. auto / raw, P = 16, warm, cifar10, $(date +%T)"
"$BIN/lmdbio" bench --dataset "$cifar" --variants auto --procs 16 --cache warm --batch-size 256 \
    --iters 200 --warmup 5 --repeats "$REPEATS" --no-lmdb --timeout 600 --out "$OUT/auto-p16"
echo "== done $(date +%T)"
