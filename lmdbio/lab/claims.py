"""The papers' claims: one registry, each with a quantity, a criterion and the paper's own factor.

Every claim is judged in five settings, each from its own results folder:

- ``local``: measured on this machine's local disk (``NN_name/summary.csv`` or ``rows.csv``);
- ``gpfs``: measured through the emulated GPFS, ``lmdbio.lab.pfs`` (``NN_name/gpfs/``);
- ``throttled``: measured on throttled loop devices, ``lmdbio.lab.storage`` (``NN_name/throttled/``);
- ``shared``: measured on one shared throttled target (``make bench-shared``), its sweep's
  points copied into ``NN_name/shared/`` by :func:`shared_results`;
  the claims the sweep cannot judge are ``not measured`` (:data:`SHARED_NOT_MEASURED`);
- ``model``: ``lmdbio model predict --platform bebop`` at the papers' scale
  (``model_prediction/predictions.csv``, its joint samples ``joint.csv`` and the
  poster-axis check of ``absolute.csv``).

The verdicts are defined here once and used by every table:

- **direction** (``verdict``), measured: ``yes`` only when the smallest repeat
  clears the threshold, ``no`` only when the largest is below it,
  ``inconclusive`` otherwise (one repeat: judged from it, and said so);
  model: the band is 5-95% of the joint samples (every estimate drawn at once
  over its range, :mod:`lmdbio.lab.model.uncertainty`, ``joint.csv``); ``yes``/``no``
  only when every sample is on one side of the threshold, else ``open``,
  naming the estimates the samples follow most; ``not judged by the model``
  when the setup fixes the answer (two variants that are one run by
  construction, or an I/O share that even the storage's aggregate bandwidth
  decides). Model rows come one per workload wherever both are modelled;
- **magnitude**, against the paper's own factor: measured, ``reproduced``
  (within 2x of it), ``smaller``, ``larger``; model, from its band
  (:func:`band_word`): ``consistent`` (the band overlaps [f/2, 2f]),
  ``uninformative`` (the band spans more than 10x), ``smaller``, ``larger``;
  ``no paper factor`` where the paper states none.

Every ``why`` is built from the data: the verdict's numbers, then the phase
(measured) or the mechanism (model) that dominates each variant compared.

A repeats directory (``results_root/repeats/*.csv``), when present, supplies
the measured settings' repeats; see :func:`read_repeats` for the format.

``python -m lmdbio.lab.claims`` rewrites every ``NN_name/shared/`` from the bench-shared sweep,
then writes ``data/results/claims.csv``,
``data/results/claims_split.csv`` (the split by optimization against the
papers' factors), the table between the markers in ``figures/README.md`` and
the claims summary between its markers in ``docs/claims.md``.
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
           "FULL", "FACTOR_TOLERANCE", "NO_FACTOR", "MODEL_DIR", "REPEATS_DIR", "SHARED_NOT_MEASURED",
           "NOT_MEASURED", "SHARED_SWEEP", "SHARED_NOTEBOOKS", "shared_results", "setting_dir", "resolve", "series",
           "direction", "band_verdict", "magnitude", "band_word", "axis_rows", "CHECKS", "read_repeats", "compare_runs",
           "evaluate", "write", "render", "show", "readme_table", "update_readme", "CLAIMS_DOC", "rendered_blocks",
           "render_validation", "render_split", "render_claims_summary",
           "SPLIT", "split_table", "write_split", "TRAINING", "main"]

SETTINGS = ("local", "gpfs", "throttled", "shared", "model")
SETTING_LABELS = {"local": "local disk, measured", "gpfs": "emulated GPFS, measured",
                  "throttled": "throttled block device, measured",
                  "shared": "shared throttled target, measured",
                  "model": "papers' scale, model"}
COLUMNS = ["claim", "setting", "measured", "criterion", "verdict", "why"]
DETAILS = ["magnitude", "band_low", "band_high", "paper_factor", "dataset", "repeats", "decides",
           "paper", "notebook", "quantity", "nprocs", "value", "threshold", "source"]
#: A shared-setting row whose quantity needs an experiment the shared sweep does not run.
NOT_MEASURED = "not measured"
#: Every verdict a row can have ("no data": the setting has no results).
VERDICTS = ("yes", "no", "inconclusive", "open", "not judged by the model", NOT_MEASURED, "no data")
README = REPO / "figures" / "README.md"
#: The page whose "claims summary" block ``python -m lmdbio.lab.claims`` rewrites beside README's table.
CLAIMS_DOC = REPO / "docs" / "claims.md"
MARK_START = "<!-- claims.csv: rendered by `python -m lmdbio.lab.claims`; do not edit by hand -->"
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
    """The model's verdict from its lowest and highest joint sample: yes/no only when every
    sample is on one side of the threshold, else open."""
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
            from lmdbio.errors import ConfigurationError
            raise ConfigurationError(f"{f}: a repeats file needs columns {sorted(need)} and records_per_s "
                                     "or time_s (see lmdbio.lab.claims.read_repeats)")
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


# --- the model setting: predictions and their band over the joint samples of every estimate -------

#: The model's band: 5-95% of the joint samples (lmdbio.lab.model.uncertainty).
MODEL_BAND = (0.05, 0.95)
#: A model band wider than this (high / low) says little: its band word is "uninformative".
UNINFORMATIVE = 10.0
#: Aggregate read bandwidth of the papers' storage at its most generous (lmdbio.lab.model.absolute):
#: the floor below which no I/O of one iteration can go.
FLOOR_BW = 23e9
#: The papers' workloads in the model, by the dataset name the claims use.
WORKLOAD_OF = {"cifar10": "cifar10-large-alexnet", "imagenet": "imagenet-caffenet"}
DATASET_OF = {w: d for d, w in WORKLOAD_OF.items()}
NOT_JUDGED = "not judged by the model"


def _io_s(p: pd.DataFrame) -> pd.Series:
    # I/O time: the setup and every iteration's phases other than compute and the allreduce.
    return p["setup_s"] + p["iterations"] * (p["per_iteration_s"] - p["compute_s"] - p["communicate_s"])


def _default_batch(d: Path, workload: str) -> str | None:
    """The batch reading the verdicts use (meta.json's ``default_batch``; None: not recorded)."""
    f = d / "meta.json"
    try:
        import json
        return json.loads(f.read_text()).get("default_batch", {}).get(workload)
    except (OSError, ValueError, AttributeError):
        return None


def _model_frames(d: Path, workload: str) -> tuple[pd.DataFrame, pd.DataFrame | None] | None:
    """The central predictions and the joint samples of one workload, under its default batch."""
    f = d / "predictions.csv"
    if not f.exists():
        return None
    p = pd.read_csv(f)
    batch = _default_batch(d, workload)

    def pick(df):
        df = df[df["workload"] == workload]
        if "cache" in df.columns:
            df = df[df["cache"] == "cold"]
        if "batch" in df.columns:
            df = df[df["batch"] == (batch or df["batch"].iloc[0])] if len(df) else df
        return df.assign(io_s=_io_s(df))
    p = pick(p)
    s = pick(pd.read_csv(d / "joint.csv")) if (d / "joint.csv").exists() else None
    return p, s


def _band(central: pd.DataFrame, joint: pd.DataFrame | None, value: Callable[..., pd.Series]
          ) -> pd.DataFrame:
    """value per P (central) and over the joint samples: the 5-95% band, every sample's extremes,
    and per P a frame of the samples (their estimate columns and the value) for the deciders.
    ``value(df, index=...)`` pivots ``df`` by ``index`` (``"nprocs"``, or sample and P)."""
    c = value(central).rename("value")
    out = c.to_frame()
    out["lo"] = out["hi"] = out["smin"] = out["smax"] = out["value"]
    out["samples"] = 0
    out["decides"] = ""
    out["frames"] = [None] * len(out)
    if joint is not None and len(joint):
        xcols = [k for k in joint.columns if k.startswith("x:")]
        # One pivot over (sample, P) for every sample at once.
        per = value(joint, index=["sample", "nprocs"]).rename("v").reset_index().dropna()
        xs = joint.drop_duplicates("sample").set_index("sample")[xcols]
        for p, g in per.groupby("nprocs"):
            if p not in out.index or not len(g):
                continue
            v = g["v"].to_numpy(float)
            out.at[p, "lo"], out.at[p, "hi"] = (float(np.quantile(v, MODEL_BAND[0])),
                                                 float(np.quantile(v, MODEL_BAND[1])))
            # The central values are one more configuration: a verdict must hold there too.
            c0 = float(out.at[p, "value"])
            out.at[p, "smin"], out.at[p, "smax"] = min(float(v.min()), c0), max(float(v.max()), c0)
            out.at[p, "samples"] = len(v)
            out.at[p, "frames"] = xs.loc[g["sample"]].assign(value=v).reset_index(drop=True)
    return out


def _deciders(frame: pd.DataFrame | None, threshold: float | None = None) -> str:
    """The estimates the samples' value follows most (Spearman's rho of log value), strongest first."""
    from .model.uncertainty import deciders

    if frame is None or len(frame) < 3:
        return ""
    return "; ".join(f"{n} (rho {r:+.2f})" for n, r in deciders(frame, "value", top=3))


def _num(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"


def band_word(lo: float, hi: float, paper_factor: float | None) -> str:
    """A model band against the paper's factor: ``uninformative`` when the band spans more than
    10x, ``consistent`` when it overlaps [f/2, 2f], else ``smaller``/``larger``."""
    if paper_factor is None or not (paper_factor > 0) or not (math.isfinite(lo) and math.isfinite(hi)):
        return NO_FACTOR
    if lo > 0 and hi / lo > UNINFORMATIVE:
        return "uninformative"
    if hi < paper_factor / FACTOR_TOLERANCE:
        return "smaller"
    if lo > paper_factor * FACTOR_TOLERANCE:
        return "larger"
    return "consistent"


def _same_runs(central: pd.DataFrame, joint: pd.DataFrame | None, slow: str, fast: str) -> set:
    """The process counts where ``fast`` and ``slow`` have the same I/O time in every sample and
    the central prediction (one pivot per frame)."""
    same = None
    for f in [central] + ([joint] if joint is not None else []):
        keys = ["sample", "nprocs"] if "sample" in f.columns else ["nprocs"]
        t = f.pivot_table(index=keys, columns="variant", values="io_s")
        if slow not in t or fast not in t:
            return set()
        eq = pd.Series(np.isclose(t[slow], t[fast], rtol=1e-12, atol=0), index=t.index)
        here = set(eq.groupby(level="nprocs").all().loc[lambda x: x].index)
        same = here if same is None else same & here
    return same or set()


def _structural_ratio(central: pd.DataFrame, joint: pd.DataFrame | None, slow: str, fast: str, at: int,
                      same: set | None = None) -> str:
    """Why ``fast`` and ``slow`` are one run by construction at ``at`` (every sample and the central
    equal), or ''. COAL with k = 1 is PROV: one reader's batch share is already >= the coalesce size.
    ``same`` is :func:`_same_runs`, when the caller asks for several ``at``."""
    if at not in (same if same is not None else _same_runs(central, joint, slow, fast)):
        return ""
    c = central[(central["nprocs"] == at) & (central["variant"] == fast)]
    k = int(c["coalesce"].iloc[0]) if "coalesce" in c.columns and len(c) else 0
    why = f"{SHORT.get(fast, fast)} and {SHORT.get(slow, slow)} are the same run at P={at:,} in every sample"
    if k == 1 and "group_records" in c.columns:
        why += (f" (COAL's k = 1: one reader's {c['group_records'].iloc[0]:,.0f} records per batch already "
                "reach the coalesce size)")
    return why


def _structural_share(central: pd.DataFrame, joint: pd.DataFrame | None, slow: str, at: int,
                      threshold: float) -> str:
    """Why the I/O share is fixed by the setup at ``at``, or '': when even the storage's aggregate
    bandwidth (the floor, 23 GB/s) gives every sample the same side of the threshold."""
    frames = [central] + ([joint] if joint is not None else [])
    sides, floors = set(), []
    for f in frames:
        g = f[(f["nprocs"] == at) & (f["variant"] == slow)]
        if not {"global_batch", "record_bytes"} <= set(g.columns) or g.empty:
            return ""
        floor = g["global_batch"] * g["record_bytes"] / FLOOR_BW
        share = floor / (floor + g["compute_s"] + g["communicate_s"])
        sides |= set((share >= threshold).tolist())
        floors.append(float(share.min()))
    if len(sides) != 1 or sides != {True}:
        return ""
    g = central[(central["nprocs"] == at) & (central["variant"] == slow)].iloc[0]
    return (f"fixed by the setup: at P={at:,} one iteration's {g['global_batch'] * g['record_bytes'] / 1e9:.3g} GB "
            f"take {g['global_batch'] * g['record_bytes'] / FLOOR_BW:.3g} s even at the storage's aggregate "
            f"23 GB/s, against {g['compute_s'] + g['communicate_s']:.3g} s of compute and allreduce: a share "
            f">= {min(floors):.2f} in every sample, whatever the I/O mechanisms")


def _model_claim(workloads, slow: str, fast: str | None, col: str):
    """A model quantity per workload: ``slow/fast`` of ``col`` per P, or ``slow``'s ``col``/total_s
    when fast is None; ``workloads`` one name or several (one row per workload where modelled)."""
    names = (workloads,) if isinstance(workloads, str) else tuple(workloads)

    def one(d: Path, threshold: float, workload: str):
        fr = _model_frames(d, workload)
        if fr is None:
            return None
        p, s = fr

        def value(df, index="nprocs"):
            t = df.pivot_table(index=index, columns="variant", values=list(dict.fromkeys([col, "total_s"])))
            if (col, slow) not in t or (fast is not None and (col, fast) not in t):
                return pd.Series(dtype=float)
            if fast is None:
                return t[(col, slow)] / t[("total_s", slow)]
            return t[(col, slow)] / t[(col, fast)]
        b = _band(p, s, value)
        if b.empty:
            return None
        b["decides"] = [_deciders(f) for f in b["frames"]]
        b["above"] = [int((f["value"] >= threshold).sum()) if f is not None else 0 for f in b["frames"]]
        same = _same_runs(p, s, slow, fast) if fast is not None else None
        b["structural"] = [(_structural_ratio(p, s, slow, fast, n, same) if fast is not None
                            else _structural_share(p, s, slow, n, threshold)) for n in b.index]
        mech = p.set_index(["variant", "nprocs"])["dominant_mechanism"]
        phase = p.set_index(["variant", "nprocs"])["dominant_phase"]

        def dom(v, n):
            ph = phase.get((v, n), "")
            return ph if ph in ("compute", "communicate") else mech.get((v, n), "?")
        b["context"] = [(f"{SHORT.get(fast, fast)} dominated by {dom(fast, n)}; " if fast else "")
                        + f"{SHORT.get(slow, slow)} by {dom(slow, n)}" for n in b.index]
        out = b.drop(columns="frames").reset_index()
        out["workload"] = workload
        return out

    def q(d: Path, threshold: float):
        parts = [x for x in (one(d, threshold, w) for w in names) if x is not None and len(x)]
        return pd.concat(parts, ignore_index=True) if parts else None
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
        if setting == "shared" and self.id in SHARED_NOT_MEASURED:
            return None
        return self.measured(setting, d, results_root)


def _dataset(setting: str, dataset: str | None) -> str | None:
    """The records a setting's points are taken from: the claim's, except in the shared setting,
    whose sweep reads one dataset (its rows and meta.json say which)."""
    return None if setting == "shared" else dataset


def _throughput(slow: str, fast: str, dataset: str, col: str = "records_per_s"):
    def q(setting: str, d: Path, root):
        rep = read_repeats(root, setting) if root is not None else None
        if rep is not None:
            r = _measured_throughput(rep, slow, fast, col, dataset)
            if r is not None and len(r):
                return r
        return _measured_throughput(_summary(d), slow, fast, col, _dataset(setting, dataset))
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
    if pts is None:   # a bench sweep (the shared setting): COAL at the Reader's default, 4 MiB
        return _measured_throughput(_summary(d), base, coal, "records_per_s", _dataset(setting, "cifar10"))
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
    if pts is None:   # a bench sweep (the shared setting): STAG's default group, half the readers
        return _measured_throughput(_summary(d), base, stag, "records_per_s", _dataset(setting, "imagenet"))
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
          "I/O share", 0.5, _io_share, _model_claim((IMAGENET, CIFAR), "lmdb", None, "io_s"),
          paper_factor=0.9, dataset="imagenet", ylabel="I/O share of an iteration"),
    Claim("C2", "03_lmm", "HPCC 2017",
          "LMDBIO-LMM (one reader per node) is up to 20x faster than LMDB",
          "LMM/LMDB read throughput (ImageNet records)",
          "LMM/LMDB", 1.2, _throughput("lmdb", "lmdbio-lmm", "imagenet"),
          _model_claim((IMAGENET, CIFAR), "lmdb", "lmdbio-lmm", "io_s"), paper_factor=20.0, dataset="imagenet"),
    Claim("C3", "04_dm", "ICPADS 2017",
          "LMDBIO-DM (cursor handed around a ring) is 2x faster than LMDBIO-LMM",
          "DM/LMM read throughput, one reader per rank (CIFAR-10 records)",
          "DM/LMM", 1.2, _throughput("lmdbio-lmm", "lmdbio-lmm-dm", "cifar10"),
          _model_claim((CIFAR, IMAGENET), "lmdbio-lmm", "lmdbio-lmm-dm", "io_s"), paper_factor=2.0, dataset="cifar10"),
    Claim("C4", "05_dio", "TOPC 2019",
          "Direct I/O removes mmap's page-fault overheads (problem 3) and is faster",
          "DIO/LMM read throughput (ImageNet records)",
          "DIO/LMM", 1.2, _throughput("lmdbio-lmm", "lmdbio-lmm-dio", "imagenet"),
          _model_claim((IMAGENET, CIFAR), "lmdbio-lmm", "lmdbio-lmm-dio", "io_s"), dataset="imagenet"),
    Claim("C5", "06_prov", "TOPC 2019",
          "Provenance removes DIO's sequential index pass",
          "PROV/DIO throughput of a whole run, reader setup included (CIFAR-10 records)",
          "PROV/DIO, setup included", 1.2, _prov_run,
          _model_claim((CIFAR, IMAGENET), "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov", "io_s"), dataset="cifar10",
          ylabel="PROV/DIO, setup included"),
    Claim("C6", "07_coal", "TOPC 2019",
          "Coalescing several iterations into MiB-sized requests raises throughput (problem 4)",
          "COAL (about 4 MiB requests)/no COAL read throughput (CIFAR-10 records)",
          "COAL/no COAL", 1.2, _coal,
          _model_claim((CIFAR, IMAGENET), "lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal", "io_s"),
          dataset="cifar10"),
    Claim("C7", "08_stag", "TOPC 2019",
          "Staggering the readers' I/O in groups reduces storage contention (problem 5)",
          "STAG/no STAG read throughput, one reader per rank (ImageNet records)",
          "STAG/no STAG", 1.2, _stag,
          _model_claim((IMAGENET, CIFAR), "lmdbio-lmm-dio-prov-coal", FULL, "io_s"), dataset="imagenet"),
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
                 "LMDB/full stack training time", 1.2, _training,
                 _model_claim(IMAGENET, "lmdb", FULL, "total_s"), paper_factor=65.0, dataset="imagenet",
                 ylabel="training time LMDB / full stack")

