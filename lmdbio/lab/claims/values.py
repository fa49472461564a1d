"""Measured values: the results files' points and the ratios between two variants, with their repeats."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .verdicts import QCOLS, REPEATS_DIR, SHORT

__all__ = ["cold_summary", "read_repeats", "dominant_measured", "measured_throughput",
           "timeline_throughput", "timeline_ratio"]


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    if "status" in df.columns:
        df = df[df["status"].fillna("ok") == "ok"]
    return df


def cold_summary(d: Path) -> pd.DataFrame | None:
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


def dominant_measured(df: pd.DataFrame) -> str:
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
    out["context"] = [f"{SHORT.get(fast, fast)}: {dominant_measured(df[(df.variant == fast) & (df.nprocs == p)])}; "
                      f"{SHORT.get(slow, slow)}: {dominant_measured(df[(df.variant == slow) & (df.nprocs == p)])}"
                      for p in out["nprocs"]]
    return out


def measured_throughput(df: pd.DataFrame | None, slow: str, fast: str, col: str,
                         dataset: str | None) -> pd.DataFrame | None:
    if df is None:
        return None
    if dataset is not None and "dataset_name" in df.columns:
        df = df[df["dataset_name"] == dataset]
    return _ratio_frame(df, slow, fast, col)


def timeline_throughput(d: Path) -> pd.DataFrame | None:
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


def timeline_ratio(base: pd.DataFrame, fast: pd.DataFrame, slow_name: str, fast_name: str) -> pd.DataFrame:
    """fast/base per P: the ratio of the median records_per_s; lo and hi the smallest and largest
    ratio of one repeat's pair (repeat r of one against repeat r of the other, run interleaved)."""
    r = _paired_ratio(base, fast, "records_per_s")
    if r.empty:
        return r
    r["context"] = [f"{SHORT.get(fast_name, fast_name)}: {fast[fast.nprocs == p]['dominant'].iloc[0]}; "
                    f"{SHORT.get(slow_name, slow_name)}: {base[base.nprocs == p]['dominant'].iloc[0]}"
                    for p in r["nprocs"]]
    return r
