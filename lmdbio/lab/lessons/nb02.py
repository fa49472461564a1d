"""Facts behind the prose of notebooks/02_lmdb_analysis.ipynb (see lmdbio.lab.lessons.prose).

Also :func:`median_repeat`, the repeat the time-breakdown figure draws: the
one whose I/O share is the median of its P's repeats, the statistic claim
C1 judges, so the figure's share and the C1 panel's are one number.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .prose import COMMITTED, claim_row, csv, json_file, word

NB = "02_lmdb_analysis"
PARTS = ["read_s", "wait_s", "comm_s", "compute_s"]

#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {
    "so sleep time and context switches grow with the processes per node":
        "TOPC 2019, the papers' problem 1 (their explanation, not a measurement here)",
    "the seek cost grows with the rank count": "TOPC 2019, the papers' problem 2",
    "far smaller than the storage's stripes": "TOPC 2019, the papers' problem 4",
    "so sleep and context switches grow with the ranks per node":
        "TOPC 2019, the papers' problem 1 (their explanation, tested below)",
    "A rank walks P times more than it needs":
        ("the cursor walk's construction (lmdbio/pipeline/walk.py): each rank walks the global batch of B "
         "records to keep B/P"),
    "More, smaller requests for the same bytes is problem 3": "TOPC 2019, the papers' problem 3 (implicit small I/O)",
    "takes a slower device per fault":
        "an inference from C1 on the throttled device and make bench-faulters' sleep, both stated above",
    "up to 90%": "TOPC 2019 (the papers' I/O share of training time at scale, claim C1)",
    "within 25%": "the model's validation criterion (lmdbio/lab/model/validate.py, model_validation/criterion.csv)",
    "1 ms per request": "lmdbio/lab/pfs/profiles.toml (gpfs-2017 latency)",
    "256 KiB stripes": "lmdbio/lab/pfs/profiles.toml (gpfs-2017 stripe size)",
    "10-100,000 s": "the poster's time axis (PAPER.md), claim A1's criterion",
    ">= 0.5": "claim C1's criterion (lmdbio/lab/claims/)",
}


_csv = csv   # read once per file version


def _summary(root) -> pd.DataFrame:
    s = _csv(root, f"{NB}/summary.csv")
    return s[s["status"].fillna("ok") == "ok"] if "status" in s.columns else s


def _lmdb_imagenet(root) -> pd.DataFrame:
    s = _summary(root)
    s = s[(s["variant"] == "lmdb") & (s["dataset_name"] == "imagenet")]
    return s.assign(share=(s["read_s"] + s["wait_s"]) / s[PARTS].sum(axis=1))


def median_repeat(summary: pd.DataFrame) -> pd.DataFrame:
    """Per process count, the one repeat whose I/O share (read + wait over read, wait, allreduce
    and compute) is nearest the median of that P's repeats: what C1 judges, drawn whole."""
    s = summary.assign(share=(summary["read_s"] + summary["wait_s"]) / summary[PARTS].sum(axis=1))
    keep = []
    for _, g in s.groupby("nprocs"):
        keep.append((g["share"] - g["share"].median()).abs().idxmin())
    return summary.loc[keep]


def _share(root, p, how="median"):
    g = _lmdb_imagenet(root)
    return float(getattr(g[g["nprocs"] == p]["share"], how)())


def _pmax(root) -> int:
    return int(_lmdb_imagenet(root)["nprocs"].max())


def _per_iter(root, phases, cols, level, dataset="imagenet", cache=None):
    from ..tables import per_iteration

    p = _csv(root, f"{NB}/points.csv")
    p = p[p["dataset_name"] == dataset]
    if cache is not None:
        p = p[p["cache"] == cache]
    return per_iteration(p, level, phases, cols)


def _contention(root) -> pd.DataFrame:
    return _per_iter(root, ["total"], ["sleep_s", "vcsw", "ivcsw"], "step")


def _at(df, variant, p, col):
    return float(df[(df["variant"] == variant) & (df["nprocs"] == p)][col].iloc[0])


