"""Facts behind the prose of notebooks/06_prov.ipynb (see lmdbio.lab.lessons.prose)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .prose import COMMITTED, claim_row, csv, word

NB = "06_prov"
DIO, PROV = "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov"
PSIZE = 4096

#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {}


def _setup(root: Path) -> pd.DataFrame:
    p = csv(root, f"{NB}/points.csv")
    return p[(p["level"] == "setup") & (p["phase"] == "setup") & (p["cache"] == "cold")]


def _setup_ms(root: Path, variant: str, nprocs: int) -> float:
    """The slowest rank's cold reader setup (ms), mean over repeats, as the mechanism figure draws it."""
    s = _setup(root)
    s = s[(s["variant"] == variant) & (s["nprocs"] == nprocs)]
    return float(s.groupby("repeat")["wall_s"].max().mean()) * 1e3


def _pages_per_open(root: Path, variant: str, nprocs: int) -> float:
    """Pages of the file the setup's index pass reads at one open (mean over repeats)."""
    s = _setup(root)
    s = s[(s["variant"] == variant) & (s["nprocs"] == nprocs)]
    return float(s.groupby("repeat")["pages_read"].sum().mean())


def _model(root: Path) -> pd.DataFrame:
    m = csv(root, "06_prov_model/model.csv.gz")
    return m.assign(err=(m["model_offset"] - m["true_offset"]) / PSIZE,
                    err_single=(m["model_single_txn_offset"] - m["true_offset"]) / PSIZE)


def _ds(root: Path, name: str) -> pd.DataFrame:
    m = _model(root)
    return m[m["dataset"] == name].sort_values("record")


def _exact(root: Path, name: str, col: str = "err") -> float:
    """Percent of the dataset's offsets the arithmetic model gets exactly."""
    return 100.0 * float((_ds(root, name)[col] == 0).mean())


def _first_wrong(root: Path, name: str) -> float:
    d = _ds(root, name)
    wrong = d[d["err"] != 0]["record"]
    return float(wrong.min()) if len(wrong) else float(len(d))


def _transactions(root: Path, name: str) -> float:
    d = _ds(root, name)
    return float(math.ceil(len(d) / int(d["commit_every"].iloc[0])))


def _ordinal(x: float) -> str:
    words = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh", 8: "eighth"}
    return words.get(int(x), f"{int(x)}th") if float(x).is_integer() else f"{x:g}th"


def _claim_model(root: Path, dataset: str) -> pd.Series:
    """C5's model row for ``dataset``'s workload (claims.csv holds one per workload)."""
    p = Path(root) / "claims.csv"
    df = pd.read_csv(p if p.exists() else COMMITTED / "claims.csv")
    rows = df[(df["claim"] == "C5") & (df["setting"] == "model") & (df["dataset"] == dataset)]
    if rows.empty:
        raise KeyError(f"no model row of C5 for {dataset} in {p}")
    return rows.iloc[0]


def _setup_share(root: Path, setting: str, which: int) -> float:
    """DIO's (which=0) or PROV's (1) setup share of its run, percent, as claims.csv's why says it."""
    import re

    why = str(claim_row(root, "C5", setting)["why"])
    m = re.search(r"DIO's setup (\d+)% of its run, PROV's (\d+)%", why)
    if m is None:
        raise ValueError(f"C5 {setting}: no setup shares in its why: {why!r}")
    return float(m.group(which + 1))


def _all_yes(root: Path) -> str:
    verdicts = {claim_row(root, "C5", s)["verdict"] for s in ("local", "gpfs", "throttled", "shared")}
    return word(verdicts == {"yes"}, "every", "not every")


#: Fact name -> function of a results root (data/results, or a scratch run's results).
def _rates(root: Path) -> pd.DataFrame:
    """Cold records/s of the timed batches (setup excluded), median of the repeats: variant x P."""
    s = csv(root, f"{NB}/summary.csv")
    s = s[s["cache"] == "cold"]
    return s.groupby(["variant", "nprocs"])["records_per_s"].median().unstack("nprocs")


def _prov_over_dio(root: Path) -> pd.Series:
    r = _rates(root)
    return r.loc[PROV] / r.loc[DIO]


