#!/usr/bin/env bash
# Issue 19 (part 3): time-dilated emulated GPFS up to P = 64.
# The emulated GPFS of 2017 (lmdbio.lab.pfs, profile gpfs-2017) with its storage
# time stretched k times (LMDBIO_PFS_TIME_SCALE = k: latency and seek x k,
# bandwidths / k; every storage ratio kept), so that this 2-core machine's
# CPU shrinks relative to the I/O. For each k in TIME_SCALES, the papers'
# seven variants plus raw, lmdb and lmdb-get, cold, cifar10 (60,000 records
# of 3 KB), global batch 256, P = 4, 16, 64 on virtual nodes of 4 ranks
# (P = 64: 16 node views, each its own page cache), repeats interleaved.
# A ratio (variant / lmdb) that stops moving as k grows is one the CPU no
# longer decides; benchmarks/dilated_report.py finds where.
# Results (commit-ready): data/results/dilated/{summary.csv, meta.json};
# the per-rank points stay in build/dilated-sweep/.
#
# Usage: benchmarks/run_dilated_sweep.sh       (repository root, after `make venv`)
#   RUNS="1:4,16:1 4:4,16:1" benchmarks/run_dilated_sweep.sh   a quicker look
# A finished K:PROCS run is kept and skipped (RERUN=1 runs it again), so an
# interrupted sweep resumes.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
DATA=${DATA:-data/datasets}
OUT=${OUT:-data/results/dilated}
WORK=${WORK:-build/dilated-sweep}
# Runs as K:PROCS:REPEATS. P = 64 costs about a minute per point before the
# first batch on 2 cores (64 interpreters start, import and open), so it runs
# once per k; P = 4 and 16 run twice.
RUNS=${RUNS:-"1:4,16:2 4:4,16:2 16:4,16:2 4:64:1 16:64:1 1:64:1"}
VARIANTS=${VARIANTS:-all}
BATCH=${BATCH:-256}
PROFILE=${PROFILE:-gpfs-2017}
RANKS_PER_NODE=${RANKS_PER_NODE:-4}
ITERS=${ITERS:-24}

why=$("$BIN/python" -c "from lmdbio.lab.experiments import pfs_unavailable as u; print(u() or '')")
if [ -n "$why" ]; then
    echo "run_dilated_sweep.sh: skipped: $why" >&2
    exit 0
fi
dir=$DATA/cifar10
if [ ! -f "$dir/data.mdb" ]; then
    "$BIN/lmdbio" make-dataset --preset cifar10 --records 60000 --out "$dir" --force
fi
"$BIN/lmdbio" index "$dir" >/dev/null

for run in $RUNS; do
    IFS=: read -r k procs repeats <<<"$run"
    [ -f "$WORK/k$k-p${procs//,/-}/summary.csv" ] && [ -z "${RERUN:-}" ] && continue   # resume
    echo "== time scale $k, P = $procs, $repeats repeat(s): $(date +%T)"
    LMDBIO_PFS_TIME_SCALE=$k "$BIN/lmdbio" bench --dataset "$dir" --variants "$VARIANTS" \
        --procs "$procs" --cache cold --batch-size "$BATCH" --iters "$ITERS" --warmup 1 \
        --repeats "$repeats" --ranks-per-node "$RANKS_PER_NODE" --storage "pfs:$PROFILE" \
        --timeout 900 --quiet --out "$WORK/k$k-p${procs//,/-}"
done
"$BIN/python" benchmarks/dilated_report.py --work "$WORK" --out "$OUT"
