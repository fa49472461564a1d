"""Facts behind the prose of notebooks/05_dio.ipynb (see lmdbio.lab.lessons.prose)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .prose import COMMITTED, claim_row, csv, word

NB = "05_dio"
LMM, DM, DIO = "lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio"

#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {
    "Fewer, larger requests are what DIO is for": "TOPC 2019, problem 3 (DIO's purpose)",
    "whether they also make the reader faster on this disk":
        "a pointer to the table's last column, computed from the results",
    "To see DIO pay off on one machine takes storage whose requests cost more than readahead hides":
        ("an inference from the verdicts above: yes on the emulated GPFS, the throttled device and the shared "
         "target, no on local disk"),
    "a slower or throttled device": "the same inference (the throttled device's yes above)",
    "up to 65x speedup on 9,216": "TOPC 2019, the paper's abstract: LMDBIO's speedup over LMDB",
}


def _cold(root: Path, rel: str = "summary.csv"):
    s = csv(root, f"{NB}/{rel}")
    return s[(s["cache"] == "cold") & (s["status"] == "ok")] if "status" in s else s[s["cache"] == "cold"]


def _median(root: Path, variant: str, nprocs: int, col: str = "records_per_s") -> float:
    s = _cold(root)
    return float(s[(s["variant"] == variant) & (s["nprocs"] == nprocs)][col].median())


def _slowest(root: Path, nprocs: int) -> str:
    """"slowest" when DIO's median cold throughput is the lowest of the three variants at P."""
    rates = {v: _median(root, v, nprocs) for v in (LMM, DM, DIO)}
    return word(min(rates, key=rates.get) == DIO, "slowest", "not the slowest")


def _series(root: Path, setting: str, nprocs: int) -> float:
    from .. import claims

    s = claims.series("C4", root)[setting]
    return float(s[s["nprocs"] == nprocs]["value"].iloc[0])


def _requests(root: Path):
    """Cold requests per iteration (all readers) and bytes per request, per variant and P."""
    from ..tables import requests_per_iteration

    p = csv(root, f"{NB}/points.csv")
    return requests_per_iteration(p[p["cache"] == "cold"]).set_index(["variant", "nprocs"])


def _reader_ms(root: Path, variant: str, nprocs: int, col: str = "wall_s") -> float:
    """The reader's locate + read time per iteration (ms), cold, mean over repeats."""
    from ..tables import per_iteration

    p = csv(root, f"{NB}/points.csv")
    m = per_iteration(p[p["cache"] == "cold"], "reader", ["locate", "read"], [col])
    m = m.set_index(["variant", "nprocs"])
    return float(m.loc[(variant, nprocs), f"{col}_sum"]) * 1e3


def _wait_ms(root: Path, variant: str, nprocs: int) -> float:
    """A rank's wait for its node's reader per iteration (ms), cold, mean over ranks and repeats."""
    from ..tables import per_iteration

    p = csv(root, f"{NB}/points.csv")
    m = per_iteration(p[p["cache"] == "cold"], "reader", ["wait"], ["wall_s"]).set_index(["variant", "nprocs"])
    return float(m.loc[(variant, nprocs), "wall_s"]) * 1e3


def _overlap(root: Path, nprocs: int) -> bool:
    """Whether DIO's cold repeats and LMM's overlap in throughput at P."""
    s = _cold(root)
    a = s[(s["variant"] == DIO) & (s["nprocs"] == nprocs)]["records_per_s"]
    b = s[(s["variant"] == LMM) & (s["nprocs"] == nprocs)]["records_per_s"]
    return bool(a.max() >= b.min() and b.max() >= a.min())


def _majflt(root: Path, variant: str) -> float:
    p = csv(root, f"{NB}/points.csv")
    d = p[(p["cache"] == "cold") & (p["variant"] == variant) & (p["level"] == "reader")
          & p["phase"].isin(["locate", "read"])]
    return float(d["majflt"].sum())


def _pfs_requests(root: Path, variant: str, nprocs: int) -> float:
    """Requests the emulated GPFS served in one cold point (median over repeats)."""
    s = _cold(root, "gpfs/summary.csv")
    return float(s[(s["variant"] == variant) & (s["nprocs"] == nprocs)]["pfs_requests"].median())


