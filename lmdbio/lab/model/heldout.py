"""Held-out sweeps: predicted and committed before they are measured, then compared.

The model was built while looking at the validation sweeps (``lmdbio model
validate``); these sweeps differ from them in what the model must get right
without having seen it:

- ``epochs-local``: several epochs over a 4,096-record CIFAR-10 file on the
  local disk, cold (the page cache keeps what the first epoch read:
  ``epoch_cache``);
- ``rpn8-local``, ``rpn16-local``: 16 ranks as 2 virtual nodes of 8 and as
  one of 16 on the local disk, cold (the validation sweeps ran 1 or 4 ranks
  per node);
- ``epochs-throttled``: the multi-epoch file through the throttled block
  device, 4 ranks per virtual node (root only; skipped elsewhere).

A data set larger than the node's page cache cannot be measured here in
minutes (the cache is the machine's memory); the sweeps say so rather than
pretend. ``python -m lmdbio.lab.model.heldout predict`` writes
``data/results/model_heldout/predictions.csv`` and ``meta.json`` (the
model's version and code hash); ``benchmarks/run_heldout.sh`` measures the
sweeps and runs ``check``, which compares and counts the criterion
(median |relative error| <= 25% per sweep and variant) and the storage
counters of DM on the committed device sweeps, and rewrites the criterion
over every setting beside the validation (``model_validation/criterion_all.csv``,
:mod:`lmdbio.lab.model.criterion`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..paths import REPO
from .criterion import CRITERION

__all__ = ["Sweep", "SWEEPS", "VARIANTS", "DEFAULT_OUT", "MEASURED", "predict_sweeps", "write",
           "compare", "criterion", "counter_agreement", "main"]

DEFAULT_OUT = REPO / "data" / "results" / "model_heldout"
#: Where run_heldout.sh writes the measured sweeps (one folder per sweep, bench's summary.csv).
MEASURED = REPO / "build" / "heldout"
VARIANTS = ("lmdb", "lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov-coal-stag")


@dataclass(frozen=True)
class Sweep:
    """One held-out sweep as ``lmdbio bench`` runs it."""

    name: str
    dataset: str          # the folder under build/heldout/datasets
    records: int          # records in the data set
    procs: tuple
    ranks_per_node: int   # 0: every rank on one node
    iters: int
    storage: str = "local"
    batch_size: int = 256
    warmup: int = 1
    record_bytes: int = 3087   # lmdbio.datasets preset cifar10: a 3x32x32 Datum

    @property
    def setting(self) -> str:
        return "throttled block device" if self.storage.startswith("throttle:") else "local disk"


SWEEPS = (
    Sweep("epochs-local", "cifar10-4k", 4096, (1, 4), 0, 63),            # 64 x 256 / 4,096 = 4 epochs
    Sweep("rpn8-local", "cifar10-20k", 20000, (16,), 8, 40),
    Sweep("rpn16-local", "cifar10-20k", 20000, (16,), 16, 40),
    Sweep("epochs-throttled", "cifar10-4k", 4096, (4,), 4, 63, storage="throttle:gpfs-2017"),
)


def _platform(sweep: Sweep, base):
    from .validate import throttled_profile

    p = base.with_(ranks_per_node=sweep.ranks_per_node)
    if sweep.storage.startswith("throttle:"):
        p = p.with_(storage=throttled_profile(sweep.storage.split(":", 1)[1], {}, sweep.ranks_per_node))
    return p


def predict_sweeps(cal=None, platform: str = "this-machine", sweeps=SWEEPS, budget: int = 20000) -> list[dict]:
    """One row per sweep x variant x P: the predicted seconds of the timed loop (bench's ``wall_s``)."""
    from .calibrate import load_calibration
    from .platform import Workload, load_platform
    from .predict import predict_point

    cal = cal or load_calibration()
    base = load_platform(platform)
    rows = []
    for sw in sweeps:
        plat = _platform(sw, base)
        # The run bench times: warmup batches first, then iters; the page cache sees both.
        w = Workload(sw.dataset, record_bytes=sw.record_bytes, records=sw.records,
                     batch_size=sw.batch_size, iterations=sw.iters + sw.warmup)
        for v in VARIANTS:
            for P in sw.procs:
                r = predict_point(plat, w, v, int(P), cal, cache="cold", budget=budget)
                timed = sw.iters / (sw.iters + sw.warmup)
                rows.append({"sweep": sw.name, "setting": sw.setting, "variant": v, "nprocs": int(P),
                             "ranks_per_node": sw.ranks_per_node, "storage": sw.storage,
                             "records": sw.records, "iters": sw.iters, "epochs": r["epochs"],
                             "predicted_s": r["per_iteration_s"] * (sw.iters + sw.warmup) * timed,
                             "epoch_cache_share": r.get("epoch_cache_share", 0.0),
                             "dominant_mechanism": r["dominant_mechanism"]})
    return rows


def write(rows: list[dict], out=DEFAULT_OUT, config: dict | None = None) -> Path:
    """``predictions.csv`` and ``meta.json`` (model version and code hash) in ``out``."""
    import pandas as pd

    from lmdbio.lab.meta import write_results_meta
    from .output import MODEL_VERSION, model_hash

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "predictions.csv", index=False)
    write_results_meta(out, config or {}, files=["predictions.csv"],
                       model={"version": MODEL_VERSION, "sha256": model_hash(),
                              "hashed": "lmdbio/lab/model/*.py"},
                       sweeps=[sw.__dict__ for sw in SWEEPS],
                       note="predicted before the sweeps were measured; benchmarks/run_heldout.sh "
                            "measures them and python -m lmdbio.lab.model.heldout check compares")
    return out


