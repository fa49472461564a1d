"""The papers' claims: one registry, each with a quantity, a criterion and the paper's own factor.

Every claim is judged in three settings, each from its own results folder:

- ``local``: measured on this machine's local disk (``NN_name/summary.csv`` or ``rows.csv``);
- ``gpfs``: measured through the emulated GPFS, ``lmdbio.pfs`` (``NN_name/gpfs/``);
- ``model``: ``lmdbio model predict --platform bebop`` at the papers' scale
  (``model_prediction/predictions.csv`` and its estimate ranges, ``sensitivity.csv``).

The verdicts are defined here once and used by every table:

- **direction** (``verdict``), measured: ``yes`` only when the smallest repeat
  clears the threshold, ``no`` only when the largest is below it,
  ``inconclusive`` otherwise (one repeat: judged from it, and said so);
  model: ``yes``/``no`` only when the whole band (every estimate at each end of
  its range, :mod:`lmdbio.model.predict`'s ``sensitivity.csv``) agrees, else
  ``open``, naming the estimate that decides it;
- **magnitude**, against the paper's own factor: ``reproduced`` (within 2x of
  it), ``smaller``, ``larger``; ``no paper factor`` where the paper states none.

Every ``why`` is built from the data: the verdict's numbers, then the phase
(measured) or the mechanism (model) that dominates each variant compared.

A repeats directory (``results_root/repeats/*.csv``), when present, supplies
the measured settings' repeats; see :func:`read_repeats` for the format.

``python -m lmdbio.claims`` writes ``data/results/claims.csv``,
``data/results/claims_split.csv`` (the split by optimization against the
papers' factors) and the table between the markers in ``figures/README.md``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .scales import COMMITTED_RESULTS, REPO

__all__ = ["Claim", "CLAIMS", "claim", "SETTINGS", "SETTING_LABELS", "COLUMNS", "DETAILS", "VERDICTS",
           "FULL", "FACTOR_TOLERANCE", "NO_FACTOR", "MODEL_DIR", "REPEATS_DIR", "setting_dir", "resolve", "series",
           "direction", "band_verdict", "magnitude", "read_repeats", "compare_runs",
           "evaluate", "write", "render", "show", "readme_table", "update_readme", "rendered_blocks",
           "render_validation", "render_split", "render_claims_summary",
           "SPLIT", "split_table", "write_split", "TRAINING", "main"]

SETTINGS = ("local", "gpfs", "throttled", "model")
SETTING_LABELS = {"local": "local disk, measured", "gpfs": "emulated GPFS, measured",
                  "throttled": "throttled block device, measured",
                  "model": "papers' scale, model"}
COLUMNS = ["claim", "setting", "measured", "criterion", "verdict", "why"]
DETAILS = ["magnitude", "band_low", "band_high", "paper_factor", "dataset", "repeats", "decides",
           "paper", "notebook", "quantity", "nprocs", "value", "threshold", "source"]
#: Every verdict a row can have ("no data": the setting has no results).
VERDICTS = ("yes", "no", "inconclusive", "open", "no data")
README = REPO / "figures" / "README.md"
MARK_START = "<!-- claims.csv: rendered by `python -m lmdbio.claims`; do not edit by hand -->"
MARK_END = "<!-- end of claims.csv -->"
FULL = "lmdbio-lmm-dio-prov-coal-stag"
#: The magnitude where the paper states no factor (not "n/a": pandas would read it back as NaN).
NO_FACTOR = "no paper factor"
#: A factor within this of the paper's is "reproduced".
FACTOR_TOLERANCE = 2.0
#: Where the model setting's predictions are, under a results root.
MODEL_DIR = "model_prediction"
#: Where repeated measurements are, under a results root (optional).
REPEATS_DIR = "repeats"
QCOLS = ["nprocs", "value", "lo", "hi", "repeats", "decides", "context"]

SHORT = {"lmdb": "LMDB", "lmdbio-lmm": "LMM", "lmdbio-lmm-dm": "DM", "lmdbio-lmm-dio": "DIO",
         "lmdbio-lmm-dio-prov": "PROV", "lmdbio-lmm-dio-prov-coal": "COAL", FULL: "full stack"}


# --- the verdicts: one definition ----------------------------------------------------------------

def direction(lo: float, hi: float, threshold: float) -> str:
    """A measured setting's verdict from the smallest and largest repeat of its quantity."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no data"
    if lo >= threshold:
        return "yes"
    if hi < threshold:
        return "no"
    return "inconclusive"


def band_verdict(low: float, high: float, threshold: float) -> str:
    """The model's verdict: yes/no only when the whole band of estimates agrees, else open."""
    v = direction(low, high, threshold)
    return "open" if v == "inconclusive" else v


def magnitude(value: float, paper_factor: float | None, tolerance: float = FACTOR_TOLERANCE) -> str:
    """The value against the paper's own factor: reproduced (within ``tolerance``x), smaller, larger."""
    if paper_factor is None or not (paper_factor > 0) or not math.isfinite(value):
        return NO_FACTOR
    if value < paper_factor / tolerance:
        return "smaller"
    if value > paper_factor * tolerance:
        return "larger"
    return "reproduced"


# --- reading results -----------------------------------------------------------------------------

def _ok(df: pd.DataFrame) -> pd.DataFrame:
    if "status" in df.columns:
        df = df[df["status"].fillna("ok") == "ok"]
    return df


def _summary(d: Path) -> pd.DataFrame | None:
    f = d / "summary.csv"
    if not f.exists():
        return None
    df = _ok(pd.read_csv(f))
    return df[df["cache"] == "cold"] if "cache" in df.columns else df


