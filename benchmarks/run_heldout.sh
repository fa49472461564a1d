#!/usr/bin/env bash
# Held-out sweeps of the scale model (issue 46): sweeps the model was NOT built against,
# predicted and committed BEFORE they are measured (data/results/model_heldout/predictions.csv,
# written by `python -m lmdbio.lab.model.heldout predict`, whose meta.json holds the model's
# version and code hash). This script measures them and compares:
#   epochs-local       cifar10, 4,096 records, 4 epochs, local disk, cold, P = 1, 4
#   rpn8-local         cifar10, 20,000 records, P = 16 as 2 virtual nodes of 8 ranks, cold
#   rpn16-local        the same as one node of 16 ranks
#   epochs-throttled   the 4-epoch file on the throttled device, 4 ranks per virtual node
#                      (root, loop devices and a blkio/io cgroup; skipped with the reason otherwise)
# Variants: lmdb, lmdbio-lmm, lmdbio-lmm-dm, lmdbio-lmm-dio, the full stack (bench adds raw and
# lmdb-get). About 8-10 min on a quiet 2-core machine (REPEATS=3; the 16-rank sweeps take most).
# Results: build/heldout/<sweep>/summary.csv (measured), then
# data/results/model_heldout/{comparison.csv, criterion.csv} from the check.
#
# Usage: benchmarks/run_heldout.sh          (from the repository root, after `make venv`)
#   REPEATS=1 SWEEPS=epochs-local PROCS_OVERRIDE=1 ITERS_OVERRIDE=8 benchmarks/run_heldout.sh
#   runs a tiny look (it does not match the predictions' iterations: a check of the script only)
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
WORK=${WORK:-build/heldout}
REPEATS=${REPEATS:-3}
SWEEPS=${SWEEPS:-}
VARIANTS=lmdb,lmdbio-lmm,lmdbio-lmm-dm,lmdbio-lmm-dio,lmdbio-lmm-dio-prov-coal-stag

if [ ! -f data/results/model_heldout/predictions.csv ]; then
    echo "run_heldout.sh: no data/results/model_heldout/predictions.csv: predict and commit first" \
         "(python -m lmdbio.lab.model.heldout predict)" >&2
    exit 2
fi

"$BIN/python" -m lmdbio.lab.model.heldout sweeps | while read -r name dataset records procs rpn iters warmup batch storage; do
    if [ -n "$SWEEPS" ] && [[ ",$SWEEPS," != *",$name,"* ]]; then
        continue
    fi
    if [[ "$storage" == throttle:* ]]; then
        why=$("$BIN/python" -c "from lmdbio.lab.storage import throttle_available as a; ok, why = a(); print('' if ok else why)")
        if [ -n "$why" ]; then
            echo "run_heldout.sh: $name skipped: $why" >&2
            continue
        fi
    fi
    dir=$WORK/datasets/$dataset
    if [ ! -f "$dir/data.mdb" ]; then
        "$BIN/lmdbio" make-dataset --preset cifar10 --records "$records" --out "$dir" --force
    fi
    "$BIN/lmdbio" index "$dir" >/dev/null
    extra=()
    if [ "$rpn" != "0" ]; then extra+=(--ranks-per-node "$rpn"); fi
    if [ "$storage" != "local" ]; then extra+=(--storage "$storage"); fi
    out=$WORK/$name
    [[ "$out" == /* ]] || out=$PWD/$out
    echo "run_heldout.sh: $name" >&2
    "$BIN/lmdbio" bench --dataset "$dir" --variants "$VARIANTS" --procs "${PROCS_OVERRIDE:-$procs}" \
        --cache cold --batch-size "$batch" --iters "${ITERS_OVERRIDE:-$iters}" --warmup "$warmup" \
        --repeats "$REPEATS" --timeout 300 --quiet "${extra[@]}" --out "$out" </dev/null
done

"$BIN/python" -m lmdbio.lab.model.heldout check --measured "$WORK"
