"""Facts behind the prose of notebooks/04_dm.ipynb (see lmdbio.lab.lessons.prose)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .nb02 import FACTS as _F02
from .prose import claim_row, cores, csv, word

NB = "04_dm"
LMM, DM = "lmdbio-lmm", "lmdbio-lmm-dm"

#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {
    "about 2x faster than LMDBIO-LMM and more than 30x faster than LMDB": "ICPADS 2017 (claim C3)",
    "about 2x": "ICPADS 2017 (LMDBIO-DM over LMDBIO-LMM, claim C3's paper factor)",
    "more than 30x": "ICPADS 2017 (LMDBIO-DM over LMDB at scale)",
    ">= 1.2": "claim C3's criterion (lmdbio/lab/claims/)",
    "1 ms per request": "lmdbio/lab/pfs/profiles.toml (gpfs-2017 latency)",
    "25% validation": "the model's validation criterion (model_validation/criterion.csv)",
    "a factor of 10": "lmdbio.lab.claims.UNINFORMATIVE (a model band wider than 10x says little)",
}


_csv = csv   # read once per file version


def _points(root, cache) -> pd.DataFrame:
    p = _csv(root, f"{NB}/points.csv")
    return p[p["cache"] == cache]


def _pmax(root) -> int:
    return int(_points(root, "cold")["nprocs"].max())


def _per_iter(root, cache, phases, col) -> pd.DataFrame:
    from ..tables import per_iteration

    return per_iteration(_points(root, cache), "reader", phases, [col])


def _at(df, variant, p, col) -> float:
    return float(df[(df["variant"] == variant) & (df["nprocs"] == p)][col].iloc[0])


def _walked(root, variant):
    return _at(_per_iter(root, "warm", ["locate"], "records_walked"), variant, _pmax(root), "records_walked_sum")


def _phase_ms(root, variant, phase):
    """Milliseconds per iteration all readers spend in ``phase`` (cold), at the largest P."""
    return 1e3 * _at(_per_iter(root, "cold", [phase], "wall_s"), variant, _pmax(root), "wall_s_sum")


def _wait_pct(root, variant) -> float:
    s = _csv(root, f"{NB}/summary.csv")
    s = s[(s["variant"] == variant) & (s["nprocs"] == _pmax(root)) & (s["cache"] == "cold")]
    med = s[["read_s", "wait_s", "comm_s", "compute_s"]].median()
    return 100 * float(med["wait_s"]) / max(float(med.sum()), float(s["wall_s"].median()))


def _claim(root, setting, col, dataset="cifar10"):
    p = Path(root) / "claims.csv"
    if setting == "model" and p.exists():
        rows = pd.read_csv(p)
        r = rows[(rows["claim"] == "C3") & (rows["setting"] == "model") & (rows["dataset"] == dataset)]
        if len(r):
            return r.iloc[0][col]
    return claim_row(root, "C3", setting)[col]


def _num(root, setting, col="value"):
    return float(_claim(root, setting, col))


def _spec(root, mode, col) -> float:
    s = _csv(root, f"{NB}/speculation/summary.csv").set_index("mode")
    key = next(m for m in s.index if m.startswith(mode))
    return float(s.loc[key, col])


def _specs(root, col):
    return _spec(root, "ring +", col), _spec(root, "ring only", col)


#: Fact name -> function of a results root (data/results, or a scratch run's results).
FACTS: dict = {
    "dm_walk_word": lambda r: word(_walked(r, DM) < _walked(r, LMM), "fewer", "more"),
    "cores": lambda r: cores(r, NB),
    "pmax": _pmax,
    "val_local_cold": lambda r: _F02["val_local_cold"](r),
    "val_variants": lambda r: _F02["val_variants"](r),
    "walked_lmm_pmax": lambda r: _walked(r, LMM),
    "walked_dm_pmax": lambda r: _walked(r, DM),
    "ring_wait_ms": lambda r: _phase_ms(r, DM, "ring_wait"),
    "lmm_locate_ms": lambda r: _phase_ms(r, LMM, "locate"),
    "dm_locate_ms": lambda r: _phase_ms(r, DM, "locate"),
    "dm_wait_pct": lambda r: _wait_pct(r, DM),
    "dm_over_lmm_local": lambda r: _num(r, "local"),
    "lmm_over_dm_local": lambda r: 1 / _num(r, "local"),
    "dm_vs_lmm_local": lambda r: word(_num(r, "local") < 1, "slower", "faster"),
    "c3_paper": lambda r: _num(r, "local", "paper_factor"),
    **{f"c3_{s}": (lambda at: lambda r: _num(r, at))(s) for s in ("local", "gpfs", "throttled", "shared", "model")},
    **{f"c3_{s}_{k}": (lambda at, col: lambda r: _claim(r, at, col))(s, k)
       for s in ("local", "gpfs", "throttled", "shared", "model") for k in ("verdict", "magnitude")},
    "c3_model_lo": lambda r: _num(r, "model", "band_low"),
    "c3_model_hi": lambda r: _num(r, "model", "band_high"),
    "c3_shared_p": lambda r: int(_num(r, "shared", "nprocs")),
    # DM's speculation (make bench-dm, emulated GPFS)
    "spec_majflt": lambda r: _spec(r, "ring +", "majflt_per_batch_median"),
    "ring_majflt": lambda r: _spec(r, "ring only", "majflt_per_batch_median"),
    "spec_faults_word": lambda r: word(_specs(r, "majflt_per_batch_median")[0]
                                       > _specs(r, "majflt_per_batch_median")[1], "adds", "cuts"),
    "spec_touched": lambda r: _spec(r, "ring +", "touched_pages_median"),
    "spec_missed": lambda r: _spec(r, "ring +", "missed_pages_median"),
    "spec_extra": lambda r: _spec(r, "ring +", "extra_pages_median"),
    "spec_read_ms": lambda r: 1e3 * _spec(r, "ring +", "read_s_per_batch_median"),
    "ring_read_ms": lambda r: 1e3 * _spec(r, "ring only", "read_s_per_batch_median"),
    "spec_read_word": lambda r: word(_specs(r, "read_s_per_batch_median")[0]
                                     > _specs(r, "read_s_per_batch_median")[1], "slower", "faster"),
    "spec_requests": lambda r: _spec(r, "ring +", "storage_requests_median"),
    "ring_requests": lambda r: _spec(r, "ring only", "storage_requests_median"),
}