_BY_ID = {c.id: c for c in (*CLAIMS, TRAINING)}

#: The claims the shared setting cannot judge, and why: the shared sweep (``make bench-shared``)
#: times reading alone (no compute or allreduce) on CIFAR-10 records.
SHARED_NOT_MEASURED = {
    "C1": ("LMDB's I/O share of a training iteration needs the emulated compute and allreduce "
           "(ImageNet records, AlexNet compute); the shared sweep times reading alone (compute_time 0) "
           "on CIFAR-10 records"),
    "C8-imagenet": "the shared sweep reads CIFAR-10 records only; C8 judges the full stack over LMDB on them",
    "T": ("the training time needs the emulated compute and allreduce on ImageNet records; the shared "
          "sweep times reading alone (compute_time 0) on CIFAR-10 records"),
}


def claim(claim_id: str) -> Claim:
    """The claim ``C1`` .. ``C8``, ``C8-imagenet`` (or ``T``, notebook 10's training view)."""
    try:
        return _BY_ID[claim_id]
    except KeyError:
        raise KeyError(f"no claim {claim_id!r}; the claims are {', '.join(_BY_ID)}") from None


def _ids(ids) -> set:
    """Claim ids with their per-dataset variants (``C8`` also selects ``C8-imagenet``)."""
    if isinstance(ids, str):
        ids = [ids]
    want = set(ids)
    known = (*_BY_ID, *CHECKS)
    unknown = sorted(w for w in want if not any(c == w or c.split("-")[0] == w for c in known))
    if unknown:
        raise ValueError(f"no claim or check named {', '.join(map(repr, unknown))}; "
                         f"the ids are {', '.join(sorted({c.split('-')[0] for c in known}))}")
    return {c for c in known if c in want or c.split("-")[0] in want}


