#!/usr/bin/env bash
# Issue 45's speed targets, measured: a benchmark, it prints and writes results and asserts
# nothing. Every ratio is taken within one run, REPEATS (3) interleaved repeats:
#   1. decoded / raw at P = 1, 4, 16: read_batch() + as_datum_array() (a new array) and
#      + as_datum_array(copy=False) (a view of the batch) against read_batch() alone
#      (benchmarks/bench_decode.py, series read,batch,view; cifar10 60k, warm, B = 256);
#   2. where a rank-batch's time goes, auto and raw, at P = 1, 4, 16
#      (benchmarks/bench_batch_steps.py: plan/locate, fetch, hand-off, batch object, Python
#      overhead, decode; steps_pP.csv), then auto / raw at P = 16 with `lmdbio bench`;
#   3. JPEG Datums against DALI's CPU decoder at 1 and 2 threads, both in DALI's layout (HWC):
#      one size (benchmarks/bench_jpeg.py, a synthetic encoded imagenet set of 1200) and mixed
#      sizes (benchmarks/bench_mixed_sizes.py, 600 photo-like JPEGs of about 450 sizes).
#      DALI is taken from $DALI_PATH when it is not in the venv; without it, lmdbio alone.
# Everything printed goes to $OUT/speed_targets.log.
#
# Usage (repository root, after `make venv`, on a quiet machine; about 25 min):
#   benchmarks/run_speed_targets.sh                # writes data/results/speed_targets/
# A small check that it runs (about 3 min on 2 cores; writes a scratch folder):
#   RECORDS=3000 ITERS=10 JPEG_RECORDS=300 MIXED_RECORDS=40 PROCS="1 4" \
#       OUT=/tmp/speed-check DATA=/tmp/speed-check benchmarks/run_speed_targets.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
DATA=${DATA:-data/datasets}
OUT=${OUT:-data/results/speed_targets}
REPEATS=${REPEATS:-3}
RECORDS=${RECORDS:-60000}
ITERS=${ITERS:-100}
PROCS=${PROCS:-1 4 16}
JPEG_RECORDS=${JPEG_RECORDS:-1200}
MIXED_RECORDS=${MIXED_RECORDS:-600}
DALI_PATH=${DALI_PATH:-${XDG_CACHE_HOME:-$HOME/.cache}/lmdbio/dali}
mkdir -p "$OUT"
exec > >(tee "$OUT/speed_targets.log") 2>&1

cifar=$DATA/cifar10
[ "$RECORDS" = 60000 ] || cifar=$DATA/cifar10-$RECORDS
if [ ! -f "$cifar/data.mdb" ]; then
    "$BIN/lmdbio" make-dataset --preset cifar10 --records "$RECORDS" --out "$cifar" --force --quiet
fi
jpeg=$DATA/imagenet-jpeg-$JPEG_RECORDS
if [ ! -f "$jpeg/data.mdb" ]; then
    "$BIN/lmdbio" make-dataset --preset imagenet --encoded --records "$JPEG_RECORDS" --out "$jpeg" \
        --force --quiet
fi
"$BIN/lmdbio" index "$cifar" >/dev/null
"$BIN/lmdbio" index "$jpeg" >/dev/null
pp=.
[ -d "$DALI_PATH/nvidia" ] && pp=".:$DALI_PATH"
echo "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"

echo "== 1. decoded / raw (bench_decode.py read,batch,view), $cifar, $(date +%T)"
for p in $PROCS; do
    echo "-- P = $p"
    PYTHONPATH=$pp "$BIN/mpiexec" -n "$p" "$BIN/python" benchmarks/bench_decode.py "$cifar" auto \
        "$ITERS" "$REPEATS" read,batch,view 1
done

echo "== 2. per-step cost of a rank-batch, auto and raw (bench_batch_steps.py), $(date +%T)"
for p in $PROCS; do
    "$BIN/mpiexec" -n "$p" "$BIN/python" benchmarks/bench_batch_steps.py "$cifar" \
        --variants auto,raw --iters "$((2 * ITERS))" --repeats "$REPEATS" --out "$OUT/steps_p$p.csv"
done
last=${PROCS##* }
echo "-- auto / raw, P = $last, warm (lmdbio bench), $(date +%T)"
"$BIN/lmdbio" bench --dataset "$cifar" --variants auto --procs "$last" --cache warm \
    --batch-size 256 --iters "$((2 * ITERS))" --warmup 5 --repeats "$REPEATS" --no-lmdb \
    --timeout 600 --out "$OUT/auto-p$last" --quiet
cp "$OUT/auto-p$last/summary.csv" "$OUT/auto_p${last}_summary.csv"
cp "$OUT/auto-p$last/meta.json" "$OUT/auto_p${last}_meta.json"
rm -rf "$OUT/auto-p$last"

echo "== 3. JPEG Datums, lmdbio and DALI in HWC, 1 and 2 threads, $(date +%T)"
echo "-- one size: $jpeg"
PYTHONPATH=$pp "$BIN/mpiexec" -n 1 "$BIN/python" benchmarks/bench_jpeg.py "$jpeg" \
    "$((ITERS / 5 > 0 ? ITERS / 5 : 1))" "$REPEATS" 1,2 HWC
echo "-- mixed sizes"
PYTHONPATH=$pp "$BIN/python" benchmarks/bench_mixed_sizes.py --db "$DATA/photos-$MIXED_RECORDS" \
    --records "$MIXED_RECORDS" --repeats "$REPEATS" --threads 1,2 --layout HWC \
    --out "$OUT/mixed_sizes.csv"
echo "== done $(date +%T)"
