"""The criterion over every setting the prediction's code path uses, and each point's distance from it.

One table (``model_validation/criterion_all.csv``) holds a row per (source,
setting, sweep, cache, variant) cell: ``calibrated`` cells are the validation
sweeps the model was built while looking at (``lmdbio model validate``,
``summary.csv``), the emulated and time-dilated GPFS included although they
share the storage model (``independent`` False); ``held-out`` cells are the
sweeps predicted before they were measured (``model_heldout/comparison.csv``).
A cell meets the criterion when its points' median |relative error| is at
most :data:`CRITERION`. ``criterion_counts.csv``
counts the cells within it with and without the GPFS settings and with and
without the held-out sweeps; :func:`render` writes those counts and where
the model fails as the ``model criterion`` block of ``docs/model.md``
(``python -m lmdbio.lab.claims``).

:func:`points` gives every point's distance from the calibration: P over the
largest calibrated P of its setting, ranks per node, and the measured mean
bytes per storage request where the storage counted its requests (the
emulated GPFS, the throttled device, the shared target; the local disk and
the held-out sweeps have no counters).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..paths import REPO

if TYPE_CHECKING:   # validate imports the constants below where pandas may be missing
    import pandas as pd

#: Settings whose measurements the storage model did not produce.
INDEPENDENT = ("local disk", "throttled block device", "shared storage target")
#: Median |relative error| per variant and setting.
CRITERION = 0.25

__all__ = ["CALIBRATED", "HELD_OUT", "CELL", "points", "criterion_all", "counts", "heldout_comparison",
           "write", "render", "main"]

CALIBRATED = "calibrated"
HELD_OUT = "held-out"
#: The columns that name one cell of the criterion.
CELL = ["source", "setting", "sweep", "cache", "variant"]


def _ranks_per_node(summary: pd.DataFrame) -> pd.Series:
    """Each validation point's ranks per node as its bench ran it (0: every rank on one node).

    A summary written before ``validate`` kept the column takes it from the point's own
    ``summary.csv`` (``source``), which must hold one value.
    """
    import pandas as pd

    if "ranks_per_node" in summary.columns:
        return summary["ranks_per_node"].fillna(0).astype(int)
    per_source = {}
    for src in summary["source"].unique():
        path = Path(src) if Path(src).is_absolute() else REPO / src
        if not path.exists():
            raise FileNotFoundError(f"{path}: the sweep a validation point came from is missing; "
                                    "rerun `lmdbio model validate` so summary.csv carries ranks_per_node")
        vals = pd.read_csv(path)["ranks_per_node"].fillna(0).astype(int).unique()
        if len(vals) != 1:
            raise ValueError(f"{path}: several ranks_per_node values ({sorted(vals)}); rerun "
                             "`lmdbio model validate` so summary.csv carries ranks_per_node per point")
        per_source[src] = int(vals[0])
    return summary["source"].map(per_source)


def points(summary: pd.DataFrame, comparison: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every validation and held-out point: its cell, signed error and distance from the calibration.

    ``summary``: ``model_validation/summary.csv`` (``validate``); ``comparison``:
    ``model_heldout/comparison.csv`` (``heldout check``) or None.
    """
    import numpy as np
    import pandas as pd

    cal = summary.assign(source=CALIBRATED, sweep="validation", rpn=_ranks_per_node(summary))
    none = pd.Series(np.nan, index=cal.index)
    req = cal.get("measured_storage_requests", none)
    cal["bytes_per_request"] = (cal.get("measured_storage_bytes", none) / req).where(req > 0)
    parts = [cal]
    if comparison is not None and len(comparison):
        parts.append(comparison.assign(source=HELD_OUT, cache="cold", rpn=comparison["ranks_per_node"],
                                       bytes_per_request=np.nan))
    cols = CELL + ["nprocs", "rpn", "rel_error", "bytes_per_request"]
    d = pd.concat([p[cols] for p in parts], ignore_index=True)
    d["ranks_per_node"] = np.where(d["rpn"] > 0, np.minimum(d["nprocs"], d["rpn"]), d["nprocs"]).astype(int)
    top = d[d["source"] == CALIBRATED].groupby("setting")["nprocs"].max()
    d["p_relative"] = d["nprocs"] / d["setting"].map(top)
    d["independent"] = d["setting"].isin(INDEPENDENT)
    return d.drop(columns="rpn")