def setting_dir(results_root: str | Path, notebook: str, setting: str) -> Path:
    """Where a setting's results are: ``NN_name/``, ``NN_name/gpfs/`` or ``model_prediction/``.

    The model setting is ``model_prediction/`` (``lmdbio model predict``: predictions and the
    band of joint.csv), except in a notebook run's own results root, where a claim
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


# --- the shared setting: NN_name/shared/ from the bench-shared sweep ------------------------------

#: Where ``make bench-shared`` writes its runs (``cifar10-cold-k<K>[-TAG]/``), under a results root.
SHARED_SWEEP = "shared"
#: The claim notebooks and the variants of the shared sweep each one's shared folder holds; ``()``:
#: none of its claims is in the sweep (:data:`SHARED_NOT_MEASURED` says why).
SHARED_NOTEBOOKS = {
    "02_lmdb_analysis": (),
    "03_lmm": ("lmdb", "lmdbio-lmm"),
    "04_dm": ("lmdbio-lmm", "lmdbio-lmm-dm"),
    "05_dio": ("lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio"),
    "06_prov": ("lmdbio-lmm-dio", "lmdbio-lmm-dio-prov"),
    "07_coal": ("lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal"),
    "08_stag": ("lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag"),
    "09_scaling": ("raw", "lmdb", "lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov",
                   "lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag"),
    "10_training": (),
}


def _shared_run(run: Path) -> dict:
    """One bench-shared run folder: its time scale k (meta.json's profile, else the folder's name),
    its P values, cold summary rows and meta.json."""
    import json
    import re

    meta = json.loads((run / "meta.json").read_text())
    cfg = meta.get("config", {})
    k = (cfg.get("pfs") or {}).get("profile", {}).get("time_scale")
    if k is None:
        m = re.search(r"-k([0-9.]+)", run.name)
        k = float(m.group(1)) if m else float("nan")
    s = pd.read_csv(run / "summary.csv")
    s = s[s["cache"] == "cold"] if "cache" in s else s
    return {"run": run, "k": float(k), "summary": s, "meta": meta,
            "nprocs": sorted(int(p) for p in s["nprocs"].unique())}


def shared_results(results_root=COMMITTED_RESULTS) -> list[Path]:
    """Write each claim notebook's ``NN_name/shared/`` from the ``make bench-shared`` sweep.

    Reads ``results_root/shared/cifar10-cold-k*/{summary.csv, meta.json}``
    (default root: the committed ``data/results``). Each P is taken from the
    run at the smallest time scale k that has it (the sweep's main k; a run
    at a larger k for the same P is its check and is left out), so a later
    P = 64 folder joins at its own k. Writes ``summary.csv`` (the cold rows of
    the notebook's variants, :data:`SHARED_NOTEBOOKS`; none where the sweep
    holds none) and ``meta.json`` (the source folders, k per P, those left out,
    the dataset and node shape) into every notebook's ``shared/``; the claims
    read them as the ``shared`` setting. Rerunning it on the same sweep writes
    the same files. Returns the folders written (none when there is no sweep).
    """
    import json

    root = Path(results_root)
    runs = sorted((_shared_run(r) for r in (root / SHARED_SWEEP).glob("cifar10-cold-k*")
                   if (r / "summary.csv").exists() and (r / "meta.json").exists()),
                  key=lambda x: (x["k"], x["run"].name))
    if not runs:
        return []
    chosen: dict[int, dict] = {}
    for r in runs:   # smallest k first
        for p in r["nprocs"]:
            chosen.setdefault(p, r)
    used = [r for r in runs if any(chosen[p] is r for p in r["nprocs"])]
    rows = pd.concat([r["summary"][r["summary"]["nprocs"].isin([p for p in chosen if chosen[p] is r])]
                      for r in used], ignore_index=True)
    rows = rows.sort_values(["nprocs", "variant", "repeat"], kind="stable")
    cfg = used[0]["meta"].get("config", {})
    meta = {
        "setting": "shared",
        "written_by": "lmdbio.lab.claims.shared_results (make bench-shared, then python -m lmdbio.lab.claims)",
        "storage": cfg.get("storage", ""),
        "dataset": ",".join(sorted(rows["dataset_name"].astype(str).unique())) if "dataset_name" in rows
        else "",
        "ranks_per_node": cfg.get("ranks_per_node"), "readers_per_node": cfg.get("readers_per_node"),
        "k_by_nprocs": {str(p): chosen[p]["k"] for p in sorted(chosen)},
        "sources": [{"folder": _rel(r["run"]), "k": r["k"],
                     "nprocs": [p for p in r["nprocs"] if chosen[p] is r],
                     "git_commit": r["meta"].get("git_commit", ""), "written": r["meta"].get("written", "")}
                    for r in used],
        "left_out": [{"folder": _rel(r["run"]), "k": r["k"], "nprocs": r["nprocs"],
                      "why": "every P of it is taken from a run at a smaller k"}
                     for r in runs if r not in used],
        "host": used[0]["meta"].get("host", {}),
    }
    out = []
    for notebook, variants in SHARED_NOTEBOOKS.items():
        d = root / notebook / "shared"
        d.mkdir(parents=True, exist_ok=True)
        part = rows[rows["variant"].isin(variants)]
        if len(part):
            part.to_csv(d / "summary.csv", index=False)
        elif (d / "summary.csv").exists():
            (d / "summary.csv").unlink()
        (d / "meta.json").write_text(json.dumps({**meta, "notebook": notebook, "variants": list(variants)},
                                                indent=2) + "\n")
        out.append(d)
    return out


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
    from lmdbio.metrics import git_commit
    try:
        return str(git_commit())[:12]
    except Exception:  # noqa: BLE001 - a label only
        return "unknown"


def _shared_note(d: Path, nprocs: int, dataset: str) -> tuple[str, str]:
    """The shared sweep's dataset and what a shared row's why says of the sweep, from meta.json
    (:func:`shared_results`)."""
    import json
    try:
        m = json.loads((d / "meta.json").read_text())
    except (OSError, ValueError):
        return "", ""
    have = m.get("dataset", "")
    other = f" (the claim's other settings: {dataset})" if dataset and have and have != dataset else ""
    note = (f"; bench-shared: {have or '?'} records{other}, {m.get('ranks_per_node', '?')} ranks and "
            f"{m.get('readers_per_node', '?')} reader per virtual node")
    k = m.get("k_by_nprocs", {}).get(str(nprocs))
    if k is not None:
        note += f", time scale k = {k:g}"
    return have, note


def _judge(c: Claim, s: str, last) -> dict:
    """verdict, measured, why, magnitude and band of one setting's point."""
    v, lo, hi, thr = float(last["value"]), float(last["lo"]), float(last["hi"]), c.threshold
    f = lambda x: _fmt(x, thr)  # noqa: E731
    p = int(last["nprocs"])
    context = str(last.get("context", "") or "")
    if s == "model":
        smin, smax = float(last.get("smin", lo)), float(last.get("smax", hi))
        n = int(last.get("samples", 0) or 0)
        structural = str(last.get("structural", "") or "")
        measured = f"{f(v)} at P={p} (band {f(lo)}-{f(hi)})"
        if structural:
            verdict, reason = NOT_JUDGED, f"structural: {structural}"
        else:
            verdict = band_verdict(smin, smax, thr)
            if n == 0:
                reason = (f"{f(v)} {'>=' if v >= thr else '<'} {thr:g} (the central value alone: no "
                          f"joint.csv beside these predictions, as in a notebook run's own model cell; "
                          f"the committed band is data/results/{MODEL_DIR}/joint.csv)")
            elif verdict == "yes":
                reason = f"all {n} joint samples >= {thr:g} (lowest {f(smin)}; band 5-95% {f(lo)}-{f(hi)})"
            elif verdict == "no":
                reason = f"all {n} joint samples < {thr:g} (highest {f(smax)}; band 5-95% {f(lo)}-{f(hi)})"
            else:
                reason = (f"{int(last.get('above', 0) or 0)} of {n} joint samples >= {thr:g} (samples "
                          f"{f(smin)}-{f(smax)}); follows {last['decides'] or '?'}")
            if n and not lo <= v <= hi:
                reason += "; " + outside_band(f(v), v < lo)
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
    mag = band_word(lo, hi, c.paper_factor) if s == "model" else magnitude(v, c.paper_factor)
    if c.paper_factor:
        reason += (f"; band {f(lo)}-{f(hi)} vs the paper's {c.paper_factor:g}: {mag}" if s == "model"
                   else f"; {f(v)} vs the paper's {c.paper_factor:g}: {mag}")
    why = reason + (f"; {context}" if context else "")
    return {"verdict": verdict, "measured": measured, "why": why, "magnitude": mag, "nprocs": p,
            "value": v, "band_low": lo if s == "model" else np.nan,
            "band_high": hi if s == "model" else np.nan, "repeats": repeats,
            "decides": str(last.get("decides", "") or "")}


