"""Facts behind the prose of notebooks/08_stag.ipynb (see lmdbio.lab.lessons.prose).

The timelines (``08_stag/rows.csv``: one row per rank, batch and phase, with
``t_start``/``t_end`` on the host's monotonic clock) tell how many reader
groups read at the same moment. A group is ``rank // stagger_size`` with
STAG and one rank without it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .prose import claim_row, csv, word

NB = "08_stag"
BASE, STAG = "lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag"


def _rows(root: Path, setting: str = "") -> pd.DataFrame:
    return csv(root, f"{NB}/{setting + '/' if setting else ''}rows.csv")


def overlap(g: pd.DataFrame) -> dict:
    """One point's reads (one variant, one repeat): groups, the most groups reading at one moment,
    the share of the reading time during which more than one group reads, and the most turns
    apart two groups reading at the same moment are."""
    size = int(g["stagger_size"].iloc[0] or 0)
    reads = g[g["phase"] == "read"]
    group = (reads["rank"] // size if size else reads["rank"]).to_numpy()
    turn = reads["batch"].rank(method="dense").astype(int).to_numpy() - 1
    t0, t1 = reads["t_start"].to_numpy(), reads["t_end"].to_numpy()
    # The moments where the set of reads in flight changes; between two of them it is constant.
    cuts = np.unique(np.concatenate([t0, t1]))
    most, spread, multi, busy = 0, 0, 0.0, 0.0
    for a, b in zip(cuts[:-1], cuts[1:]):
        live = (t0 <= a) & (t1 >= b)
        if not live.any():
            continue
        groups = np.unique(group[live])
        most = max(most, len(groups))
        spread = max(spread, int(turn[live].max() - turn[live].min()))
        busy += b - a
        if len(groups) > 1:
            multi += b - a
    ngroups = int(np.unique(g["rank"] // size).size if size else g["rank"].nunique())
    return {"groups": ngroups, "most": int(most), "share": round(float(multi / busy), 3) if busy else float("nan"),
            "turns_apart": spread}


def overlaps(root: Path, variant: str, setting: str = "") -> pd.DataFrame:
    """:func:`overlap` of every repeat of ``variant`` (a row per repeat)."""
    r = _rows(root, setting)
    r = r[(r["variant"] == variant) & r["is_reader"].astype(bool)]
    return pd.DataFrame([{"repeat": k, **overlap(g)} for k, g in r.groupby("repeat")])


def _phase_ms(root: Path, variant: str, phase: str) -> float:
    r = _rows(root)
    r = r[(r["variant"] == variant) & (r["phase"] == phase)]
    return 1e3 * float(r["wall_s"].median())


def _value(setting: str):
    return lambda root: float(claim_row(root, "C7", setting)["value"])


def _verdict(setting: str):
    return lambda root: str(claim_row(root, "C7", setting)["verdict"])


def _model(dataset: str, col: str):
    def f(root):
        p = Path(root) / "claims.csv"
        from .prose import COMMITTED
        df = pd.read_csv(p if p.exists() else COMMITTED / "claims.csv")
        row = df[(df["claim"] == "C7") & (df["setting"] == "model") & (df["dataset"] == dataset)].iloc[0]
        return row[col] if col == "verdict" else float(row[col])
    return f


#: Phrases whose numbers come from a source, not from this project's results: phrase -> source.
STATIC: dict[str, str] = {
    "storage contention costs more than the waiting": "TOPC 2019 (claim C7, problem 5)",
    "at most one group reads at a time": "lmdbio/pipeline/stagger.py's docstring, quoted",
    "STAG can only pay where far more streams share each storage target than here":
        ("an inference from the four measured settings (none reproduces C7) and TOPC 2019's setting (problem "
         "5)"),
    "criterion of 1.2": "lmdbio/lab/claims/: C7's criterion (STAG/no STAG >= 1.2)",
    "toward 1.2": "lmdbio/lab/claims/: C7's criterion (STAG/no STAG >= 1.2)",
}

#: Fact name -> function of a results root (data/results, or a scratch run's results).
FACTS: dict = {
    # the timelines, local disk
    "nprocs": lambda root: int(_rows(root)["nprocs"].max()),
    "stagger_size": lambda root: int((lambda r: r[r["variant"] == STAG])(_rows(root))["stagger_size"].iloc[0]),
    "stag_groups": lambda root: int(overlaps(root, STAG)["groups"].iloc[0]),
    "repeats": lambda root: int(_rows(root)["repeat"].nunique()),
    "stag_most": lambda root: int(overlaps(root, STAG)["most"].max()),
    "stag_most_min": lambda root: int(overlaps(root, STAG)["most"].min()),
    "stag_most_repeats": lambda root: int((lambda o: (o["most"] == o["most"].max()).sum())(overlaps(root, STAG))),
    "stag_one_at_a_time": lambda root: word(overlaps(root, STAG)["most"].max() <= 1, "one", "several"),
    "stag_turns_apart": lambda root: int(overlaps(root, STAG)["turns_apart"].max()),
    "stag_share_pct": lambda root: 100 * float(overlaps(root, STAG)["share"].median()),
    "base_most": lambda root: int(overlaps(root, BASE)["most"].max()),
    "base_share_pct": lambda root: 100 * float(overlaps(root, BASE)["share"].median()),
    "stag_read_ms": lambda root: _phase_ms(root, STAG, "read"),
    "stag_wait_ms": lambda root: _phase_ms(root, STAG, "stagger_wait"),
    "base_read_ms": lambda root: _phase_ms(root, BASE, "read"),
    "stag_read_vs_base": lambda root: word(_phase_ms(root, STAG, "read") < _phase_ms(root, BASE, "read"),
                                           "shorter", "longer"),
    # C7 in each setting (claims.csv)
    "c7_local": _value("local"),
    "c7_gpfs": _value("gpfs"),
    "c7_throttled": _value("throttled"),
    "c7_shared": _value("shared"),
    "c7_local_verdict": _verdict("local"),
    "c7_gpfs_verdict": _verdict("gpfs"),
    "c7_throttled_verdict": _verdict("throttled"),
    "c7_shared_verdict": _verdict("shared"),
    "c7_local_word": lambda root: word(_value("local")(root) < 1, "slower", "faster"),
    "c7_gpfs_word": lambda root: word(_value("gpfs")(root) < 1, "slower", "faster"),
    "c7_throttled_word": lambda root: word(_value("throttled")(root) < 1, "slower", "faster"),
    "c7_model": _model("imagenet", "value"),
    "c7_model_lo": _model("imagenet", "band_low"),
    "c7_model_hi": _model("imagenet", "band_high"),
    "c7_model_verdict": _model("imagenet", "verdict"),
}