def read_repeats(results_root, setting: str) -> pd.DataFrame | None:
    """Repeated measurements of one setting from ``results_root/repeats/*.csv``, or None.

    Expected format: a tidy CSV, one row per run, with columns ``setting``
    (``local``, ``gpfs``, ...), ``dataset`` (``cifar10``, ``imagenet``),
    ``variant``, ``nprocs``, ``repeat``, and ``records_per_s`` or ``time_s``
    (the timed loop; throughput is then ``records / time_s`` when a
    ``records`` column is there, else ``1 / time_s``). Optional:
    ``coalesce_bytes``, ``stagger_size``, ``cache`` (only ``cold`` rows are
    used), ``status`` (only ``ok``), ``setup_s``. Returned with the
    summary.csv names (``dataset_name``, ``records_per_s``).
    """
    d = Path(results_root) / REPEATS_DIR
    files = sorted(d.glob("*.csv")) if d.is_dir() else []
    if not files:
        return None
    need = {"setting", "dataset", "variant", "nprocs", "repeat"}
    parts = []
    for f in files:
        part = pd.read_csv(f)
        if not need <= set(part.columns) or not ({"records_per_s", "time_s"} & set(part.columns)):
            from .errors import ConfigurationError
            raise ConfigurationError(f"{f}: a repeats file needs columns {sorted(need)} and records_per_s "
                                     "or time_s (see lmdbio.claims.read_repeats)")
        if "records_per_s" not in part.columns:
            part = part.assign(records_per_s=(part["records"] if "records" in part.columns else 1.0)
                               / part["time_s"])
        parts.append(part)
    df = _ok(pd.concat(parts, ignore_index=True))
    df = df[df["setting"] == setting]
    if "cache" in df.columns:
        df = df[df["cache"].fillna("cold") == "cold"]
    df = df.rename(columns={"dataset": "dataset_name"})
    return df if len(df) else None


def _dominant_measured(df: pd.DataFrame) -> str:
    """The largest share of a measured loop: read, wait, allreduce, compute (medians over repeats)."""
    cols = {"read_s": "read", "wait_s": "wait", "comm_s": "allreduce", "compute_s": "compute"}
    have = [c for c in cols if c in df.columns]
    if not have or df.empty:
        return "phases not recorded"
    med = df[have].median()
    total = float(med.sum())
    if "wall_s" in df.columns:
        total = max(total, float(df["wall_s"].median()))
    if not total > 0:
        return "phases not recorded"
    top = med.idxmax()
    return f"{cols[top]} {100 * med[top] / total:.0f}% of the loop"


def _paired_ratio(slow: pd.DataFrame, fast: pd.DataFrame, col: str) -> pd.DataFrame:
    """fast/slow of ``col`` per P: ``value`` the ratio of the medians over repeats; ``lo``/``hi``
    the smallest and largest ratio of repeat r against repeat r (they ran interleaved)."""
    keys = ["nprocs", "repeat"]
    both = pd.concat({"s": slow.groupby(keys)[col].median(),
                      "f": fast.groupby(keys)[col].median()}, axis=1).dropna()
    if both.empty:
        return pd.DataFrame(columns=QCOLS)
    both["r"] = both["f"] / both["s"]
    g = both.groupby("nprocs")
    out = pd.DataFrame({"value": g["f"].median() / g["s"].median(), "lo": g["r"].min(),
                        "hi": g["r"].max(), "repeats": g["r"].size()}).reset_index()
    out["decides"] = ""
    return out


def _ratio_frame(df: pd.DataFrame, slow: str, fast: str, col: str) -> pd.DataFrame:
    """fast/slow of ``col`` (higher is better) per P: ratio of medians, min and max over repeats."""
    out = _paired_ratio(df[df["variant"] == slow], df[df["variant"] == fast], col)
    if out.empty:
        return out
    out["context"] = [f"{SHORT.get(fast, fast)}: {_dominant_measured(df[(df.variant == fast) & (df.nprocs == p)])}; "
                      f"{SHORT.get(slow, slow)}: {_dominant_measured(df[(df.variant == slow) & (df.nprocs == p)])}"
                      for p in out["nprocs"]]
    return out


def _measured_throughput(df: pd.DataFrame | None, slow: str, fast: str, col: str,
                         dataset: str | None) -> pd.DataFrame | None:
    if df is None:
        return None
    if dataset is not None and "dataset_name" in df.columns:
        df = df[df["dataset_name"] == dataset]
    return _ratio_frame(df, slow, fast, col)


def _timeline_throughput(d: Path) -> pd.DataFrame | None:
    f = d / "rows.csv"
    if not f.exists():
        return None
    rows = pd.read_csv(f)
    if "cache" in rows.columns:
        rows = rows[rows["cache"] == "cold"]
    if "repeat" not in rows.columns:
        rows = rows.assign(repeat=0)   # results written before timelines had repeats
    keys = ["variant", "nprocs", "coalesce_bytes", "stagger_size", "repeat"]
    pts = rows.drop_duplicates(keys)[keys + ["wall_s_total", "records"]].copy()
    pts["records_per_s"] = pts["records"] / pts["wall_s_total"]
    if "phase" in rows.columns and "wall_s" in rows.columns:
        # Per point: the phase with the most time on its busiest rank.
        per = rows.groupby(keys + ["rank", "phase"], dropna=False)["wall_s"].sum().reset_index()
        top = per.sort_values("wall_s").groupby(keys, dropna=False).tail(1).set_index(keys)
        tot = rows.groupby(keys + ["rank"], dropna=False)["wall_s"].sum().groupby(keys, dropna=False).max()
        txt = {k: f"{r.phase} {100 * r.wall_s / max(tot.loc[k], 1e-300):.0f}% of the busiest rank"
               for k, r in top.iterrows()}
        pts["dominant"] = [txt.get(tuple(k), "phases not recorded") for k in pts[keys].itertuples(index=False)]
    else:
        pts["dominant"] = "phases not recorded"
    return pts