#: The model's own checks (rows of claims.csv, model setting): id -> statement.
CHECKS = {"A1": "The model's CIFAR10-Large series lie on the poster's time axis (10-100,000 s) at every P, "
                "global batch (the reference code's reading)",
          "A1-per-process": "The model's CIFAR10-Large series lie on the poster's time axis (10-100,000 s) "
                            "at every P, batch per process (weak scaling)"}


def axis_rows(results_root=COMMITTED_RESULTS, *, fallback: bool = True) -> list[dict]:
    """The poster-axis check of the model (``model_prediction/absolute.csv``): one row per batch
    reading, ``yes`` when every CIFAR10-Large series lies within 10-100,000 s at every P, else ``no``
    with FAILED and the series that leave the axis, where and by what mechanism."""
    from .model.absolute import POSTER_AXIS_S, axis_check

    d, source = resolve(results_root, "", "model", fallback)
    f = d / "absolute.csv"
    base = {"setting": "model", "criterion": "every series within 10-100,000 s at every P of the poster's axis",
            "paper": "Poster 2018", "paper_factor": np.nan, "dataset": "cifar10", "notebook": "11_scale_model",
            "quantity": "predicted total time of 512 iterations, every variant, P = 1 .. 9,216",
            "threshold": POSTER_AXIS_S[1], "source": _rel(d), "magnitude": NO_FACTOR, "band_low": np.nan,
            "band_high": np.nan, "repeats": 0, "decides": ""}
    if not f.exists():
        return [{**base, "claim": "A1", "measured": "no data", "verdict": "no data", "magnitude": "no data",
                 "nprocs": np.nan, "value": np.nan,
                 "why": f"no {_rel(f)} (run `lmdbio model absolute`)"}]
    t = pd.read_csv(f)
    if "batch" not in t.columns:
        t = t.assign(batch="global")
    axis = axis_check(t)
    default = _default_batch(d, "cifar10-large-alexnet") or "global"
    rows = []
    for b, g in sorted(axis.groupby("batch"), key=lambda kv: kv[0] != default):
        cid = "A1" if b == default else f"A1-{b}"
        bad = g[~g["inside"]]
        top = g.loc[g["max_s"].idxmax()]
        lo, hi = float(g["min_s"].min()), float(g["max_s"].max())
        if bad.empty:
            measured = f"inside: {lo:,.3g}-{hi:,.3g} s over {len(g)} series x {int(g['points'].max())} P"
            why = (f"every series within {POSTER_AXIS_S[0]:g}-{POSTER_AXIS_S[1]:,.0f} s; the largest "
                   f"{SHORT.get(top['variant'], top['variant'])} {top['max_s']:,.3g} s at "
                   f"P={int(top['worst_nprocs']):,} ({top['worst_mechanism']})")
        else:
            measured = (f"FAILED: {len(bad)} of {len(g)} series leave the axis ({lo:,.3g}-{hi:,.3g} s)")
            why = "FAILED check: " + "; ".join(
                f"{SHORT.get(r.variant, r.variant)} outside at P={r.outside_procs.replace(' ', ',')}, "
                f"worst {r.worst_s:,.3g} s at P={r.worst_nprocs:,} (x{r.worst_factor:.3g}), dominated by "
                f"{r.worst_mechanism}" for r in bad.itertuples())
        why += f" [{b} batch]"
        if source == "committed":
            why += f" [committed results at {_committed_commit()}]"
        rows.append({**base, "claim": cid, "measured": measured, "verdict": "yes" if bad.empty else "no",
                     "nprocs": int(top["worst_nprocs"]), "value": hi, "why": why})
    return rows


