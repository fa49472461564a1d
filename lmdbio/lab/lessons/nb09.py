"""Facts behind the prose of notebooks/09_scaling.ipynb (see lmdbio.lab.lessons.prose).

The local sweep is ``09_scaling/summary.csv`` (one row per variant, P and
repeat; ``wall_s`` is the time of the timed iterations) and ``points.csv``
(per rank and phase: the read requests and the bytes the disk delivered,
``io_read_bytes`` from /proc/self/io over the timed window).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .prose import COMMITTED, claim_row, csv, word

NB = "09_scaling"
FULL, COAL, RAW, LMDB = "lmdbio-lmm-dio-prov-coal-stag", "lmdbio-lmm-dio-prov-coal", "raw", "lmdb"


def walls(root: Path) -> pd.DataFrame:
    """Mean wall time of the repeats, a row per variant, a column per P (the speedup table's mean)."""
    s = csv(root, f"{NB}/summary.csv")
    return s.groupby(["variant", "nprocs"])["wall_s"].mean().unstack("nprocs")


def over_raw(root: Path) -> pd.Series:
    """COAL's speed over raw's (raw's time / COAL's) at each P."""
    w = walls(root)
    return w.loc[RAW] / w.loc[COAL]


def _best_p(root: Path) -> int:
    r = over_raw(root)
    return int(r.idxmax())


def beat_raw(root: Path) -> int:
    """(variant, P) points whose mean time is below raw's at the same P."""
    w = walls(root)
    return int((w.drop(index=RAW) < w.loc[RAW]).to_numpy().sum())


def _points(root: Path) -> pd.DataFrame:
    return csv(root, f"{NB}/points.csv")


def requests(root: Path, variant: str, p: int) -> tuple[float, float]:
    """(read requests, KiB per request) of all ranks over the timed window, median of the repeats."""
    r = _points(root)
    r = r[(r["level"] == "reader") & (r["phase"] == "read") & (r["variant"] == variant) & (r["nprocs"] == p)]
    g = r.groupby("repeat")[["bytes", "calls"]].sum().median()
    return float(g["calls"]), float(g["bytes"] / g["calls"] / 1024)


def disk_mb(root: Path, variant: str, p: int) -> float:
    """MB the disk delivered to all ranks over the timed window, median of the repeats."""
    r = _points(root)
    r = r[(r["level"] == "step") & (r["phase"] == "total") & (r["variant"] == variant) & (r["nprocs"] == p)]
    return float(r.groupby("repeat")["io_read_bytes"].sum().median()) / 1e6


def requested_mb(root: Path, variant: str, p: int) -> float:
    """MB all ranks asked for in their read requests over the timed window, median of the repeats."""
    r = _points(root)
    r = r[(r["level"] == "reader") & (r["phase"] == "read") & (r["variant"] == variant) & (r["nprocs"] == p)]
    return float(r.groupby("repeat")["bytes"].sum().median()) / 1e6


def start_resident_pct(root: Path, variant: str, p: int) -> float:
    """Percent of the point's records already in the page cache when its timing began (median)."""
    s = csv(root, f"{NB}/summary.csv")
    s = s[(s["variant"] == variant) & (s["nprocs"] == p)]
    return 100 * float(s["start_resident_fraction"].median())


def _meta(root: Path) -> dict:
    p = Path(root) / NB / "meta.json"
    return json.loads((p if p.exists() else COMMITTED / NB / "meta.json").read_text())


def _c8(setting: str, col: str = "value"):
    def f(root):
        v = claim_row(root, "C8", setting)[col]
        return v if col in ("verdict", "magnitude") else float(v)
    return f


def _c8i(col: str = "value"):
    def f(root):
        return float(claim_row(root, "C8-imagenet", "model")[col])
    return f


#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {
    "the full LMDBIO stack up to 65-77x faster":
        "the papers: TOPC 2019 (ImageNet, 65x) and the 2018 poster (CIFAR10-Large, 77x)",
    "What grows with P for LMDB is its cursor walk":
        "the cursor walk's construction (lmdbio/pipeline/walk.py; TOPC 2019, problem 2); the demo counts it",
    "middle 90%": "the model's band: 5-95% of the joint samples (lmdbio.lab.model.uncertainty)",
    "65-77x": "the papers: TOPC 2019 (ImageNet, 65x) and the 2018 poster (CIFAR10-Large, 77x)",
    "77x": "the 2018 poster: the full stack over LMDB at 9,216 processes, CIFAR10-Large",
}

