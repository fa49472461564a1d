"""First-order Sobol indices of the model's ratios, from the joint samples themselves.

A given-data estimator (no extra model runs): for each estimate ``X`` and a
quantity ``Y`` (the log of a ratio of I/O times over the joint samples),
``S = Var(E[Y | X]) / Var(Y)``, with ``E[Y | X]`` the mean of ``Y`` within
each of ``bins`` quantile bins of ``X`` (a switch: its two ends). ``S`` is the
share of ``Y``'s variance that ``X`` alone explains; the bins' own sampling
noise adds about ``(bins - 1) / n`` to each, which is subtracted. Only the
estimates that apply to the quantity's workload are ranked (another
workload's are NaN in ``joint.csv``).
"""

from __future__ import annotations

import math

import numpy as np

from .estimates import PREFIX

__all__ = ["first_order", "sobol_table", "RATIOS"]

#: The ratios ranked: (name, slower variant, faster variant), I/O time of each.
RATIOS = (("lmdb / lmm", "lmdb", "lmdbio-lmm"), ("lmm / dm", "lmdbio-lmm", "lmdbio-lmm-dm"),
          ("lmdb / full stack", "lmdb", "lmdbio-lmm-dio-prov-coal-stag"))


def first_order(x: np.ndarray, y: np.ndarray, bins: int) -> float:
    """``Var(E[y | x]) / Var(y)`` over quantile bins of ``x`` less the bins' noise; NaN when ``y``
    does not vary or ``x`` is not finite throughout."""
    n = len(y)
    if n < 4 or not np.isfinite(x).all() or np.ptp(y) == 0:
        return float("nan")
    levels = np.unique(x)
    if len(levels) <= bins:
        groups = [y[x == v] for v in levels]
    else:
        edges = np.quantile(x, np.linspace(0, 1, bins + 1))
        idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
        groups = [y[idx == b] for b in range(bins) if (idx == b).any()]
    mean = y.mean()
    between = sum(len(g) * (g.mean() - mean) ** 2 for g in groups) / n
    return max(0.0, between / y.var() - (len(groups) - 1) / n)


def sobol_table(joint, nprocs: int | None = None, ratios=RATIOS):
    """One row per workload x ratio x estimate at ``nprocs`` (default the largest P): ``s1`` and the
    ratio's sample count, strongest first within each ratio. ``joint``: rows of joint.csv."""
    import pandas as pd

    from .uncertainty import io_s

    d = pd.DataFrame(joint)
    if "co_central" in d.columns:
        d = d[d["co_central"].fillna("") == ""]         # the random samples only
    nprocs = int(nprocs or d["nprocs"].max())
    d = d[d["nprocs"] == nprocs].assign(io_s=lambda f: io_s(f))
    if "batch" in d.columns:
        d = d[d["batch"] == d["batch"].mode().iloc[0]] if len(d) else d
    rows = []
    for w, g in d.groupby("workload"):
        t = g.pivot_table(index="sample", columns="variant", values="io_s")
        xs = g.drop_duplicates("sample").set_index("sample")
        xcols = [c for c in xs.columns if c.startswith(PREFIX) and xs[c].notna().all()]
        bins = max(2, int(math.sqrt(len(t))))
        for name, slow, fast in ratios:
            if slow not in t or fast not in t:
                continue
            y = np.log((t[slow] / t[fast]).to_numpy(float))
            out = [{"workload": w, "nprocs": nprocs, "ratio": name, "estimate": c[len(PREFIX):],
                    "s1": first_order(xs.loc[t.index, c].to_numpy(float), y, bins), "samples": len(y)}
                   for c in xcols]
            rows += sorted(out, key=lambda r: -(r["s1"] if r["s1"] == r["s1"] else -1))
    return pd.DataFrame(rows)