def evaluate(results_root=COMMITTED_RESULTS, claims=CLAIMS, *, fallback: bool = True,
             checks: bool | None = None) -> pd.DataFrame:
    """One row per claim and setting (per workload in the model setting): the value at the largest
    P, the verdicts and why; with ``checks`` (default: when every claim is judged) the model's
    poster-axis check too (:func:`axis_rows`)."""
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
            if s == "shared" and c.id in SHARED_NOT_MEASURED and (d / "meta.json").exists():
                why = f"not measured in this setting: {SHARED_NOT_MEASURED[c.id]}"
                if source == "committed":
                    commit = commit or _committed_commit()
                    why += f" [committed results at {commit}: this run did not measure this setting]"
                rows.append({**base, "measured": NOT_MEASURED, "verdict": NOT_MEASURED, "magnitude": "no data",
                             "nprocs": np.nan, "value": np.nan, "repeats": 0, "decides": "", "why": why})
                continue
            if df is None or df.empty:
                run = {"model": "lmdbio model predict",
                       "shared": "make bench-shared, then python -m lmdbio.lab.claims"}.get(
                    s, f"notebook {c.notebook} with RUN=True")
                why = f"no results in {_rel(d)} (run {run})"
                if s not in ("model", "shared") and df is not None and c.dataset:
                    why = (f"{_rel(d)} holds no {c.dataset} points ({c.notebook} does not measure "
                           f"{c.dataset}); the model setting judges it at the papers' scale")
                rows.append({**base, "measured": "no data", "verdict": "no data", "magnitude": "no data",
                             "nprocs": np.nan, "value": np.nan, "repeats": 0, "decides": "",
                             "why": why})
                continue
            groups = (list(df.groupby("workload", sort=False)) if s == "model" and "workload" in df.columns
                      else [(None, df)])
            for w, g in groups:
                j = _judge(c, s, g.loc[g["nprocs"].idxmax()])
                if s == "shared":
                    dataset, note = _shared_note(d, j["nprocs"], c.dataset)
                    base["dataset"] = dataset or base["dataset"]
                    j["why"] += note
                if source == "committed":
                    commit = commit or _committed_commit()
                    j["why"] += f" [committed results at {commit}: this run did not measure this setting]"
                rows.append({**base, **({"dataset": DATASET_OF.get(w, c.dataset)} if w else {}), **j})
    if checks or (checks is None and tuple(claims) == CLAIMS):
        rows += axis_rows(results_root, fallback=fallback)
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
        name = (f"{r.claim}: {c.statement}" if c else f"{r.claim}: {CHECKS[r.claim]}" if r.claim in CHECKS
                else r.claim)
        if r.setting == "model" and c is not None and isinstance(r.dataset, str) and r.dataset:
            name += f" [model: {r.dataset}]"
        lines.append("| " + " | ".join(_cell(x) for x in (
            name, r.paper, SETTING_LABELS.get(r.setting, r.setting), r.measured, r.criterion,
            f"**{r.verdict}**", getattr(r, "magnitude", NO_FACTOR), r.why)) + " |")
    return "\n".join(lines)