def criterion_all(pts: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: its points, median |error|, median signed error, whether it meets the
    criterion, whether its setting is independent of the storage model, and its largest P and
    ranks per node."""
    g = pts.assign(abs_error=pts["rel_error"].abs()).groupby(CELL, sort=False)
    t = g.agg(points=("abs_error", "size"), median_abs_error=("abs_error", "median"),
              median_signed_error=("rel_error", "median"), independent=("independent", "first"),
              max_nprocs=("nprocs", "max"), max_ranks_per_node=("ranks_per_node", "max")).reset_index()
    t.insert(len(CELL) + 3, "meets_criterion", t["median_abs_error"] <= CRITERION)
    return t


def counts(table: pd.DataFrame) -> pd.DataFrame:
    """Cells within the criterion, with and without the GPFS settings (not independent) and with
    and without the held-out sweeps: four rows."""
    import pandas as pd

    rows = []
    for heldout in (False, True):
        for gpfs in (False, True):
            t = table[(table["source"] == CALIBRATED) | heldout]
            t = t[t["independent"] | gpfs]
            rows.append({"gpfs_settings": gpfs, "held_out_sweeps": heldout, "cells": len(t),
                         "within": int(t["meets_criterion"].sum()),
                         "text": f"{int(t['meets_criterion'].sum())} of {len(t)}"})
    return pd.DataFrame(rows)


def heldout_comparison(results_root) -> Path | None:
    """``model_heldout/comparison.csv`` of ``results_root``, else the repository's committed one
    (a run into a scratch folder measures no held-out sweep); None when neither exists."""
    committed = REPO / "data" / "results" / "model_heldout" / "comparison.csv"
    for f in (Path(results_root) / "model_heldout" / "comparison.csv", committed):
        if f.exists():
            return f
    return None


def write(summary: pd.DataFrame, out_dir, comparison=None) -> Path:
    """``criterion_all.csv`` and ``criterion_counts.csv`` in ``out_dir`` (``model_validation/``);
    ``comparison``: a held-out ``comparison.csv`` path (None: :func:`heldout_comparison` of the
    results root above ``out_dir``)."""
    import pandas as pd

    out = Path(out_dir)
    comparison = comparison if comparison is not None else heldout_comparison(out.parent)
    cmp = pd.read_csv(comparison) if comparison is not None and Path(comparison).exists() else None
    table = criterion_all(points(summary, cmp))
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "criterion_all.csv", index=False)
    counts(table).to_csv(out / "criterion_counts.csv", index=False)
    return out / "criterion_all.csv"


def _short(variant: str) -> str:
    from ..tables import label

    return label(variant).replace("LMDBIO-", "")


def _factor(signed: float) -> str:
    """A median signed error as predicted over measured time: ``3.56x`` or ``0.55x``."""
    return f"{1 + signed:.3g}x"


def _span(part: pd.DataFrame) -> str:
    """The factors of a group of cells, sorted by signed error: one, or the lowest to the highest."""
    ends = [part.iloc[0]] if len(part) == 1 else [part.iloc[0], part.iloc[-1]]
    return " to ".join(f"{_factor(r.median_signed_error)} ({_short(r.variant)})" for r in ends)


def _failures(table: pd.DataFrame) -> list[str]:
    """One line per (source, setting, sweep, cache) with cells outside the criterion: those whose
    median signed error is itself outside it (over- or underpredicted, as a factor) and those
    whose points scatter both ways (median |error| outside, median signed error inside)."""
    lines = []
    for (src, st, sw, cache), g in table.groupby(CELL[:4], sort=False):
        bad = g[~g["meets_criterion"]].sort_values("median_signed_error")
        if bad.empty:
            continue
        s = bad["median_signed_error"]
        ways = [f"{len(p)} {word}, predicted {_span(p)} the measured time"
                for p, word in ((bad[s > CRITERION], "overpredicted"), (bad[s < -CRITERION], "underpredicted"))
                if len(p)]
        mixed = bad[s.abs() <= CRITERION]
        if len(mixed):
            ways.append(f"{len(mixed)} with errors of both signs (median |error| "
                        + ", ".join(f"{r.median_abs_error:.0%} {_short(r.variant)}" for r in mixed.itertuples())
                        + ")")
        where = f"{st}, {cache}" if src == CALIBRATED else f"{sw} ({st})"
        lines.append(f"- {src} {where}: {len(bad)} of {len(g)} variants outside {CRITERION:.0%}; "
                     + "; ".join(ways) + ".")
    return lines


def render(results_root=None) -> str:
    """The ``model criterion`` block of docs/model.md, from ``model_validation/criterion_all.csv``."""
    import pandas as pd

    root = Path(results_root) if results_root is not None else REPO / "data" / "results"
    f = root / "model_validation" / "criterion_all.csv"
    if not f.exists():
        return "(no model_validation/criterion_all.csv: run `python -m lmdbio.lab.model.criterion`)"
    table = pd.read_csv(f)
    c = counts(table).set_index(["held_out_sweeps", "gpfs_settings"])["text"]
    lines = [f"| cells within {CRITERION:.0%} (median \\|error\\| per variant) | without the GPFS settings "
             "| with the GPFS settings |", "|---|---|---|",
             f"| calibrated settings only | {c[False, False]} | {c[False, True]} |",
             f"| with the held-out sweeps | {c[True, False]} | {c[True, True]} |", "",
             "Where the model fails (predicted over measured time, the median of each cell's points):", ""]
    return "\n".join(lines + _failures(table))


def main(argv=None) -> int:
    """Rewrite criterion_all.csv and criterion_counts.csv from the committed results."""
    import pandas as pd

    ap = argparse.ArgumentParser(prog="python -m lmdbio.lab.model.criterion", description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=str(REPO / "data" / "results"),
                    help="results root holding model_validation/ and model_heldout/ (default %(default)s)")
    a = ap.parse_args(argv)
    val = Path(a.results) / "model_validation"
    if not (val / "summary.csv").exists():
        print(f"criterion: no {val / 'summary.csv'}; run `lmdbio model validate` first", file=sys.stderr)
        return 1
    f = write(pd.read_csv(val / "summary.csv"), val)
    print(counts(pd.read_csv(f)).to_string(index=False))
    print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
