"""Facts behind the prose of notebooks/07_coal.ipynb (see lmdbio.lab.lessons.prose)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .prose import COMMITTED, claim_row, csv, word

NB = "07_coal"
PROV, COAL = "lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal"

#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {
    "at most 128 KiB": "lmdbio/lab/pfs/profiles.toml (the FUSE mount's read_size and readahead)",
    "the block layer passes larger requests on":
        "notebook 09's throttled request counts, stated in the next sentence",
    "To see COAL pay off takes storage that receives a large request whole and charges per request":
        ("an inference from the verdicts above (yes only on the throttled device) and the FUSE mount's 128 KiB "
         "cap"),
    "1 ms per request": "lmdbio/lab/pfs/profiles.toml, gpfs-2017 latency_s (PFS.md's estimate)",
}


def _points(root: Path, setting: str = "") -> pd.DataFrame:
    """One row per point (variant, P, coalesce target, repeat) with its delivered MB/s."""
    rows = csv(root, f"{NB}/{setting + '/' if setting else ''}rows.csv")
    keys = [k for k in ("variant", "nprocs", "coalesce_bytes", "cache", "repeat") if k in rows]
    d = rows.drop_duplicates(keys)
    return d.assign(mb_per_s=d["record_bytes"] / d["wall_s_total"] / 1e6)


def _sweep(root: Path, setting: str, nprocs: int) -> pd.Series:
    """Mean MB/s per coalesce target at P (0: no COAL), as the sweep figure draws it."""
    d = _points(root, setting)
    d = d[d["nprocs"] == nprocs]
    return d.groupby(d["coalesce_bytes"].fillna(0))["mb_per_s"].mean()


def _iter_mb(root: Path) -> float:
    """One iteration's bytes for one node's reader (MB): the global batch of mean-sized records."""
    d = _points(root)
    r = d.iloc[0]
    return float(r["batch_size"] * r["record_bytes"] / r["records"]) / 1e6


def _scaling_gpfs(root: Path, variant: str, nprocs: int, col: str) -> float:
    return _scaling(root, "gpfs", variant, nprocs, col)


def _scaling(root: Path, setting: str, variant: str, nprocs: int, col: str) -> float:
    """Notebook 09's storage counters in ``setting`` (it runs PROV and COAL at the default target)."""
    s = csv(root, f"09_scaling/{setting}/summary.csv")
    s = s[(s["variant"] == variant) & (s["nprocs"] == nprocs)]
    if "cache" in s:
        s = s[s["cache"] == "cold"]
    return float(s[col].median())


def _close(a: float, b: float, within: float = 0.05) -> bool:
    """Two counts within ``within`` of the larger: "the same" number of requests."""
    return abs(a - b) <= within * max(abs(a), abs(b))


def _claim_model(root: Path, dataset: str) -> pd.Series:
    """C6's model row for ``dataset``'s workload (claims.csv holds one per workload)."""
    p = Path(root) / "claims.csv"
    df = pd.read_csv(p if p.exists() else COMMITTED / "claims.csv")
    rows = df[(df["claim"] == "C6") & (df["setting"] == "model") & (df["dataset"] == dataset)]
    if rows.empty:
        raise KeyError(f"no model row of C6 for {dataset} in {p}")
    return rows.iloc[0]


def _flat(root: Path, setting: str, nprocs: int, within: float = 0.1) -> str:
    """"flat" when every point of the sweep at P lies within ``within`` of its mean."""
    s = _sweep(root, setting, nprocs)
    return word(float(s.max() / s.min()) <= 1 + within, "flat", "not flat")