def _timeline_ratio(base: pd.DataFrame, fast: pd.DataFrame, slow_name: str, fast_name: str) -> pd.DataFrame:
    """fast/base per P: the ratio of the median records_per_s; lo and hi the smallest and largest
    ratio of one repeat's pair (repeat r of one against repeat r of the other, run interleaved)."""
    r = _paired_ratio(base, fast, "records_per_s")
    if r.empty:
        return r
    r["context"] = [f"{SHORT.get(fast_name, fast_name)}: {fast[fast.nprocs == p]['dominant'].iloc[0]}; "
                    f"{SHORT.get(slow_name, slow_name)}: {base[base.nprocs == p]['dominant'].iloc[0]}"
                    for p in r["nprocs"]]
    return r


# --- the model setting: predictions and their band over the estimates' ranges ---------------------

def _io_s(p: pd.DataFrame) -> pd.Series:
    # I/O time: the setup and every iteration's phases other than compute and the allreduce.
    return p["setup_s"] + p["iterations"] * (p["per_iteration_s"] - p["compute_s"] - p["communicate_s"])


def _model_frames(d: Path, workload: str) -> tuple[pd.DataFrame, pd.DataFrame | None] | None:
    f = d / "predictions.csv"
    if not f.exists():
        return None
    p = pd.read_csv(f)
    p = p[p["workload"] == workload]
    if "cache" in p.columns:
        p = p[p["cache"] == "cold"]
    p = p.assign(io_s=_io_s(p))
    s = None
    if (d / "sensitivity.csv").exists():
        s = pd.read_csv(d / "sensitivity.csv")
        s = s[s["workload"] == workload]
        s = s.assign(io_s=_io_s(s))
    return p, s


def _band(central: pd.DataFrame, sens: pd.DataFrame | None, value: Callable[[pd.DataFrame], pd.Series]
          ) -> pd.DataFrame:
    """value per P (central), its band over every estimate's low and high end, and each end's value."""
    c = value(central).rename("value")
    out = c.to_frame()
    out["lo"] = out["hi"] = out["value"]
    out["repeats"] = 0
    out["decides"] = ""
    out["ends"] = [{} for _ in range(len(out))]
    if sens is not None and len(sens):
        for (est, end), g in sens.groupby(["estimate", "end"]):
            v = value(g)
            for p, x in v.items():
                if p in out.index and math.isfinite(x):
                    out.at[p, "ends"][f"{est} {end}"] = float(x)
        out["lo"] = [min([v] + list(e.values())) for v, e in zip(out["value"], out["ends"])]
        out["hi"] = [max([v] + list(e.values())) for v, e in zip(out["value"], out["ends"])]
    return out


def _deciders(row, threshold: float) -> str:
    """The estimate ends that put the value on the other side of the threshold from the central."""
    side = row["value"] >= threshold
    flip = sorted(((k, v) for k, v in row["ends"].items() if (v >= threshold) != side),
                  key=lambda kv: -abs(math.log(max(kv[1], 1e-300) / max(row["value"], 1e-300))))
    return "; ".join(f"{k} gives {_num(v)}" for k, v in flip[:3])