def _requests(root) -> pd.DataFrame:
    from ..tables import requests_per_iteration

    p = _csv(root, f"{NB}/points.csv")
    return requests_per_iteration(p[p["dataset_name"] == "imagenet"])


def _faults_per_rank(root) -> pd.Series:
    r = _requests(root)
    return r[r["variant"] == "lmdb"].set_index("nprocs")["requests"]


def _kib_per_fault(root, p) -> float:
    r = _requests(root)
    return _at(r, "lmdb", p, "bytes_per_request") / 1024


def _loop_share(root, p, col) -> float:
    """``col``'s share of LMDB's loop at P (medians over repeats, as lmdbio.lab.claims' context says)."""
    s = _lmdb_imagenet(root)
    s = s[s["nprocs"] == p]
    med = s[PARTS].median()
    total = max(float(med.sum()), float(s["wall_s"].median()))
    return 100 * float(med[col]) / total


def _claim(root, setting, dataset=None):
    if dataset is None:
        return claim_row(root, "C1", setting)
    p = Path(root) / "claims.csv"
    df = pd.read_csv(p if p.exists() else COMMITTED / "claims.csv")
    return df[(df["claim"] == "C1") & (df["setting"] == setting) & (df["dataset"] == dataset)].iloc[0]


def _criterion(root) -> pd.DataFrame:
    return _csv(root, "model_validation/criterion.csv")


def _meeting(root, setting_prefix, cache) -> int:
    c = _criterion(root)
    row = c[c["setting"].str.startswith(setting_prefix) & (c["cache"] == cache)].iloc[0]
    return int(row["variants_meeting"])


def _variants(root) -> int:
    return int(_criterion(root)["variants"].max())


def _absolute(root) -> pd.DataFrame:
    a = _csv(root, "model_prediction/absolute.csv")
    return a[(a["bound"] == "poster axis top") & (a["workload"] == "cifar10-large-alexnet")]


def _worst(root, batch, variant="lmdb") -> pd.Series:
    a = _absolute(root)
    a = a[(a["batch"] == batch) & (a["variant"] == variant)]
    return a.loc[a["predicted_s"].idxmax()]


def _faulters(root) -> pd.Series:
    """Summed sleep of K processes faulting on one cold file (make bench-faulters), median of repeats."""
    f = _csv(root, "throttled/faulters.csv")
    return f.groupby("K")["sleep_s_sum"].median()


def _a1(root, cid):
    return claim_row(root, cid, "model")