#: Fact name -> function of a results root (data/results, or a scratch run's results).
FACTS: dict = {
    "iter_mb": _iter_mb,
    # local disk: the sweep at the judged P
    "local_none_p8": lambda root: float(_sweep(root, "", 8).loc[0]),
    "local_coal_min_p8": lambda root: float(_sweep(root, "", 8).drop(0).min()),
    "local_coal_max_p8": lambda root: float(_sweep(root, "", 8).drop(0).max()),
    "c6_local": lambda root: float(claim_row(root, "C6", "local")["value"]),
    "c6_local_verdict": lambda root: claim_row(root, "C6", "local")["verdict"],
    "c6_local_lo": lambda root: float(_ratio_range(root, "local")[0]),
    "c6_local_hi": lambda root: float(_ratio_range(root, "local")[1]),
    # the emulated GPFS
    "gpfs_flat_p1": lambda root: _flat(root, "gpfs", 1),
    "gpfs_min_p1": lambda root: float(_sweep(root, "gpfs", 1).min()),
    "gpfs_max_p1": lambda root: float(_sweep(root, "gpfs", 1).max()),
    "gpfs_flat_p8": lambda root: _flat(root, "gpfs", 8),
    "gpfs_min_p8": lambda root: float(_sweep(root, "gpfs", 8).min()),
    "gpfs_max_p8": lambda root: float(_sweep(root, "gpfs", 8).max()),
    "c6_gpfs": lambda root: float(claim_row(root, "C6", "gpfs")["value"]),
    "c6_gpfs_verdict": lambda root: claim_row(root, "C6", "gpfs")["verdict"],
    "gpfs_coal_requests_p8": lambda root: _scaling_gpfs(root, COAL, 8, "pfs_requests"),
    "gpfs_coal_kib_per_request_p8": lambda root: _scaling_gpfs(root, COAL, 8, "pfs_mean_request_bytes") / 1024,
    "gpfs_prov_requests_p8": lambda root: _scaling_gpfs(root, PROV, 8, "pfs_requests"),
    "gpfs_same_requests": lambda root: word(_close(_scaling_gpfs(root, PROV, 8, "pfs_requests"),
                                                   _scaling_gpfs(root, COAL, 8, "pfs_requests")), "same", "different"),
    # the other settings
    "c6_throttled": lambda root: float(claim_row(root, "C6", "throttled")["value"]),
    "c6_throttled_verdict": lambda root: claim_row(root, "C6", "throttled")["verdict"],
    "c6_throttled_lo": lambda root: float(_ratio_range(root, "throttled")[0]),
    "c6_throttled_hi": lambda root: float(_ratio_range(root, "throttled")[1]),
    "thr_none_p8": lambda root: float(_sweep(root, "throttled", 8).loc[0]),
    "thr_4m_p8": lambda root: float(_sweep(root, "throttled", 8).loc[4 << 20]),
    "thr_16m_p8": lambda root: float(_sweep(root, "throttled", 8).loc[16 << 20]),
    "thr_prov_requests_p8": lambda root: _scaling(root, "throttled", PROV, 8, "pfs_requests"),
    "thr_coal_requests_p8": lambda root: _scaling(root, "throttled", COAL, 8, "pfs_requests"),
    "thr09_coal_over_prov": lambda root: (_scaling(root, "throttled", COAL, 8, "records_per_s")
                                          / _scaling(root, "throttled", PROV, 8, "records_per_s")),
    "thr09_slower": lambda root: word(_scaling(root, "throttled", COAL, 8, "records_per_s")
                                      < _scaling(root, "throttled", PROV, 8, "records_per_s"), "slower", "faster"),
    "c6_shared": lambda root: float(claim_row(root, "C6", "shared")["value"]),
    "c6_shared_p": lambda root: float(claim_row(root, "C6", "shared")["nprocs"]),
    "c6_shared_verdict": lambda root: claim_row(root, "C6", "shared")["verdict"],
    "c6_model_cifar": lambda root: float(_claim_model(root, "cifar10")["value"]),
    "c6_model_cifar_low": lambda root: float(_claim_model(root, "cifar10")["band_low"]),
    "c6_model_cifar_high": lambda root: float(_claim_model(root, "cifar10")["band_high"]),
    "c6_model_cifar_verdict": lambda root: _claim_model(root, "cifar10")["verdict"],
    "c6_model_imagenet_judged": lambda root: word(str(_claim_model(root, "imagenet")["verdict"])
                                                  .startswith("not judged"), "unjudged", "judged"),
    "thr_prov_mb_p8": lambda root: _scaling(root, "throttled", PROV, 8, "pfs_mean_request_bytes") / 1e6,
    "thr_coal_mb_p8": lambda root: _scaling(root, "throttled", COAL, 8, "pfs_mean_request_bytes") / 1e6,
}


def _ratio_range(root: Path, setting: str) -> tuple[float, float]:
    """The smallest and largest repeat of C6's ratio in ``setting`` at its judged P."""
    r = claim_row(root, "C6", setting)
    from .. import claims

    s = claims.series("C6", root)[setting]
    s = s[s["nprocs"] == int(r["nprocs"])]
    return float(s["lo"].iloc[0]), float(s["hi"].iloc[0])