#: Fact name -> function of a results root (data/results, or a scratch run's results).
FACTS: dict = {
    "cores": lambda root: int(_meta(root)["host"]["cores"]),
    "max_p": lambda root: int(walls(root).columns.max()),
    "n_p": lambda root: int(len(walls(root).columns)),
    "coal_over_raw": lambda root: float(over_raw(root).max()),
    "coal_over_raw_p": _best_p,
    "coal_vs_raw_word": lambda root: word(over_raw(root).max() > 1, "faster", "slower"),
    "beat_raw": beat_raw,
    "variant_points": lambda root: int(walls(root).drop(index=RAW).size),
    "raw_calls_best": lambda root: int(requests(root, RAW, _best_p(root))[0]),
    "coal_calls_best": lambda root: int(requests(root, COAL, _best_p(root))[0]),
    "raw_kib_best": lambda root: requests(root, RAW, _best_p(root))[1],
    "coal_kib_best": lambda root: requests(root, COAL, _best_p(root))[1],
    "raw_kib_maxp": lambda root: requests(root, RAW, int(walls(root).columns.max()))[1],
    "coal_kib_maxp": lambda root: requests(root, COAL, int(walls(root).columns.max()))[1],
    "raw_disk_mb_best": lambda root: disk_mb(root, RAW, _best_p(root)),
    "coal_disk_mb_best": lambda root: disk_mb(root, COAL, _best_p(root)),
    "raw_req_mb_best": lambda root: requested_mb(root, RAW, _best_p(root)),
    "raw_disk_vs_req": lambda root: word(disk_mb(root, RAW, _best_p(root)) > requested_mb(root, RAW, _best_p(root)),
                                         "more", "less"),
    "coal_resident_pct_best": lambda root: start_resident_pct(root, COAL, _best_p(root)),
    "raw_resident_pct_best": lambda root: start_resident_pct(root, RAW, _best_p(root)),
    "coal_over_raw_maxp": lambda root: float(over_raw(root).loc[walls(root).columns.max()]),
    "raw_disk_vs_coal": lambda root: word(disk_mb(root, RAW, _best_p(root)) > disk_mb(root, COAL, _best_p(root)),
                                          "more", "fewer"),
    "lmdb_p1_ms": lambda root: 1e3 * float(walls(root).loc[LMDB].iloc[0]),
    "lmdb_maxp_ms": lambda root: 1e3 * float(walls(root).loc[LMDB].iloc[-1]),
    "lmdb_word": lambda root: word(walls(root).loc[LMDB].iloc[-1] > walls(root).loc[LMDB].iloc[0], "grows", "falls"),
    "coal_vs_raw_word_maxp": lambda root: word(float(over_raw(root).iloc[-1]) > 1, "faster", "slower"),
    "all_min_ms": lambda root: 1e3 * float(walls(root).min().min()),
    "all_max_ms": lambda root: 1e3 * float(walls(root).max().max()),
    # the page cache at the start of the timed iterations, at the largest P (a head start for LMDB)
    **{f"{k}_resident_pct_maxp": (lambda name: lambda root: start_resident_pct(root, name, int(walls(root).columns.max())))(v)
       for k, v in (("lmdb", LMDB), ("lmm", "lmdbio-lmm"), ("dm", "lmdbio-lmm-dm"), ("full", FULL))},
    "resident_lmdb_vs_full": lambda root: word(
        start_resident_pct(root, LMDB, int(walls(root).columns.max()))
        > start_resident_pct(root, FULL, int(walls(root).columns.max())), "low", "high"),
    # C8 in each setting (claims.csv)
    "c8_local": _c8("local"), "c8_gpfs": _c8("gpfs"), "c8_throttled": _c8("throttled"),
    "c8_shared": _c8("shared"), "c8_model": _c8("model"),
    "c8_model_lo": _c8("model", "band_low"), "c8_model_hi": _c8("model", "band_high"),
    "c8_shared_p": lambda root: int(claim_row(root, "C8", "shared")["nprocs"]),
    "c8_local_verdict": _c8("local", "verdict"), "c8_gpfs_verdict": _c8("gpfs", "verdict"),
    "c8_throttled_verdict": _c8("throttled", "verdict"), "c8_shared_verdict": _c8("shared", "verdict"),
    "c8_model_verdict": _c8("model", "verdict"),
    "c8_local_magnitude": _c8("local", "magnitude"), "c8_shared_magnitude": _c8("shared", "magnitude"),
    "c8_model_magnitude": _c8("model", "magnitude"),
    # C8 on ImageNet records: judged by the model only; its central value against its own band
    "c8i_model": _c8i(), "c8i_model_lo": _c8i("band_low"), "c8i_model_hi": _c8i("band_high"),
    "c8i_model_vs_band": lambda root: word(_c8i()(root) < _c8i("band_low")(root), "below",
                                           word(_c8i()(root) > _c8i("band_high")(root), "above", "inside")),
}