#: Fact name -> function of a results root (data/results, or a scratch run's results).
FACTS: dict = {
    "sleep_lmdb_word": lambda r: word(_at(_contention(r), "lmdb", _pmax(r), "sleep_s_sum")
                                      > _at(_contention(r), "lmdb", 1, "sleep_s_sum"), "grow", "do not grow"),
    "kib_fault_word": lambda r: word(_kib_per_fault(r, _pmax(r)) < _kib_per_fault(r, 1), "smaller", "larger"),
    "cursor_step_us": lambda r: 1e6 * json_file(r, "model_calibration/calibration.json")["values"]["cursor_step_s"],
    # time breakdown and C1
    "share_p1_pct": lambda r: 100 * _share(r, 1),
    "c1_p1": lambda r: _share(r, 1),
    "share_mean_p1_pct": lambda r: 100 * _share(r, 1, "mean"),
    "share_max_p1": lambda r: _share(r, 1, "max"),
    "pmax": _pmax,
    "c1_local": lambda r: float(_claim(r, "local")["value"]),
    "c1_local_verdict": lambda r: _claim(r, "local")["verdict"],
    "c1_local_magnitude": lambda r: _claim(r, "local")["magnitude"],
    "c1_gpfs": lambda r: float(_claim(r, "gpfs")["value"]),
    "c1_gpfs_verdict": lambda r: _claim(r, "gpfs")["verdict"],
    "c1_gpfs_magnitude": lambda r: _claim(r, "gpfs")["magnitude"],
    "c1_throttled": lambda r: float(_claim(r, "throttled")["value"]),
    "c1_throttled_verdict": lambda r: _claim(r, "throttled")["verdict"],
    "c1_throttled_magnitude": lambda r: _claim(r, "throttled")["magnitude"],
    "c1_model": lambda r: float(_claim(r, "model", "imagenet")["value"]),
    "c1_model_verdict": lambda r: _claim(r, "model", "imagenet")["verdict"],
    "c1_model_magnitude": lambda r: _claim(r, "model", "imagenet")["magnitude"],
    "c1_paper": lambda r: float(_claim(r, "local")["paper_factor"]),
    "allreduce_pmax_pct": lambda r: _loop_share(r, _pmax(r), "comm_s"),
    "compute_pmax_pct": lambda r: _loop_share(r, _pmax(r), "compute_s"),
    # problem 1
    "vcsw_per_rank_pmax": lambda r: _at(_contention(r), "lmdb", _pmax(r), "vcsw_sum") / _pmax(r),
    "ivcsw_pmax": lambda r: _at(_contention(r), "lmdb", _pmax(r), "ivcsw_sum"),
    "ivcsw_p2": lambda r: _at(_contention(r), "lmdb", 2, "ivcsw_sum"),
    "sleep_lmdb_pmax_ms": lambda r: 1e3 * _at(_contention(r), "lmdb", _pmax(r), "sleep_s_sum"),
    "sleep_dio_pmax_ms": lambda r: 1e3 * _at(_contention(r), "lmdbio-lmm-dio", _pmax(r), "sleep_s_sum"),
    "sleep_dio_vs_lmdb": lambda r: word(_at(_contention(r), "lmdbio-lmm-dio", _pmax(r), "sleep_s_sum")
                                        > _at(_contention(r), "lmdb", _pmax(r), "sleep_s_sum"), "more", "less"),
    "faulters_sleep_k1": lambda r: float(_faulters(r).iloc[0]),
    "faulters_sleep_kmax": lambda r: float(_faulters(r).iloc[-1]),
    "faulters_kmax": lambda r: int(_faulters(r).index[-1]),
    # problem 2
    "walked_per_rank_pmax": lambda r: _at(_per_iter(r, ["locate"], ["records_walked"], "reader", "cifar10", "warm"),
                                          "lmdb", _pmax(r), "records_walked"),
    # problem 3
    "faults_rank_min": lambda r: float(_faults_per_rank(r).min()),
    "faults_rank_max": lambda r: float(_faults_per_rank(r).max()),
    "kib_fault_p1": lambda r: _kib_per_fault(r, 1),
    "kib_fault_pmax": lambda r: _kib_per_fault(r, _pmax(r)),
    "dio_calls": lambda r: float(_requests(r).query("variant == 'lmdbio-lmm-dio'")["requests_sum"].max()),
    "dio_kib": lambda r: float(_requests(r).query("variant == 'lmdbio-lmm-dio'")["bytes_per_request"].max()) / 1024,
    # the scale model, in brief
    "val_variants": _variants,
    "val_local_cold": lambda r: _meeting(r, "local disk", "cold"),
    "val_local_warm": lambda r: _meeting(r, "local disk", "warm"),
    "val_gpfs": lambda r: _meeting(r, "emulated GPFS", "cold"),
    "val_throttled": lambda r: _meeting(r, "throttled", "cold"),
    "val_shared": lambda r: _meeting(r, "shared", "cold"),
    "val_dilated": lambda r: _meeting(r, "time-dilated", "cold"),
    "a1_verdict": lambda r: _a1(r, "A1")["verdict"],
    "a1_pp_verdict": lambda r: _a1(r, "A1-per-process")["verdict"],
    "a1_pp_worst_s": lambda r: float(_worst(r, "per-process")["predicted_s"]),
    "a1_pp_worst_p": lambda r: int(_worst(r, "per-process")["nprocs"]),
    "a1_pp_over_axis": lambda r: float(_worst(r, "per-process")["predicted_s"]) / 1e5,
    "a1_global_worst_s": lambda r: float(_worst(r, "global")["predicted_s"]),
}
