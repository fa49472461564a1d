"""Joint uncertainty: every estimate moved together, by a seeded Latin hypercube over their ranges.

Each estimate of a platform (its ``[ranges]``, its workloads' ``[workload.ranges]``
and its storage profile's ``[NAME.ranges]`` in ``lmdbio/lab/pfs/profiles.toml``)
is one dimension, drawn as :mod:`lmdbio.lab.model.estimates` says.
:func:`joint` runs the model at every sample (``joint.csv``); a quantity's
band is the 5-95% range of its samples (:func:`band`), and a verdict is
yes/no only when every sample is on one side of the threshold
(``lmdbio.lab.claims``). :func:`deciders` ranks the estimates by how strongly
a quantity follows them (Spearman's rank correlation over the samples);
:func:`verdict_map` runs a grid of two of them with the others central.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .estimates import (BAND, PREFIX, Estimate, apply, draw, estimates,
                        latin_hypercube)
from .platform import Platform
from .predict import forked_map, predict, predict_point

__all__ = ["Estimate", "estimates", "apply", "latin_hypercube", "draw", "joint", "band", "applying",
           "deciders", "verdict_map", "verdict_maps", "io_s", "MAPS", "BAND", "PREFIX", "CO_CENTRAL",
           "co_centrals"]


def joint(platform: Platform, procs, variants=("all",), workloads=None, cal=None, *, n: int = 32,
          seed: int = 1, budget: int = 20000, batches=None, progress=None,
          jobs: int | None = None) -> list[dict]:
    """The model at ``n`` joint samples: one row per sample x workload x variant x P.

    Each row has ``sample``, the prediction's columns, and one ``x:NAME``
    column per estimate (a switch's: 0 at its low end, 1 at its high end; NaN for another
    workload's estimate). The co-centrals (:func:`co_centrals`) follow the ``n`` samples,
    named in ``co_central``. ``jobs`` processes (default: every core) run the samples; each
    sample is a pure function of its values, so the rows are the same for any ``jobs``.
    """
    est, samples = draw(platform, n, seed)
    points = [(i, values, None) for i, values in enumerate(samples)]
    points += [(n + j, values, label) for j, (label, values) in enumerate(co_centrals(est))]
    run = functools.partial(_sample_rows, platform, est, procs, variants, workloads, cal, budget,
                            batches)
    rows: list[dict] = []
    for k, part in enumerate(forked_map(run, points, jobs)):
        rows += part
        if progress and k < n:
            progress(k + 1, n)
    return rows


def _sample_rows(platform, est, procs, variants, workloads, cal, budget, batches, point):
    """The prediction's rows at one joint sample ``(index, values, co-central label)``."""
    i, values, label = point
    p = apply(platform, values)
    codes = {PREFIX + e.name: e.code(values[e.name]) for e in est}
    extra = {} if label is None else {"co_central": label}
    return [{"sample": i, **r, **applying(codes, r["workload"], platform), **extra}
            for r in predict(p, procs, variants, workloads, cal, budget, batches=batches)]


#: Switches whose two settings are both central: the setting measured here and the source's
#: reasoning differ (lmdbio's walk touches the values it steps over; Caffe's is taken to touch
#: leaf pages only). ``{estimate: {value: label}}``.
CO_CENTRAL = {"walk_touches_values": {False: "walk touches leaf pages", True: "walk touches values"}}


def co_centrals(est: list[Estimate]) -> list[tuple[str, dict]]:
    """``(label, {estimate: value})`` for each setting of each co-central switch, every other
    estimate at its central value: :func:`joint` adds them after the random samples (``sample``
    n, n + 1, ...; ``co_central`` names them), so a verdict that needs every sample on one side
    of its threshold needs both co-centrals there too."""
    central = {e.name: e.central for e in est}
    out = []
    for name, labels in CO_CENTRAL.items():
        if name in central:
            out += [(label, {**central, name: v}) for v, label in labels.items()]
    return out


def applying(codes: dict, workload: str, platform: Platform) -> dict:
    """``codes`` with another workload's estimates (``OTHER.key``) set to NaN: they cannot move
    this workload's prediction, so no ranking of its deciders may name them."""
    others = {w.name for w in platform.workloads} - {workload}
    return {k: (float("nan") if k[len(PREFIX):].partition(".")[0] in others else v)
            for k, v in codes.items()}


def band(values, q=BAND) -> tuple[float, float]:
    """The ``q`` quantiles (5% and 95%) of the finite ``values``; NaN when there are none."""
    v = np.asarray([x for x in values if x == x and math.isfinite(x)], float)
    if not len(v):
        return float("nan"), float("nan")
    return float(np.quantile(v, q[0])), float(np.quantile(v, q[1]))


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    # Ties share their mean rank (switches take two values).
    for v in np.unique(x):
        m = x == v
        r[m] = r[m].mean()
    return r


def deciders(frame, value_col: str, top: int = 3) -> list[tuple[str, float]]:
    """``[(estimate, Spearman rho), ...]``: the estimates the quantity follows most, strongest first.

    ``frame``: one row per sample with ``x:NAME`` columns and ``value_col``.
    """
    y = np.log(np.clip(frame[value_col].to_numpy(float), 1e-300, None))
    if len(y) < 3 or np.ptp(y) == 0:
        return []
    ry = _ranks(y)
    out = []
    for c in frame.columns:
        if not c.startswith(PREFIX):
            continue
        x = frame[c].to_numpy(float)
        if not np.isfinite(x).all() or np.ptp(x) == 0:
            continue        # an estimate of another workload (NaN), or one that did not move
        rho = float(np.corrcoef(_ranks(x), ry)[0, 1])
        if rho == rho:
            out.append((c[len(PREFIX):], rho))
    out.sort(key=lambda t: -abs(t[1]))
    return out[:top]


def verdict_map(platform: Platform, workload: str, slow: str, fast: str, nprocs: int,
                x: Estimate, y: Estimate, cal, *, points: int = 7, budget: int = 20000,
                fixed: dict | None = None, jobs: int | None = 1) -> list[dict]:
    """The ratio slow/fast of overall time (the quantity the poster and TOPC report) over a
    ``points`` x ``points`` grid of two estimates.

    Every other estimate stays central, except those in ``fixed`` (``{name:
    value}``); the grid runs each estimate over its range (log-spaced for a
    "log" estimate, the two ends for a switch). ``jobs``: processes (:func:`forked_map`).
    """
    def grid(e: Estimate):
        if e.kind == "switch":
            return [e.low, e.high]
        return [e.value(i / (points - 1)) if i < points - 1 else e.high for i in range(points)]

    def cell(xy):
        xv, yv = xy
        p = apply(platform, {**(fixed or {}), x.name: xv, y.name: yv})
        w = p.workload(workload)
        total = {v: predict_point(p, w, v, int(nprocs), cal, budget=budget)["total_s"]
                 for v in (slow, fast)}
        return {"workload": workload, "slow": slow, "fast": fast, "nprocs": int(nprocs),
                "x_estimate": x.name, "x": x.code(xv), "y_estimate": y.name,
                "y": y.code(yv), "ratio": total[slow] / total[fast]}

    return list(forked_map(cell, [(xv, yv) for xv in grid(x) for yv in grid(y)], jobs))


#: The verdict maps ``lmdbio model predict`` draws: (claim, workload, slower, faster variant,
#: threshold). The poster's 77x (C8, CIFAR10-Large) and TOPC's 65x (ImageNet): full stack over LMDB.
MAPS = (("C8", "cifar10-large-alexnet", "lmdb", "lmdbio-lmm-dio-prov-coal-stag", 10.0),
        ("C8-imagenet", "imagenet-caffenet", "lmdb", "lmdbio-lmm-dio-prov-coal-stag", 10.0))
#: The map's first axis: the seek cost between interleaved streams (the estimate found to carry
#: most of the papers'-scale I/O time).
MAP_X = "seek_s"


def io_s(frame):
    """I/O time of prediction rows: setup and every iteration's phases other than compute and
    the allreduce (the quantity every model claim compares)."""
    return frame["setup_s"] + frame["iterations"] * (frame["per_iteration_s"] - frame["compute_s"]
                                                     - frame["communicate_s"])


def verdict_maps(platform: Platform, joint_rows, cal, nprocs: int, *, maps=MAPS, points: int = 6,
                 budget: int = 20000, jobs: int | None = 1) -> list[dict]:
    """Every map of ``maps``, from the estimates the joint samples' ratio follows most
    (:func:`deciders`): x = the storage's ``seek_s``; z, when a switch is among the three
    strongest, one map at each of its ends; y = the estimate with a range of values the ratio
    follows most within each end of z (mean |rho|). ``claim`` and ``threshold`` on each row."""
    import pandas as pd

    d = pd.DataFrame(joint_rows)
    d = d[d["nprocs"] == nprocs]
    if "co_central" in d.columns:
        d = d[d["co_central"].fillna("") == ""]
    by_name = {e.name: e for e in estimates(platform)}
    xs = [n for n in by_name if n.endswith("." + MAP_X) or n == MAP_X]
    rows = []
    for claim, workload, slow, fast, threshold in maps:
        g = d[d["workload"] == workload]
        if g.empty or not xs:
            continue
        t = g.pivot_table(index="sample", columns="variant", values="total_s")
        if slow not in t or fast not in t:
            continue
        f = g.drop_duplicates("sample").set_index("sample")[[c for c in g.columns if c.startswith(PREFIX)]]
        f = f.assign(ratio=t[slow] / t[fast])
        ranked = [n for n, _ in deciders(f, "ratio", top=len(by_name)) if n not in xs]
        zs = [n for n in ranked[:3] if by_name[n].kind == "switch"]
        z = by_name[zs[0]] if zs else None
        # y: the estimate with a range of values the ratio follows most at each end of the switch
        # (a switch that decides hides the others' effect when they are ranked over all samples).
        groups = [sub for _, sub in f.groupby(PREFIX + z.name)] if z else [f]
        score: dict = {}
        for sub in groups:
            for n, rho in deciders(sub, "ratio", top=len(by_name)):
                score[n] = score.get(n, 0.0) + abs(rho) / len(groups)
        ys = sorted((n for n in score if n not in xs and by_name[n].kind != "switch"),
                    key=lambda n: -score[n])
        if not ys:
            continue
        for zv in ([z.low, z.high] if z else [None]):
            fixed = {z.name: zv} if z else {}
            for r in verdict_map(platform, workload, slow, fast, nprocs, by_name[xs[0]],
                                 by_name[ys[0]], cal, points=points, budget=budget, fixed=fixed,
                                 jobs=jobs):
                rows.append({"claim": claim, "threshold": threshold, **r,
                             "z_estimate": z.name if z else "", "z": z.code(zv) if z else float("nan")})
    return rows