def show(results_root, ids, *, rewrite: bool = True):
    """A notebook's closing cell: judge every claim, show its claims' rows as Markdown.

    ``rewrite`` (the notebook's ``RUN``) also writes ``results_root/claims.csv``;
    a replot writes nothing.
    """
    from IPython.display import Markdown, display

    want = _ids(ids)   # a ValueError naming the known ids for an unknown one
    df = write(results_root) if rewrite else evaluate(results_root)
    rows = df[df["claim"].isin(want)]
    # A claim outside claims.csv (T, the training-time view of C1 and C8) is judged here.
    extra = [_BY_ID[c] for c in sorted(want) if c in _BY_ID and c not in set(df["claim"])]
    if extra:
        rows = pd.concat([rows, evaluate(results_root, extra)], ignore_index=True)
    name = Path(results_root).name
    where = f"`{name}/claims.csv`" if rewrite else f"the results in `{name}/`"
    display(Markdown(f"## Verdicts (from {where})\n\n" + render(rows)))
    return rows


def readme_table(df: pd.DataFrame) -> str:
    return f"{MARK_START}\n{render(df)}\n{MARK_END}"


def _markers(name: str) -> tuple[str, str]:
    return (f"<!-- {name}: rendered by `python -m lmdbio.lab.claims`; do not edit by hand -->",
            f"<!-- end of {name} -->")