def _leafcut_ratio(root: Path) -> float:
    """A cold read over a range with one cached page in 75 against a plain cold read (time ratio,
    median per request size, then the median of those): notebook 11's ``leaf_cut`` microbenchmark."""
    d = csv(root, "model_calibration/leaf_cut.csv")
    m = d.groupby(["length", "kind"])["wall_s"].median().unstack("kind")
    return float((m["cached"] / m["plain"]).median())


FACTS: dict = {
    "prov_over_dio_rate_p8": lambda root: float(_prov_over_dio(root).loc[8]),
    "prov_rate_word_p8": lambda root: word(float(_prov_over_dio(root).loc[8]) < 1, "slower", "faster"),
    "prov_n_slower": lambda root: int((_prov_over_dio(root) < 1).sum()),
    "n_p": lambda root: int(len(_prov_over_dio(root))),
    "leafcut_ratio": _leafcut_ratio,
    # local disk: the mechanism figure
    "dio_setup_ms_p8": lambda root: _setup_ms(root, DIO, 8),
    "prov_setup_ms_p8": lambda root: _setup_ms(root, PROV, 8),
    "dio_pages": lambda root: _pages_per_open(root, DIO, 8),
    "prov_pages": lambda root: _pages_per_open(root, PROV, 8),
    # the arithmetic model against the file
    "commit_every": lambda root: float(_model(root)["commit_every"].iloc[0]),
    "imagenet_records": lambda root: float(len(_ds(root, "imagenet"))),
    "cifar_records": lambda root: float(len(_ds(root, "cifar10"))),
    "imagenet_exact": lambda root: _exact(root, "imagenet"),
    "imagenet_exact_single": lambda root: _exact(root, "imagenet", "err_single"),
    "cifar_exact": lambda root: _exact(root, "cifar10"),
    "cifar_first_wrong": lambda root: _first_wrong(root, "cifar10"),
    "cifar_exact_txns": lambda root: _first_wrong(root, "cifar10") / float(_ds(root, "cifar10")["commit_every"].iloc[0]),
    "cifar_max_error": lambda root: float(_ds(root, "cifar10")["err"].abs().max()),
    "cifar_exact_txns_word": lambda root: _ordinal(_first_wrong(root, "cifar10")
                                                   / float(_ds(root, "cifar10")["commit_every"].iloc[0])),
    "cifar_break_txn": lambda root: _ordinal(_first_wrong(root, "cifar10")
                                             / float(_ds(root, "cifar10")["commit_every"].iloc[0]) + 1),
    "imagenet_txns": lambda root: _transactions(root, "imagenet"),
    "cifar_txns": lambda root: _transactions(root, "cifar10"),
    # C5 in every setting
    "c5_all": _all_yes,
    "c5_local": lambda root: float(claim_row(root, "C5", "local")["value"]),
    "dio_setup_share": lambda root: _setup_share(root, "local", 0),
    "prov_setup_share": lambda root: _setup_share(root, "local", 1),
    "c5_local_verdict": lambda root: claim_row(root, "C5", "local")["verdict"],
    "c5_gpfs": lambda root: float(claim_row(root, "C5", "gpfs")["value"]),
    "c5_gpfs_verdict": lambda root: claim_row(root, "C5", "gpfs")["verdict"],
    "c5_throttled": lambda root: float(claim_row(root, "C5", "throttled")["value"]),
    "c5_throttled_verdict": lambda root: claim_row(root, "C5", "throttled")["verdict"],
    "c5_shared": lambda root: float(claim_row(root, "C5", "shared")["value"]),
    "c5_shared_p": lambda root: float(claim_row(root, "C5", "shared")["nprocs"]),
    "c5_shared_verdict": lambda root: claim_row(root, "C5", "shared")["verdict"],
    "c5_model_cifar": lambda root: float(_claim_model(root, "cifar10")["value"]),
    "c5_model_cifar_verdict": lambda root: _claim_model(root, "cifar10")["verdict"],
    "c5_model_imagenet": lambda root: float(_claim_model(root, "imagenet")["value"]),
    "c5_model_imagenet_verdict": lambda root: _claim_model(root, "imagenet")["verdict"],
}
