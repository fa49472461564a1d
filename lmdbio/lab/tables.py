"""Results shaped for figures and reports: per-iteration means, request counts, speedup tables.

Every function takes tidy results (``points.csv`` / ``summary.csv`` rows of
``lmdbio bench``) and returns a tidy DataFrame; nothing here draws or
measures. :mod:`lmdbio.lab.plots` draws these tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from lmdbio.options import EXTRA_VARIANTS, VARIANTS

__all__ = ["ok_rows", "per_iteration", "MMAP_VARIANTS", "requests_per_iteration", "speedup_table",
           "label"]

#: Variants whose data arrives through LMDB's mmap (page faults); the others issue preads.
MMAP_VARIANTS = ("lmdb", "lmdbio-lmm", "lmdbio-lmm-dm")


def label(variant: str) -> str:
    """Paper spelling of a variant (``lmdbio-lmm-dio`` -> ``LMDBIO-LMM-DIO``; ``raw`` -> pread limit)."""
    return "pread limit (raw)" if variant == "raw" else variant.upper()


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of points that ran (``status == "ok"``); all rows of a table without a status."""
    return df[df["status"] == "ok"] if "status" in df else df


def per_iteration(points: pd.DataFrame, level: str, phases: Sequence[str], columns: Sequence[str],
                  by: Sequence[str] = ("variant", "nprocs")) -> pd.DataFrame:
    """Per-iteration sums of ``columns`` over ``phases``, per ``by`` group.

    Each rank's sum over the phases is divided by its iterations; then
    ``<col>`` is the mean over ranks and ``<col>_sum`` the sum over ranks,
    each averaged over repeats.
    """
    d = ok_rows(points)
    d = d[(d["level"] == level) & d["phase"].isin(phases)]
    keys = [*by, "repeat", "rank"]
    per_rank = d.groupby(keys, as_index=False).agg({**{c: "sum" for c in columns}, "iters": "first"})
    for c in columns:
        per_rank[c] = per_rank[c] / per_rank["iters"]
    mean = per_rank.groupby([*by, "repeat"], as_index=False)[list(columns)].mean()
    total = per_rank.groupby([*by, "repeat"], as_index=False)[list(columns)].sum()
    out = mean.merge(total, on=[*by, "repeat"], suffixes=("", "_sum"))
    return out.groupby(list(by), as_index=False).mean(numeric_only=True).drop(columns="repeat")


def requests_per_iteration(points: pd.DataFrame) -> pd.DataFrame:
    """Read requests per iteration: page faults (minor + major) for mmap variants, pread calls else.

    Counted in the reader's locate and read phases. Columns: variant, nprocs,
    requests (mean over ranks), requests_sum (all ranks), bytes, bytes_per_request.
    """
    d = points.assign(faults=points["minflt"].fillna(0) + points["majflt"].fillna(0))
    m = per_iteration(d, "reader", ["locate", "read"], ["faults", "calls", "bytes"])
    mmap = m["variant"].isin(MMAP_VARIANTS)
    m["requests"] = np.where(mmap, m["faults"], m["calls"])
    m["requests_sum"] = np.where(mmap, m["faults_sum"], m["calls_sum"])
    m["bytes_per_request"] = m["bytes_sum"] / pd.Series(m["requests_sum"]).replace(0, np.nan)
    return m


def speedup_table(summary: pd.DataFrame, metric: str = "records_per_s") -> pd.DataFrame:
    """Speedup of each variant over LMDB per process count: the one bench definition.

    :func:`lmdbio.lab.bench.ratio_of_medians`: the variant's median ``metric``
    over repeats / LMDB's, at the same point (dataset, cache, P, ...). A time
    metric (``wall_s``) divides the other way round. Columns are ``P=n``,
    preceded by dataset, cache or storage where the summary holds several.
    """
    from .bench.stats import ratio_of_medians

    d = ok_rows(summary).copy()
    if "lmdb" not in set(d["variant"]):
        raise ValueError("speedup_table needs the 'lmdb' variant in the summary")
    if metric not in d and metric == "records_per_s":
        metric = "wall_s"
    time_metric = metric.endswith("_s") and not metric.endswith("per_s")
    d["speedup"] = ratio_of_medians(d, "lmdb", metric, invert=time_metric).to_numpy()
    cols = [k for k in ("dataset_name", "cache", "storage") if k in d and d[k].nunique() > 1]
    sp = d.groupby(["variant", *cols, "nprocs"])["speedup"].first().unstack([*cols, "nprocs"])
    sp = sp.reindex([v for v in dict.fromkeys((*VARIANTS, *EXTRA_VARIANTS, "raw")) if v in sp.index])
    sp.index = [label(v) for v in sp.index]
    if cols:
        sp.columns = pd.MultiIndex.from_tuples([(*c[:-1], f"P={c[-1]}") for c in sp.columns],
                                               names=[*cols, "P"])
    else:
        sp.columns = [f"P={c}" for c in sp.columns]
    return sp.round(2)