def render_validation(results_root=COMMITTED_RESULTS) -> str:
    """The validation per setting and cache (cold, warm): variants within 25% median |error|, the
    worst variant's median |error| and the worst point, from ``model_validation/criterion.csv``."""
    d = Path(results_root) / "model_validation"
    if not (d / "criterion.csv").exists():
        return "(no model_validation/criterion.csv: run `lmdbio model validate`)"
    c = pd.read_csv(d / "criterion.csv")
    if "cache" not in c.columns:
        c = c.assign(cache="all")
    lines = ["| setting | cache | independent | variants with median \\|error\\| <= 25% | worst variant | "
             "its median \\|error\\| | worst point (every variant) | predicted to dominate there | "
             "disk bandwidth the local points were predicted with |",
             "|---|---|---|---|---|---|---|---|---|"]
    if "disk_bw" not in c.columns:
        c = c.assign(disk_bw="")
    for r in c.itertuples():
        lines.append("| " + " | ".join(_cell(x) for x in (
            r.setting, r.cache, "yes" if r.independent else "no (shares the storage model)",
            f"{r.variants_meeting} of {r.variants}", r.worst_variant,
            f"{100 * r.worst_median_abs_error:.0f}%", r.worst_point, r.predicted_dominant,
            _disk_words(r))) + " |")
    return "\n".join(lines)


def _disk_words(r) -> str:
    """The validation table's disk cell: the bandwidth used and, where a probe set it, the
    variants that meet the criterion with calibration's disk instead."""
    words = "" if r.disk_bw != r.disk_bw else str(r.disk_bw)
    n = getattr(r, "variants_meeting_calibrated_disk", float("nan"))
    if words and n == n:
        words += f"; with calibration's disk_bw {int(n)} of {r.variants} meet"
    return words


def outside_band(value: str, below: bool) -> str:
    """Why a model value (every estimate at its central value) can lie outside its own band."""
    return (f"the central estimates give {value}, {'below' if below else 'above'} the band (the "
            "middle 90% of the joint samples): a ratio that is not linear in its estimates need not "
            "fall inside it at their central values")