def compare(predicted, measured_root=MEASURED):
    """Predicted rows joined with the measured medians of each sweep's ``summary.csv``."""
    import pandas as pd

    pred = pd.DataFrame(predicted) if not isinstance(predicted, pd.DataFrame) else predicted
    parts = []
    for name in pred["sweep"].unique():
        f = Path(measured_root) / str(name) / "summary.csv"
        if not f.exists():
            continue
        m = pd.read_csv(f)
        m = m[m["status"] == "ok"].groupby(["variant", "nprocs", "iters"])["wall_s"].agg(
            measured_s="median", measured_min_s="min", measured_max_s="max", repeats="size").reset_index()
        parts.append(m.assign(sweep=name))
    if not parts:
        return pred.iloc[0:0].assign(measured_s=[], rel_error=[])
    # Only points run as predicted (a shorter look at the script has other iterations).
    d = pred.merge(pd.concat(parts), on=["sweep", "variant", "nprocs", "iters"], how="inner")
    return d.assign(rel_error=(d["predicted_s"] - d["measured_s"]) / d["measured_s"])


def criterion(df):
    """Per sweep and variant: points, median |relative error| and whether it meets the criterion."""
    import pandas as pd

    if df.empty:
        return pd.DataFrame(columns=["sweep", "setting", "variant", "points", "median_abs_error",
                                     "median_signed_error", "meets_criterion"])
    g = df.assign(abs_error=df["rel_error"].abs()).groupby(["sweep", "setting", "variant"], sort=False)
    t = g.agg(points=("abs_error", "size"), median_abs_error=("abs_error", "median"),
              median_signed_error=("rel_error", "median")).reset_index()
    return t.assign(meets_criterion=t["median_abs_error"] <= CRITERION)


def counter_agreement(cal=None):
    """DM's predicted storage requests over the devices' counters in the committed throttled and
    shared sweeps (P >= 16): a ratio per point; the model's edge read-around was added while
    looking at these counters, so they are reported here, not asserted."""
    from .calibrate import load_calibration
    from .validate import find_summaries, validate

    r = REPO / "data" / "results"
    sums = find_summaries([r / "shared", r / "throttled"])
    if not sums:
        return []
    df = validate(sums, "this-machine", cal or load_calibration())
    dm = df[(df["variant"] == "lmdbio-lmm-dm") & (df["nprocs"] >= 16) & df["measured_storage_requests"].notna()]
    return [{"setting": x.setting, "nprocs": int(x.nprocs),
             "requests_ratio": x.pred_storage_requests / x.measured_storage_requests}
            for x in dm.itertuples()]


def _check(out: Path, measured: Path) -> int:
    import pandas as pd

    from .output import model_hash

    meta = json.loads((out / "meta.json").read_text())
    frozen = meta.get("model", {}).get("sha256", "")
    if frozen != model_hash():
        print(f"heldout: the model's code changed since the predictions ({frozen[:12]} -> "
              f"{model_hash()[:12]}): the comparison is of the frozen predictions", file=sys.stderr)
    d = compare(pd.read_csv(out / "predictions.csv"), measured)
    if d.empty:
        print(f"heldout: no measured sweep under {measured}; run benchmarks/run_heldout.sh", file=sys.stderr)
        return 1
    t = criterion(d)
    d.to_csv(out / "comparison.csv", index=False)
    t.to_csv(out / "criterion.csv", index=False)
    # The criterion over every setting counts these sweeps: rewrite it beside the validation.
    val = out.parent / "model_validation"
    if (val / "summary.csv").exists():
        from .criterion import write as write_criterion

        print(write_criterion(pd.read_csv(val / "summary.csv"), val, out / "comparison.csv"))
    print(t.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"held out: {int(t['meets_criterion'].sum())} of {len(t)} sweep x variant cells within "
          f"{CRITERION:.0%}")
    for c in counter_agreement():
        print(f"DM requests, model / device counters: {c['setting']} P={c['nprocs']}: {c['requests_ratio']:.2f}")
    return 0


def main(argv=None) -> int:
    """``predict`` (before measuring) or ``check`` (after run_heldout.sh measured the sweeps)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m lmdbio.lab.model.heldout", description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=["predict", "check", "sweeps"])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--measured", default=str(MEASURED))
    ap.add_argument("--budget", type=int, default=20000)
    a = ap.parse_args(argv)
    if a.action == "sweeps":     # for run_heldout.sh: one line per sweep
        for sw in SWEEPS:
            print(sw.name, sw.dataset, sw.records, ",".join(map(str, sw.procs)), sw.ranks_per_node,
                  sw.iters, sw.warmup, sw.batch_size, sw.storage)
        return 0
    if a.action == "predict":
        print(write(predict_sweeps(budget=a.budget), a.out, {"budget": a.budget, "argv": sys.argv[1:]})
              / "predictions.csv")
        return 0
    return _check(Path(a.out), Path(a.measured))


if __name__ == "__main__":
    sys.exit(main())