def _model(root: Path, dataset: str = "imagenet"):
    """C4's model row for ``dataset``'s workload (claims.csv holds one per workload)."""
    p = Path(root) / "claims.csv"
    df = pd.read_csv(p if p.exists() else COMMITTED / "claims.csv")
    rows = df[(df["claim"] == "C4") & (df["setting"] == "model") & (df["dataset"] == dataset)]
    if rows.empty:
        raise KeyError(f"no model row of C4 for {dataset} in {p}")
    return rows.iloc[0]


#: Fact name -> function of a results root (data/results, or a scratch run's results).
FACTS: dict = {
    # local disk, the figure
    "dio_rank_p1": lambda root: _slowest(root, 1),
    "dio_rank_p8": lambda root: _slowest(root, 8),
    "c4_local_p1": lambda root: _series(root, "local", 1),
    "c4_local": lambda root: float(claim_row(root, "C4", "local")["value"]),
    "c4_local_verdict": lambda root: claim_row(root, "C4", "local")["verdict"],
    "p1_overlap": lambda root: word(_overlap(root, 1), "overlap", "do not overlap"),
    "dio_setup_ms_p8": lambda root: _median(root, DIO, 8, "setup_s") * 1e3,
    "lmm_setup_ms_p8": lambda root: _median(root, LMM, 8, "setup_s") * 1e3,
    "dio_setup_vs_lmm_p8": lambda root: word(_median(root, DIO, 8, "setup_s") < _median(root, LMM, 8, "setup_s"),
                                             "shorter", "longer"),
    "lmm_requests": lambda root: float(_requests(root).loc[(LMM, 8), "requests_sum"]),
    "dio_requests": lambda root: float(_requests(root).loc[(DIO, 8), "requests_sum"]),
    "lmm_kib_per_request": lambda root: float(_requests(root).loc[(LMM, 8), "bytes_per_request"]) / 1024,
    "dio_mb_per_request": lambda root: float(_requests(root).loc[(DIO, 8), "bytes_per_request"]) / 1e6,
    "lmm_majflt": lambda root: _majflt(root, LMM),
    "dio_reader_ms_p8": lambda root: _reader_ms(root, DIO, 8),
    "lmm_reader_ms_p8": lambda root: _reader_ms(root, LMM, 8),
    "dio_reader_vs_lmm_p8": lambda root: word(_reader_ms(root, DIO, 8) > _reader_ms(root, LMM, 8), "more", "less"),
    "dio_sleep_ms_p8": lambda root: _reader_ms(root, DIO, 8, "sleep_s"),
    "lmm_sleep_ms_p8": lambda root: _reader_ms(root, LMM, 8, "sleep_s"),
    "dio_wait_ms_p8": lambda root: _wait_ms(root, DIO, 8),
    "lmm_wait_ms_p8": lambda root: _wait_ms(root, LMM, 8),
    "dio_wait_vs_lmm_p8": lambda root: word(_wait_ms(root, DIO, 8) > _wait_ms(root, LMM, 8), "longer", "shorter"),
    # the other settings
    "c4_gpfs": lambda root: float(claim_row(root, "C4", "gpfs")["value"]),
    "c4_gpfs_verdict": lambda root: claim_row(root, "C4", "gpfs")["verdict"],
    "gpfs_lmm_requests_p8": lambda root: _pfs_requests(root, LMM, 8),
    "gpfs_dio_requests_p8": lambda root: _pfs_requests(root, DIO, 8),
    "c4_throttled": lambda root: float(claim_row(root, "C4", "throttled")["value"]),
    "c4_throttled_verdict": lambda root: claim_row(root, "C4", "throttled")["verdict"],
    "c4_shared": lambda root: float(claim_row(root, "C4", "shared")["value"]),
    "c4_shared_p": lambda root: float(claim_row(root, "C4", "shared")["nprocs"]),
    "c4_shared_verdict": lambda root: claim_row(root, "C4", "shared")["verdict"],
    "c4_model": lambda root: float(_model(root)["value"]),
    "c4_model_low": lambda root: float(_model(root)["band_low"]),
    "c4_model_high": lambda root: float(_model(root)["band_high"]),
    "c4_model_verdict": lambda root: _model(root)["verdict"],
}