def render_split(results_root=COMMITTED_RESULTS) -> str:
    """The split by optimization against the papers' factors, from ``claims_split.csv``."""
    f = Path(results_root) / "claims_split.csv"
    if not f.exists():
        return "(no claims_split.csv: run `python -m lmdbio.lab.claims`)"
    d = pd.read_csv(f)
    lines = ["| workload | ratio | P | model | band, 5-95% of the joint samples | paper | band vs paper | "
             "estimates it follows most | slower variant dominated by |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in d.itertuples():
        lines.append("| " + " | ".join(_cell(x) for x in (
            r.workload, r.ratio, f"{r.nprocs:,}", _num(r.model_factor),
            f"{_num(r.band_low)}-{_num(r.band_high)}",
            f"{r.paper_factor:g}x ({r.paper})" if r.paper_factor == r.paper_factor else f"none stated ({r.paper})",
            r.band_magnitude,
            r.decides if isinstance(r.decides, str) else "", r.slow_dominated_by)) + " |")
    out = [f"{r.workload} {r.ratio}: {outside_band(_num(r.model_factor), r.model_factor < r.band_low)}"
           for r in d.itertuples() if not r.band_low <= r.model_factor <= r.band_high]
    if out:
        lines += ["", "Outside its band: " + "; ".join(dict.fromkeys(out)) + "."]
    return "\n".join(lines)


def render_claims_summary(df: pd.DataFrame) -> str:
    """docs/claims.md's summary table: the paper's words and each setting's verdict, from claims.csv."""
    heads = {"local": "local disk", "gpfs": "emulated GPFS", "throttled": "throttled device",
             "shared": "shared target", "model": "papers' scale (model)"}
    lines = ["| claim | the paper says | " + " | ".join(heads.get(s, s) for s in SETTINGS) + " |",
             "|---" * (2 + len(SETTINGS)) + "|"]
    for cid, g in df.groupby("claim", sort=False):
        c = _BY_ID.get(cid)
        cells = []
        for s in SETTINGS:
            x = g[g["setting"] == s]
            if x.empty:
                cells.append("-")
            elif len(x) == 1:
                cells.append(f"{x['verdict'].iloc[0]} ({x['measured'].iloc[0]})")
            else:   # the model: one row per workload
                cells.append("; ".join(f"{r.dataset}: {r.verdict} ({r.measured})" for r in x.itertuples()))
        statement = f"{c.statement} ({c.paper})" if c else CHECKS.get(cid, cid)
        lines.append("| " + " | ".join(_cell(x) for x in (cid, statement, *cells)) + " |")
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
    """``{marker name: rendered text}`` of every block figures/README.md and docs/claims.md hold."""
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

#: (paper, the paper's words, its factor, slower variant, faster variant, the workloads it is
#: stated for: None where the paper names none)
SPLIT = (
    ("HPCC 2017", "LMDBIO-LMM nearly 20x faster than LMDB in some cases", 20.0, "lmdb", "lmdbio-lmm", None),
    ("ICPADS 2017", "LMDBIO-DM 2x faster than LMDBIO-LMM", 2.0, "lmdbio-lmm", "lmdbio-lmm-dm", None),
    ("ICPADS 2017", "LMDBIO-DM more than 30x faster than LMDB", 30.0, "lmdb", "lmdbio-lmm-dm", None),
    ("TOPC 2019", "DIO over LMM: no factor of its own stated", None, "lmdbio-lmm", "lmdbio-lmm-dio", None),
    ("TOPC 2019", "up to 65x overall on 9,216 cores", 65.0, "lmdb", FULL, None),
    # The poster's figure is CIFAR10-Large-AlexNet only: no ImageNet row is set against it.
    ("Poster 2018", "77x, CIFAR10-Large-AlexNet, 512 iterations", 77.0, "lmdb", FULL, (CIFAR,)),
)
#: The papers' process count for the split (the poster's and TOPC's largest; HPCC/ICPADS state none).
SPLIT_NPROCS = 9216


SPLIT_COLUMNS = ["workload", "nprocs", "ratio", "paper", "paper_claim", "paper_factor", "model_factor",
                 "band_low", "band_high", "samples", "magnitude", "band_magnitude", "decides", "slow_dominated_by",
                 "fast_dominated_by"]


def split_table(results_root=COMMITTED_RESULTS, nprocs: int = SPLIT_NPROCS, *,
                fallback: bool = True) -> pd.DataFrame:
    """One row per ratio and workload: the model's factor and band next to the paper's, and why.

    The ratio is of I/O time (setup and the iterations' read phases), as the
    claims' model setting takes it. ``magnitude`` is the central value's
    (:func:`magnitude`), ``band_magnitude`` the band's (:func:`band_word`:
    consistent, uninformative, smaller, larger); the band is 5-95% of the
    joint samples; ``decides`` names the estimates the samples' ratio
    follows most; ``slow_dominated_by``/``fast_dominated_by`` the mechanism
    of each variant at that P. DIO/LMM has no factor of its own in the
    papers (``paper_factor`` NaN); the full stack is set against both
    TOPC's 65x and, for CIFAR10-Large only (the poster's workload), the poster's 77x.
    """
    d, _ = resolve(results_root, "", "model", fallback)
    rows = []
    for w in (CIFAR, IMAGENET):
        fr = _model_frames(d, w)
        if fr is None:
            continue
        p, s = fr
        if p.empty:
            continue
        # The papers' process count, or the largest predicted (a tiny run stops far below it).
        at = nprocs if nprocs in set(p["nprocs"]) else int(p["nprocs"].max())
        mech = p[p["nprocs"] == at].set_index("variant")
        for paper, words, factor, slow, fast, stated_for in SPLIT:
            if stated_for is not None and w not in stated_for:
                continue
            def value(df, index="nprocs", slow=slow, fast=fast):
                t = df.pivot_table(index=index, columns="variant", values="io_s")
                return t[slow] / t[fast] if slow in t and fast in t else pd.Series(dtype=float)
            b = _band(p, s, value)
            if at not in b.index:
                continue
            r = b.loc[at]
            rows.append({"workload": w, "nprocs": at,
                         "ratio": f"{SHORT[fast]}/{SHORT[slow]}", "paper": paper, "paper_claim": words,
                         "paper_factor": factor if factor else np.nan, "model_factor": float(r["value"]),
                         "band_low": float(r["lo"]), "band_high": float(r["hi"]),
                         "samples": int(r["samples"]),
                         "magnitude": magnitude(float(r["value"]), factor),
                         "band_magnitude": band_word(float(r["lo"]), float(r["hi"]), factor),
                         "decides": _deciders(r["frames"]),
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
    p = argparse.ArgumentParser(prog="python -m lmdbio.lab.claims",
                                description="Judge the papers' claims C1-C8 from the results files.")
    p.add_argument("--results", default=str(COMMITTED_RESULTS), help="results root (default: data/results)")
    p.add_argument("--readme", default=str(README),
                   help="README whose claims table to rewrite (the default also rewrites docs/claims.md)")
    p.add_argument("--no-readme", action="store_true", help="only write claims.csv and claims_split.csv")
    p.add_argument("--compare", nargs=2, metavar=("FIRST", "SECOND"),
                   help="only compare two claims.csv files (two runs) and print the verdicts that differ")
    p.add_argument("--out", help="with --compare: also write the comparison to this CSV")
    p.add_argument("--shared-only", action="store_true",
                   help="only rewrite every NN_name/shared/ from the bench-shared sweep (RESULTS/shared/)")
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
    shared = shared_results(args.results)
    if args.shared_only:
        print(f"{len(shared)} shared folders written from {Path(args.results) / 'shared'}")
        return 0
    df = write(args.results)
    split = write_split(args.results)
    if not args.no_readme:
        update_readme(df, args.readme, args.results)
        if Path(args.readme).resolve() == README.resolve():
            update_readme(df, CLAIMS_DOC, args.results, require=("claims summary",))
    for r in df.itertuples():
        where = f"{r.setting}:{r.dataset}" if r.setting == "model" else r.setting
        print(f"{r.claim:14s} {where:15s} {r.verdict:12s} {r.magnitude:10s} {r.measured}")
    for r in split.itertuples():
        print(f"{r.workload:22s} {r.ratio:16s} model {r.model_factor:9.3g} ({r.band_low:.3g}-{r.band_high:.3g})"
              f"  paper {r.paper_factor:g} ({r.paper}): {r.magnitude}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
