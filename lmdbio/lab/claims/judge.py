"""Judging: each claim's value at the largest P in every setting, its verdicts and why."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pandas as pd

from ..scales import COMMITTED_RESULTS
from .bands import DATASET_OF, default_batch
from .registry import BY_ID, CLAIMS, SHARED_NOT_MEASURED, Claim, resolve
from .shared import repo_relative, shared_note
from .verdicts import (
    COLUMNS,
    DETAILS,
    MODEL_DIR,
    NO_FACTOR,
    NOT_JUDGED,
    NOT_MEASURED,
    SETTINGS,
    SHORT,
    band_verdict,
    band_word,
    direction,
    fmt,
    magnitude,
    outside_band,
)

__all__ = ["series", "axis_rows", "evaluate", "write", "write_csv"]


def _quantity(c: Claim, results_root, s: str, fallback: bool):
    d, source = resolve(results_root, c.notebook, s, fallback)
    root = results_root if source == "here" else COMMITTED_RESULTS
    df = c.quantity(s, d, root)
    return d, source, df


def series(claim: Claim | str, results_root=COMMITTED_RESULTS, *, fallback: bool = True) -> dict:
    """``{setting: DataFrame(nprocs, value, lo, hi, ...)}`` of a claim's quantity (settings with data)."""
    claim = BY_ID[claim] if isinstance(claim, str) else claim
    out = {}
    for s in SETTINGS:
        _, _, df = _quantity(claim, results_root, s, fallback)
        if df is not None and len(df):
            out[s] = df.sort_values("nprocs").reset_index(drop=True)
    return out


def _committed_commit() -> str:
    from lmdbio.lab.meta import git_commit
    try:
        return str(git_commit())[:12]
    except Exception:  # a label only
        return "unknown"


def _judge(c: Claim, s: str, last) -> dict:
    """verdict, measured, why, magnitude and band of one setting's point."""
    v, lo, hi, thr = float(last["value"]), float(last["lo"]), float(last["hi"]), c.threshold
    f = lambda x: fmt(x, thr)
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
            co = str(last.get("co", "") or "")
            if co:
                sides = {float(x.rsplit(" ", 1)[1].replace(",", "")) >= thr for x in co.split("; ")}
                reason += (f"; co-centrals {co}: " + ("the two settings differ at {thr:g}, so the verdict "
                                                      "is neither yes nor no" if len(sides) > 1
                                                      else "both on one side").format(thr=thr))
        repeats = 0
    else:
        n = int(last.get("repeats", 0) or 0)
        verdict = direction(lo, hi, thr)
        one = n <= 1
        measured = f"{f(v)} at P={p}" + ("" if one or lo == hi else f" (repeats {f(lo)}-{f(hi)})")
        if one:
            # One repeat gives no spread to judge a direction by (a tiny run): say so, not yes/no.
            verdict = "inconclusive" if verdict in ("yes", "no") else verdict
            reason = f"{f(v)} {'>=' if v >= thr else '<'} {thr:g}, inconclusive (1 repeat)"
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


def axis_rows(results_root=COMMITTED_RESULTS, *, fallback: bool = True) -> list[dict]:
    """The poster-axis check of the model (``model_prediction/absolute.csv``): one row per batch
    reading, ``yes`` when every CIFAR10-Large series lies within 10-100,000 s at every P, else ``no``
    with FAILED and the series that leave the axis, where and by what mechanism."""
    from ..model.absolute import POSTER_AXIS_S, axis_check

    d, source = resolve(results_root, "", "model", fallback)
    f = d / "absolute.csv"
    base = {"setting": "model", "criterion": "every series within 10-100,000 s at every P of the poster's axis",
            "paper": "Poster 2018", "paper_factor": np.nan, "dataset": "cifar10", "notebook": "11_scale_model",
            "quantity": "predicted total time of 512 iterations, every variant, P = 1 .. 9,216",
            "threshold": POSTER_AXIS_S[1], "source": repo_relative(d), "magnitude": NO_FACTOR, "band_low": np.nan,
            "band_high": np.nan, "repeats": 0, "decides": ""}
    if not f.exists():
        return [{**base, "claim": "A1", "measured": "no data", "verdict": "no data", "magnitude": "no data",
                 "nprocs": np.nan, "value": np.nan,
                 "why": f"no {repo_relative(f)} (run `lmdbio model absolute`)"}]
    t = pd.read_csv(f)
    if "batch" not in t.columns:
        t = t.assign(batch="global")
    axis = axis_check(t)
    default = default_batch(d, "cifar10-large-alexnet") or "global"
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
                   f"P={int(top['max_nprocs']):,} ({top['max_mechanism']})")
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
                     "nprocs": int(top["max_nprocs"]), "value": hi, "why": why})
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
                    "source": repo_relative(d)}
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
                why = f"no results in {repo_relative(d)} (run {run})"
                if s not in ("model", "shared") and df is not None and c.dataset:
                    why = (f"{repo_relative(d)} holds no {c.dataset} points ({c.notebook} does not measure "
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
                    dataset, note = shared_note(d, j["nprocs"], c.dataset)
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
    write_csv(df, Path(out) if out else Path(results_root) / "claims.csv")
    return df


def write_csv(df: pd.DataFrame, out: Path) -> None:
    """Write ``out`` whole or not at all: notebooks replotting side by side rewrite the same files."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, out)