def _num(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"


def _model_claim(workload: str, slow: str, fast: str | None, col: str):
    """A model quantity: ``slow/fast`` of ``col`` per P, or ``slow``'s ``col``/total_s when fast is None."""
    def q(d: Path, threshold: float):
        fr = _model_frames(d, workload)
        if fr is None:
            return None
        p, s = fr

        def value(df):
            t = df.pivot_table(index="nprocs", columns="variant", values=list(dict.fromkeys([col, "total_s"])))
            if (col, slow) not in t or (fast is not None and (col, fast) not in t):
                return pd.Series(dtype=float)
            if fast is None:
                return t[(col, slow)] / t[("total_s", slow)]
            return t[(col, slow)] / t[(col, fast)]
        b = _band(p, s, value)
        if b.empty:
            return None
        b["decides"] = [_deciders(r, threshold) for _, r in b.iterrows()]
        mech = p.set_index(["variant", "nprocs"])["dominant_mechanism"]
        phase = p.set_index(["variant", "nprocs"])["dominant_phase"]

        def dom(v, n):
            ph = phase.get((v, n), "")
            return ph if ph in ("compute", "communicate") else mech.get((v, n), "?")
        b["context"] = [(f"{SHORT.get(fast, fast)} dominated by {dom(fast, n)}; " if fast else "")
                        + f"{SHORT.get(slow, slow)} by {dom(slow, n)}" for n in b.index]
        return b.drop(columns="ends").reset_index()
    return q


# --- the claims -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    """One of the papers' claims: where it is shown, what is measured, when it holds, the paper's factor.

    ``measured(setting, folder, results_root)`` returns a DataFrame with
    ``QCOLS`` (``lo``/``hi``: the smallest and largest repeat) or None when the
    folder has no results; ``model(folder, threshold)`` the same for the model
    (``lo``/``hi``: the band over the estimates). The verdict compares them with
    ``threshold`` at the largest P; ``paper_factor`` is the paper's own number
    for :func:`magnitude` (None where the paper states none).
    """

    id: str
    notebook: str
    paper: str
    statement: str
    quantity_name: str
    short: str
    threshold: float
    measured: Callable = field(repr=False)
    model: Callable = field(repr=False)
    paper_factor: float | None = None
    dataset: str = ""
    ylabel: str = ""   # the figures' y axis (default: ``short``)

    @property
    def criterion(self) -> str:
        return f"{self.short} >= {self.threshold:g} at the largest P, cold"

    def quantity(self, setting: str, d: Path, results_root=None) -> pd.DataFrame | None:
        if setting == "model":
            return self.model(d, self.threshold)
        return self.measured(setting, d, results_root)


def _throughput(slow: str, fast: str, dataset: str, col: str = "records_per_s"):
    def q(setting: str, d: Path, root):
        rep = read_repeats(root, setting) if root is not None else None
        if rep is not None:
            r = _measured_throughput(rep, slow, fast, col, dataset)
            if r is not None and len(r):
                return r
        return _measured_throughput(_summary(d), slow, fast, col, dataset)
    return q


def _io_share(setting: str, d: Path, root):
    """LMDB's I/O (read + wait) share of one emulated training iteration."""
    s = _summary(d)
    if s is None:
        return None
    s = s[(s["variant"] == "lmdb") & (s["dataset_name"] == "imagenet")]
    parts = s[["read_s", "wait_s", "comm_s", "compute_s"]]
    s = s.assign(share=(s["read_s"] + s["wait_s"]) / parts.sum(axis=1))
    g = s.groupby("nprocs")["share"]
    out = pd.DataFrame({"value": g.median(), "lo": g.min(), "hi": g.max(), "repeats": g.size()}).reset_index()
    out["decides"] = ""
    out["context"] = [f"LMDB: {_dominant_measured(s[s.nprocs == p])}" for p in out["nprocs"]]
    return out


def _prov_run(setting: str, d: Path, root):
    """DIO/PROV I/O time of a whole run, setup included (the index pass PROV removes)."""
    s = _summary(d)
    if s is None or "setup_s" not in s.columns:
        return None
    s = s.assign(run_inv=1.0 / (s["setup_s"] + s["wall_s"]))
    r = _measured_throughput(s, "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov", "run_inv", "cifar10")
    if r is not None and len(r):
        sd = s[s["dataset_name"] == "cifar10"] if "dataset_name" in s.columns else s
        r["context"] = [f"DIO's setup {100 * _share(sd, 'lmdbio-lmm-dio', p):.0f}% of its run, "
                        f"PROV's {100 * _share(sd, 'lmdbio-lmm-dio-prov', p):.0f}%" for p in r["nprocs"]]
    return r


def _share(s, v, p):
    x = s[(s.variant == v) & (s.nprocs == p)]
    return float((x["setup_s"] / (x["setup_s"] + x["wall_s"])).median()) if len(x) else float("nan")


def _coal(setting: str, d: Path, root):
    """COAL at the reference default (4 MiB, or the largest size below it) over no COAL."""
    base, coal = "lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal"
    rep = read_repeats(root, setting) if root is not None else None
    if rep is not None:
        r = _measured_throughput(rep, base, coal, "records_per_s", "cifar10")
        if r is not None and len(r):
            return r
    pts = _timeline_throughput(d)
    if pts is None:
        return None
    sizes = sorted(pts.loc[pts["variant"] == coal, "coalesce_bytes"].dropna().unique())
    if not sizes:
        return None
    size = max([s for s in sizes if s <= 4 << 20] or sizes[:1])
    return _timeline_ratio(pts[pts["variant"] == base],
                           pts[(pts["variant"] == coal) & (pts["coalesce_bytes"] == size)], base, coal)


def _stag(setting: str, d: Path, root):
    """STAG over the same stack without it, the largest P, cold."""
    base, stag = "lmdbio-lmm-dio-prov-coal", FULL
    rep = read_repeats(root, setting) if root is not None else None
    if rep is not None:
        r = _measured_throughput(rep, base, stag, "records_per_s", "imagenet")
        if r is not None and len(r):
            return r
    pts = _timeline_throughput(d)
    if pts is None:
        return None
    return _timeline_ratio(pts[pts["variant"] == base], pts[pts["variant"] == stag], base, stag)


def _training(setting: str, d: Path, root):
    """Full LMDBIO over LMDB in emulated training time (compute, allreduce and I/O)."""
    s = _summary(d)
    if s is None:
        return None
    s = s.assign(inv_wall=1.0 / s["wall_s"])
    return _measured_throughput(s, "lmdb", FULL, "inv_wall", "imagenet")


CIFAR, IMAGENET = "cifar10-large-alexnet", "imagenet-caffenet"

CLAIMS: tuple[Claim, ...] = (
    Claim("C1", "02_lmdb_analysis", "TOPC 2019",
          "With LMDB, I/O takes up to 90% of training time",
          "LMDB's I/O share of an emulated training iteration (ImageNet records, AlexNet compute)",
          "I/O share", 0.5, _io_share, _model_claim(IMAGENET, "lmdb", None, "io_s"),
          paper_factor=0.9, dataset="imagenet", ylabel="I/O share of an iteration"),
    Claim("C2", "03_lmm", "HPCC 2017",
          "LMDBIO-LMM (one reader per node) is up to 20x faster than LMDB",
          "LMM/LMDB read throughput (ImageNet records)",
          "LMM/LMDB", 1.2, _throughput("lmdb", "lmdbio-lmm", "imagenet"),
          _model_claim(IMAGENET, "lmdb", "lmdbio-lmm", "io_s"), paper_factor=20.0, dataset="imagenet"),
    Claim("C3", "04_dm", "ICPADS 2017",
          "LMDBIO-DM (cursor handed around a ring) is 2x faster than LMDBIO-LMM",
          "DM/LMM read throughput, one reader per rank (CIFAR-10 records)",
          "DM/LMM", 1.2, _throughput("lmdbio-lmm", "lmdbio-lmm-dm", "cifar10"),
          _model_claim(CIFAR, "lmdbio-lmm", "lmdbio-lmm-dm", "io_s"), paper_factor=2.0, dataset="cifar10"),
    Claim("C4", "05_dio", "TOPC 2019",
          "Direct I/O removes mmap's page-fault overheads (problem 3) and is faster",
          "DIO/LMM read throughput (ImageNet records)",
          "DIO/LMM", 1.2, _throughput("lmdbio-lmm", "lmdbio-lmm-dio", "imagenet"),
          _model_claim(IMAGENET, "lmdbio-lmm", "lmdbio-lmm-dio", "io_s"), dataset="imagenet"),
    Claim("C5", "06_prov", "TOPC 2019",
          "Provenance removes DIO's sequential index pass",
          "PROV/DIO throughput of a whole run, reader setup included (CIFAR-10 records)",
          "PROV/DIO, setup included", 1.2, _prov_run,
          _model_claim(CIFAR, "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov", "io_s"), dataset="cifar10",
          ylabel="PROV/DIO, setup included"),
    Claim("C6", "07_coal", "TOPC 2019",
          "Coalescing several iterations into MiB-sized requests raises throughput (problem 4)",
          "COAL (about 4 MiB requests)/no COAL read throughput (CIFAR-10 records)",
          "COAL/no COAL", 1.2, _coal,
          _model_claim(CIFAR, "lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal", "io_s"), dataset="cifar10"),
    Claim("C7", "08_stag", "TOPC 2019",
          "Staggering the readers' I/O in groups reduces storage contention (problem 5)",
          "STAG/no STAG read throughput, one reader per rank (ImageNet records)",
          "STAG/no STAG", 1.2, _stag,
          _model_claim(IMAGENET, "lmdbio-lmm-dio-prov-coal", FULL, "io_s"), dataset="imagenet"),
    Claim("C8", "09_scaling", "Poster 2018",
          "The full LMDBIO stack is 77x faster than LMDB at 9,216 processes (CIFAR10-Large)",
          "LMDBIO-LMM-DIO-PROV-COAL-STAG/LMDB read throughput (CIFAR-10 records)",
          "full stack/LMDB", 10.0, _throughput("lmdb", FULL, "cifar10"),
          _model_claim(CIFAR, "lmdb", FULL, "io_s"), paper_factor=77.0, dataset="cifar10"),
    Claim("C8-imagenet", "09_scaling", "TOPC 2019",
          "The full LMDBIO stack is up to 65x faster than LMDB at 9,216 processes (ImageNet)",
          "LMDBIO-LMM-DIO-PROV-COAL-STAG/LMDB read throughput (ImageNet records)",
          "full stack/LMDB", 10.0, _throughput("lmdb", FULL, "imagenet"),
          _model_claim(IMAGENET, "lmdb", FULL, "io_s"), paper_factor=65.0, dataset="imagenet"),
)

#: Not a claim of its own: the training view of C1 and C8 that notebook 10 shows.
TRAINING = Claim("T", "10_training", "TOPC 2019",
                 "LMDBIO brings Caffe's total training time down (up to 65x on 9,216 cores)",
                 "LMDB/full LMDBIO emulated training time (ImageNet records, AlexNet compute)",
                 "full stack/LMDB training time", 1.2, _training,
                 _model_claim(IMAGENET, "lmdb", FULL, "total_s"), paper_factor=65.0, dataset="imagenet",
                 ylabel="training time LMDB / full stack")

_BY_ID = {c.id: c for c in (*CLAIMS, TRAINING)}


def claim(claim_id: str) -> Claim:
    """The claim ``C1`` .. ``C8``, ``C8-imagenet`` (or ``T``, notebook 10's training view)."""
    try:
        return _BY_ID[claim_id]
    except KeyError:
        raise KeyError(f"no claim {claim_id!r}; the claims are {', '.join(_BY_ID)}") from None


def _ids(ids) -> set:
    """Claim ids with their per-dataset variants (``C8`` also selects ``C8-imagenet``)."""
    want = set(ids)
    return {c for c in _BY_ID if c in want or c.split("-")[0] in want}


def setting_dir(results_root: str | Path, notebook: str, setting: str) -> Path:
    """Where a setting's results are: ``NN_name/``, ``NN_name/gpfs/`` or ``model_prediction/``.

    The model setting is ``model_prediction/`` (``lmdbio model predict``: predictions and the
    band of sensitivity.csv), except in a notebook run's own results root, where a claim
    notebook's model cell wrote ``NN_name/model/`` this run (no band: its verdict says so).
    """
    if setting == "model":
        own = Path(results_root) / notebook / "model"
        if (notebook and Path(results_root).resolve() != COMMITTED_RESULTS.resolve()
                and (own / "meta.json").exists()):
            return own
        return Path(results_root) / MODEL_DIR
    base = Path(results_root) / notebook
    return base if setting == "local" else base / setting


def resolve(results_root, notebook: str, setting: str, fallback: bool = True) -> tuple[Path, str]:
    """A setting's results folder and where it is: ``"here"``, or ``"committed"`` when
    ``results_root`` has none and ``fallback`` allows the repository's copy."""
    d = setting_dir(results_root, notebook, setting)
    if (d / "meta.json").exists() or not fallback:
        return d, "here"
    return setting_dir(COMMITTED_RESULTS, notebook, setting), "committed"


def _quantity(c: Claim, results_root, s: str, fallback: bool):
    d, source = resolve(results_root, c.notebook, s, fallback)
    root = results_root if source == "here" else COMMITTED_RESULTS
    df = c.quantity(s, d, root)
    return d, source, df


def series(claim: Claim | str, results_root=COMMITTED_RESULTS, *, fallback: bool = True) -> dict:
    """``{setting: DataFrame(nprocs, value, lo, hi, ...)}`` of a claim's quantity (settings with data)."""
    claim = _BY_ID[claim] if isinstance(claim, str) else claim
    out = {}
    for s in SETTINGS:
        _, _, df = _quantity(claim, results_root, s, fallback)
        if df is not None and len(df):
            out[s] = df.sort_values("nprocs").reset_index(drop=True)
    return out


def _rel(d: Path) -> str:
    d = Path(d).resolve()
    return str(d.relative_to(REPO)) if d.is_relative_to(REPO) else str(d)


def _fmt(v: float, threshold: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return f"{v:.2f}" if threshold < 2 else f"{v:.1f}"


def _committed_commit() -> str:
    from .metrics import git_commit
    try:
        return str(git_commit())[:12]
    except Exception:  # noqa: BLE001 - a label only
        return "unknown"


def _judge(c: Claim, s: str, last) -> dict:
    """verdict, measured, why, magnitude and band of one setting's point."""
    v, lo, hi, thr = float(last["value"]), float(last["lo"]), float(last["hi"]), c.threshold
    f = lambda x: _fmt(x, thr)  # noqa: E731
    p = int(last["nprocs"])
    context = str(last.get("context", "") or "")
    if s == "model":
        verdict = band_verdict(lo, hi, thr)
        measured = f"{f(v)} at P={p} (band {f(lo)}-{f(hi)})"
        if verdict == "yes":
            reason = f"band {f(lo)}-{f(hi)} >= {thr:g}: every estimate at either end of its range agrees"
        elif verdict == "no":
            reason = f"band {f(lo)}-{f(hi)} < {thr:g}: every estimate at either end of its range agrees"
        else:
            reason = f"band {f(lo)}-{f(hi)} straddles {thr:g}; decided by {last['decides'] or '?'}"
        if lo == hi:
            reason += " (no estimate ranges found: sensitivity.csv missing)"
        repeats = 0
    else:
        n = int(last.get("repeats", 0) or 0)
        verdict = direction(lo, hi, thr)
        one = n <= 1
        measured = f"{f(v)} at P={p}" + ("" if one or lo == hi else f" (repeats {f(lo)}-{f(hi)})")
        if one:
            reason = f"{f(v)} {'>=' if v >= thr else '<'} {thr:g} (1 repeat)"
        elif verdict == "yes":
            reason = f"smallest of {n} repeats {f(lo)} >= {thr:g}"
        elif verdict == "no":
            reason = f"largest of {n} repeats {f(hi)} < {thr:g}"
        else:
            reason = f"{n} repeats {f(lo)}-{f(hi)} straddle {thr:g}"
        repeats = n
    mag = magnitude(v, c.paper_factor)
    if c.paper_factor:
        reason += f"; {f(v)} vs the paper's {c.paper_factor:g}: {mag}"
    why = reason + (f"; {context}" if context else "")
    return {"verdict": verdict, "measured": measured, "why": why, "magnitude": mag, "nprocs": p,
            "value": v, "band_low": lo if s == "model" else np.nan,
            "band_high": hi if s == "model" else np.nan, "repeats": repeats,
            "decides": str(last.get("decides", "") or "")}


def evaluate(results_root=COMMITTED_RESULTS, claims=CLAIMS, *, fallback: bool = True) -> pd.DataFrame:
    """One row per claim and setting: the value at the largest P, the verdicts and why."""
    rows = []
    commit = None
    for c in claims:
        for s in SETTINGS:
            d, source, df = _quantity(c, results_root, s, fallback)
            df = None if df is None else df.dropna(subset=["value"])
            base = {"claim": c.id, "setting": s, "criterion": c.criterion, "paper": c.paper,
                    "paper_factor": c.paper_factor if c.paper_factor else np.nan, "dataset": c.dataset,
                    "notebook": c.notebook, "quantity": c.quantity_name, "threshold": c.threshold,
                    "source": _rel(d)}
            if df is None or df.empty:
                run = "lmdbio model predict" if s == "model" else f"notebook {c.notebook} with RUN=True"
                why = f"no results in {_rel(d)} (run {run})"
                if s != "model" and df is not None and c.dataset:
                    why = (f"{_rel(d)} holds no {c.dataset} points ({c.notebook} does not measure "
                           f"{c.dataset}); the model setting judges it at the papers' scale")
                rows.append({**base, "measured": "no data", "verdict": "no data", "magnitude": "no data",
                             "nprocs": np.nan, "value": np.nan, "repeats": 0, "decides": "",
                             "why": why})
                continue
            j = _judge(c, s, df.loc[df["nprocs"].idxmax()])
            if source == "committed":
                commit = commit or _committed_commit()
                j["why"] += f" [committed results at {commit}: this run did not measure this setting]"
            rows.append({**base, **j})
    return pd.DataFrame(rows, columns=COLUMNS + DETAILS)


def write(results_root=COMMITTED_RESULTS, out: str | Path | None = None, *,
          fallback: bool = True) -> pd.DataFrame:
    """Evaluate every claim and write ``claims.csv`` (default: ``results_root/claims.csv``)."""
    df = evaluate(results_root, fallback=fallback)
    _write_csv(df, Path(out) if out else Path(results_root) / "claims.csv")
    return df


def _write_csv(df: pd.DataFrame, out: Path) -> None:
    """Write ``out`` whole or not at all: notebooks replotting side by side rewrite the same files."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, out)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(df: pd.DataFrame, ids=None) -> str:
    """A Markdown table of claims.csv rows (all, or those of ``ids``; ``C8`` includes ``C8-imagenet``)."""
    if ids is not None:
        df = df[df["claim"].isin(_ids(ids))]
    lines = ["| claim | paper | setting | measured | criterion | verdict | magnitude | why |",
             "|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        c = _BY_ID.get(r.claim)
        name = f"{r.claim}: {c.statement}" if c else r.claim
        lines.append("| " + " | ".join(_cell(x) for x in (
            name, r.paper, SETTING_LABELS.get(r.setting, r.setting), r.measured, r.criterion,
            f"**{r.verdict}**", getattr(r, "magnitude", NO_FACTOR), r.why)) + " |")
    return "\n".join(lines)


def show(results_root, ids):
    """A notebook's closing cell: rewrite claims.csv, then show its claims' rows as Markdown."""
    from IPython.display import Markdown, display

    df = write(results_root)
    rows = df[df["claim"].isin(_ids(ids))]
    display(Markdown(f"## Verdicts (from `{Path(results_root).name}/claims.csv`)\n\n" + render(rows)))
    return rows


def readme_table(df: pd.DataFrame) -> str:
    return f"{MARK_START}\n{render(df)}\n{MARK_END}"


def _markers(name: str) -> tuple[str, str]:
    return (f"<!-- {name}: rendered by `python -m lmdbio.claims`; do not edit by hand -->",
            f"<!-- end of {name} -->")


def render_validation(results_root=COMMITTED_RESULTS) -> str:
    """The validation criterion per setting, from ``model_validation/criterion.csv`` and ``errors.csv``."""
    d = Path(results_root) / "model_validation"
    if not (d / "criterion.csv").exists():
        return "(no model_validation/criterion.csv: run `lmdbio model validate`)"
    c = pd.read_csv(d / "criterion.csv")
    lines = ["| setting | independent | variants meeting median \\|error\\| <= 25% | worst variant | "
             "its median error | its worst point | predicted to dominate there |",
             "|---|---|---|---|---|---|---|"]
    for r in c.itertuples():
        lines.append("| " + " | ".join(_cell(x) for x in (
            r.setting, "yes" if r.independent else "no (shares the storage model)",
            f"{r.variants_meeting} of {r.variants}", r.worst_variant,
            f"{100 * r.worst_median_signed_error:+.0f}%", r.worst_point, r.predicted_dominant)) + " |")
    return "\n".join(lines)


def render_split(results_root=COMMITTED_RESULTS) -> str:
    """The split by optimization against the papers' factors, from ``claims_split.csv``."""
    f = Path(results_root) / "claims_split.csv"
    if not f.exists():
        return "(no claims_split.csv: run `python -m lmdbio.claims`)"
    d = pd.read_csv(f)
    lines = ["| workload | ratio | P | model | band over the estimates | paper | magnitude | "
             "estimate that moves it most | slower variant dominated by |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in d.itertuples():
        lines.append("| " + " | ".join(_cell(x) for x in (
            r.workload, r.ratio, f"{r.nprocs:,}", _num(r.model_factor),
            f"{_num(r.band_low)}-{_num(r.band_high)}",
            f"{r.paper_factor:g}x ({r.paper})" if r.paper_factor == r.paper_factor else f"none stated ({r.paper})",
            r.magnitude,
            r.decides, r.slow_dominated_by)) + " |")
    return "\n".join(lines)


def render_claims_summary(df: pd.DataFrame) -> str:
    """The README's claims table: the paper's words and each setting's verdict, from claims.csv."""
    heads = {"local": "local disk", "gpfs": "emulated GPFS", "throttled": "throttled device",
             "model": "papers' scale (model)"}
    lines = ["| claim | the paper says | " + " | ".join(heads.get(s, s) for s in SETTINGS) + " |",
             "|---" * (2 + len(SETTINGS)) + "|"]
    for cid, g in df.groupby("claim", sort=False):
        c = _BY_ID.get(cid)
        v = g.set_index("setting")
        cells = [f"{v.loc[s, 'verdict']} ({v.loc[s, 'measured']})" if s in v.index else "-"
                 for s in SETTINGS]
        lines.append("| " + " | ".join(_cell(x) for x in (
            cid, f"{c.statement} ({c.paper})" if c else cid, *cells)) + " |")
    return "\n".join(lines)


def _replace_block(text: str, name: str, body: str, where: Path, required: bool) -> str:
    start, end = _markers(name) if name != "claims.csv" else (MARK_START, MARK_END)
    if start not in text or end not in text:
        if required:
            raise ValueError(f"{where} lacks the {name} markers ({start!r} ... {end!r})")
        return text
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + f"{start}\n{body}\n{end}" + tail


def rendered_blocks(df: pd.DataFrame, results_root=COMMITTED_RESULTS) -> dict:
    """``{marker name: rendered text}`` of every block the READMEs hold."""
    return {"claims.csv": render(df), "model_validation": render_validation(results_root),
            "claims_split.csv": render_split(results_root), "claims summary": render_claims_summary(df)}


def update_readme(df: pd.DataFrame, readme: str | Path = README, results_root=COMMITTED_RESULTS, *,
                  require=("claims.csv",)) -> Path:
    """Replace the rendered blocks in ``readme`` (those named in ``require`` must be there)."""
    readme = Path(readme)
    text = readme.read_text()
    for name, body in rendered_blocks(df, results_root).items():
        text = _replace_block(text, name, body, readme, required=name in require)
    readme.write_text(text)
    return readme


# --- the split by optimization, against the papers' factors ---------------------------------------

#: (paper, the paper's words, its factor, slower variant, faster variant)
SPLIT = (
    ("HPCC 2017", "LMDBIO-LMM nearly 20x faster than LMDB in some cases", 20.0, "lmdb", "lmdbio-lmm"),
    ("ICPADS 2017", "LMDBIO-DM 2x faster than LMDBIO-LMM", 2.0, "lmdbio-lmm", "lmdbio-lmm-dm"),
    ("ICPADS 2017", "LMDBIO-DM more than 30x faster than LMDB", 30.0, "lmdb", "lmdbio-lmm-dm"),
    ("TOPC 2019", "DIO over LMM: no factor of its own stated", None, "lmdbio-lmm", "lmdbio-lmm-dio"),
    ("TOPC 2019", "up to 65x overall on 9,216 cores", 65.0, "lmdb", FULL),
    ("Poster 2018", "77x, CIFAR10-Large-AlexNet, 512 iterations", 77.0, "lmdb", FULL),
)
#: The papers' process count for the split (the poster's and TOPC's largest; HPCC/ICPADS state none).
SPLIT_NPROCS = 9216


SPLIT_COLUMNS = ["workload", "nprocs", "ratio", "paper", "paper_claim", "paper_factor", "model_factor",
                 "band_low", "band_high", "magnitude", "band_magnitude", "decides", "slow_dominated_by",
                 "fast_dominated_by"]


def split_table(results_root=COMMITTED_RESULTS, nprocs: int = SPLIT_NPROCS, *,
                fallback: bool = True) -> pd.DataFrame:
    """One row per ratio and workload: the model's factor and band next to the paper's, and why.

    The ratio is of I/O time (setup and the iterations' read phases), as the
    claims' model setting takes it. ``magnitude`` uses :func:`magnitude`;
    ``decides`` names the estimate whose range moves the ratio most;
    ``slow_dominated_by``/``fast_dominated_by`` the mechanism of each
    variant at that P. DIO/LMM has no factor of its own in the papers
    (``paper_factor`` NaN); the full stack is set against both TOPC's 65x
    and the poster's 77x.
    """
    d, _ = resolve(results_root, "", "model", fallback)
    rows = []
    for w in (CIFAR, IMAGENET):
        fr = _model_frames(d, w)
        if fr is None:
            continue
        p, s = fr
        # The papers' process count, or the largest predicted (a tiny run stops far below it).
        at = nprocs if nprocs in set(p["nprocs"]) else int(p["nprocs"].max())
        mech = p[p["nprocs"] == at].set_index("variant")
        for paper, words, factor, slow, fast in SPLIT:
            def value(df, slow=slow, fast=fast):
                t = df.pivot_table(index="nprocs", columns="variant", values="io_s")
                return t[slow] / t[fast] if slow in t and fast in t else pd.Series(dtype=float)
            b = _band(p, s, value)
            if at not in b.index:
                continue
            r = b.loc[at]
            ends = r["ends"]
            moves = sorted(ends.items(), key=lambda kv: -abs(math.log(max(kv[1], 1e-300) / r["value"])))
            rows.append({"workload": w, "nprocs": at,
                         "ratio": f"{SHORT[fast]}/{SHORT[slow]}", "paper": paper, "paper_claim": words,
                         "paper_factor": factor if factor else np.nan, "model_factor": float(r["value"]),
                         "band_low": float(r["lo"]), "band_high": float(r["hi"]),
                         "magnitude": magnitude(float(r["value"]), factor),
                         "band_magnitude": (NO_FACTOR if not factor else
                                            "reproduced" if r["lo"] <= factor * FACTOR_TOLERANCE
                                            and r["hi"] >= factor / FACTOR_TOLERANCE else
                                            magnitude(float(r["hi"]), factor)),
                         "decides": "; ".join(f"{k} gives {_num(v)}" for k, v in moves[:2]),
                         "slow_dominated_by": mech.loc[slow, "dominant_mechanism"],
                         "fast_dominated_by": mech.loc[fast, "dominant_mechanism"]})
    return pd.DataFrame(rows, columns=SPLIT_COLUMNS)


def write_split(results_root=COMMITTED_RESULTS, out: str | Path | None = None, *,
                fallback: bool = True) -> pd.DataFrame:
    """Write ``claims_split.csv`` (default: ``results_root/claims_split.csv``)."""
    df = split_table(results_root, fallback=fallback)
    _write_csv(df, Path(out) if out else Path(results_root) / "claims_split.csv")
    return df


def compare_runs(first, second) -> pd.DataFrame:
    """Two claims.csv files (two runs of ``make reproduce``) side by side, one row per claim and
    measured setting: each run's verdict and measured value, and ``changed`` (the verdicts differ).
    The model setting is left out (its inputs are the same in both runs unless calibration moved)."""
    a, b = pd.read_csv(first), pd.read_csv(second)
    keys = ["claim", "setting"]
    both = a[keys + ["verdict", "measured"]].merge(b[keys + ["verdict", "measured"]], on=keys,
                                                    how="outer", suffixes=("_first", "_second"))
    both = both[both["setting"] != "model"].fillna({"verdict_first": "absent", "verdict_second": "absent"})
    both["changed"] = both["verdict_first"] != both["verdict_second"]
    return both.reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lmdbio.claims",
                                description="Judge the papers' claims C1-C8 from the results files.")
    p.add_argument("--results", default=str(COMMITTED_RESULTS), help="results root (default: data/results)")
    p.add_argument("--readme", default=str(README), help="README whose claims table to rewrite")
    p.add_argument("--no-readme", action="store_true", help="only write claims.csv and claims_split.csv")
    p.add_argument("--compare", nargs=2, metavar=("FIRST", "SECOND"),
                   help="only compare two claims.csv files (two runs) and print the verdicts that differ")
    p.add_argument("--out", help="with --compare: also write the comparison to this CSV")
    args = p.parse_args(argv)
    if args.compare:
        cmp = compare_runs(*args.compare)
        if args.out:
            cmp.to_csv(args.out, index=False)
        changed = cmp[cmp["changed"]]
        print(f"{len(changed)} of {len(cmp)} measured verdicts differ between the two runs")
        for r in changed.itertuples():
            print(f"{r.claim:11s} {r.setting:9s} {r.verdict_first} ({r.measured_first}) -> "
                  f"{r.verdict_second} ({r.measured_second})")
        return 0
    df = write(args.results)
    split = write_split(args.results)
    if not args.no_readme:
        update_readme(df, args.readme, args.results)
        if Path(args.readme).resolve() == README.resolve():
            update_readme(df, REPO / "README.md", args.results, require=("claims summary",))
    for r in df.itertuples():
        print(f"{r.claim:11s} {r.setting:6s} {r.verdict:12s} {r.magnitude:10s} {r.measured}")
    for r in split.itertuples():
        print(f"{r.workload:22s} {r.ratio:16s} model {r.model_factor:9.3g} ({r.band_low:.3g}-{r.band_high:.3g})"
              f"  paper {r.paper_factor:g} ({r.paper}): {r.magnitude}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
