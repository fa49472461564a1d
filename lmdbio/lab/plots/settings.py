"""A claim in every setting (notebooks 02-10): one panel per setting, the judged point marked."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .style import _host, _log_ticks, _pow2_ticks

# --- the settings of a claim (notebooks 02-10) ----------------------------------------------------

SETTING_TITLES = {"local": "(a) local disk, measured", "gpfs": "(b) emulated GPFS, measured",
                  "throttled": "(b2) throttled block device, measured",
                  "shared": "(b3) shared throttled target, measured",
                  "model": "(c) papers' scale, model"}
#: The model panel's workloads: colour, line style and marker of each (one line per workload).
WORKLOAD_STYLES = {"cifar10-large-alexnet": ("#1f4e79", "-", "o"),
                   "imagenet-caffenet": ("#b9770e", "--", "s")}
_VERDICT_COLORS = {"yes": "#1e8449", "no": "#c0392b"}
#: The colour of a measured line.
_LINE = "#1f4e79"


def _factor(claim, factor) -> str:
    """The paper's factor as written beside a value: '20x' for a speed-up, '0.9' for a share."""
    return f"{factor:g}x" if claim.threshold >= 1 else f"{factor:g}"


def judgement(claim, row) -> str:
    """One claims.csv row in words: the value and its range, then direction and magnitude against
    the paper's factor, e.g. '1.25 at P=8 (repeats 1.23-1.25): direction yes, magnitude smaller
    than the paper's 20x'."""
    mag = str(row.get("magnitude", "") or "")
    factor = row.get("paper_factor", np.nan)
    text = f"{row['measured']}: direction {row['verdict']}"
    if isinstance(factor, (int, float)) and np.isfinite(factor) and factor > 0:
        if mag in ("smaller", "larger"):
            text += f", magnitude {mag} than the paper's {_factor(claim, factor)}"
        elif mag:
            text += f", magnitude {mag} (the paper's {_factor(claim, factor)})"
    else:
        text += "; the paper states no factor"
    return text


def _is_check(rows: pd.DataFrame) -> pd.Series:
    """Which rows of claims.csv are the model's own checks (claims A1...), not a claim's."""
    if "claim" not in rows:
        return pd.Series(False, index=rows.index)
    return rows["claim"].astype(str).str.startswith("A")


def _axis_checks(verdicts: pd.DataFrame | None, checks: pd.DataFrame | None) -> pd.DataFrame:
    """The model's poster-axis rows (claims A1...): ``checks``, else those in ``verdicts``, else
    :func:`lmdbio.lab.claims.axis_rows` of the committed results."""
    if checks is not None:
        return checks
    if verdicts is not None and len(verdicts):
        rows = verdicts[_is_check(verdicts)]
        if len(rows):
            return rows
    from .. import claims as _claims
    return pd.DataFrame(_claims.axis_rows())


def _model_status(checks: pd.DataFrame) -> tuple[str, bool]:
    """What the model panel says of the model, and whether a check failed: where the model is
    introduced, and whether its absolute times pass notebook 11's poster-axis check (each failing
    check named, with what it found)."""
    failed = checks[checks["verdict"] == "no"] if len(checks) else checks
    passed = checks[checks["verdict"] == "yes"] if len(checks) else checks
    text = "The model is introduced and validated in notebook 11. "
    if len(failed):
        bits = "; ".join(f"{r.claim}: {str(r.measured).removeprefix('FAILED: ')}" for r in failed.itertuples())
        text += (f"Its absolute times FAIL notebook 11's poster-axis check ({bits}"
                 + (f"; {', '.join(passed['claim'])} passes" if len(passed) else "")
                 + "): read its ratios, not its seconds.")
    elif len(passed):
        text += f"Its absolute times pass notebook 11's poster-axis check ({', '.join(passed['claim'])})."
    else:
        text += "Notebook 11's poster-axis check of its absolute times has no data."
    return text, bool(len(failed))


def _log_scale(values: Iterable[float], threshold: float | None = None, span: float = 20.0) -> bool:
    vals = [v for v in values if np.isfinite(v) and v > 0] + ([threshold] if threshold else [])
    return bool(vals) and max(vals) / min(vals) > span


def _lines(setting: str, d: pd.DataFrame) -> list:
    """(workload or None, rows) per line of a panel: one per workload in the model panel."""
    if setting == "model" and "workload" in d.columns:
        known = list(WORKLOAD_STYLES)
        return sorted(d.groupby("workload", sort=False),
                      key=lambda kv: known.index(kv[0]) if kv[0] in known else len(known))
    return [(None, d)]


def _no_data(ax, rows: pd.DataFrame) -> None:
    """An empty panel says why: the claim's 'not measured' reason, else 'no results'."""
    unmeasured = len(rows) and rows["verdict"].iloc[0] == "not measured"
    text = "\n".join(textwrap.wrap(rows["why"].iloc[0].split(" [committed")[0], 40)) if unmeasured \
        else "no results"
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#888",
            fontsize=8 if unmeasured else None,
            bbox={"facecolor": "white", "edgecolor": "none"} if unmeasured else None)
    ax.set_xticks([])


def _judged(ax, claim, rows: pd.DataFrame, w, c) -> tuple | None:
    """Star the judged point of one line; returns (value, P, word, colour, text under the panel)."""
    from ..claims import DATASET_OF

    r = rows[rows["dataset"] == DATASET_OF.get(w, w)] if w is not None and len(rows) and "dataset" in rows \
        else rows
    if not len(r) or not np.isfinite(r["value"].iloc[0]):
        return None
    row = r.iloc[0]
    v = row["verdict"]
    vc = _VERDICT_COLORS.get(v, "#888")
    ax.plot([row["nprocs"]], [row["value"]], marker="*", ms=16, ls="none", color=vc, markeredgecolor=c, zorder=6)
    mag = str(row.get("magnitude", "") or "")
    word = v + (f", {mag}" if mag in ("smaller", "larger", "reproduced", "consistent", "uninformative") else "")
    if row.get("repeats") == 1:
        word += " (1 repeat)"
    prefix = "" if w is None else f"{DATASET_OF.get(w, w)}: "
    return float(row["value"]), row["nprocs"], prefix + word, vc, prefix + judgement(claim, row)


def _model_axis(ax, d: pd.DataFrame) -> None:
    ax.set_xscale("log")
    ps = sorted({int(p) for p in d["nprocs"]})
    ax.set_xticks([p for p in ps[::3] if p * 4 <= ps[-1]] + [ps[-1]])
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.minorticks_off()


def _panel(ax, claim, setting: str, d: pd.DataFrame | None, rows: pd.DataFrame) -> tuple[list, list]:
    """Draw one setting's lines and judged stars; returns (texts under the panel, workloads drawn)."""
    if d is None or d.empty:
        _no_data(ax, rows)
        return [], []
    lines, stars = _lines(setting, d), []
    for k, (w, g) in enumerate(lines):
        g = g.sort_values("nprocs")
        c, ls, mk = WORKLOAD_STYLES.get(w, (f"C{k}", "-", "o")) if w else (_LINE, "-", "o")
        lo = (g["value"] - g["lo"]).clip(lower=0).fillna(0)
        hi = (g["hi"] - g["value"]).clip(lower=0).fillna(0)
        ax.errorbar(g["nprocs"], g["value"], yerr=[lo, hi], color=c, ls=ls, marker=mk, capsize=3,
                    lw=1.6, label=f"{w} (bar at the largest P: 5-95% band)" if w else None, zorder=3 + k)
        star = _judged(ax, claim, rows, w, c)
        if star:
            stars.append(star)
    # The highest judged point's label above it, the others' below theirs.
    for i, (v, p, word, vc, _) in enumerate(sorted(stars, key=lambda t: -t[0])):
        ax.annotate(word, (p, v), textcoords="offset points", xytext=(-10, 10 if i == 0 else -12),
                    va="bottom" if i == 0 else "top", ha="right", fontsize=9, fontweight="bold",
                    color=vc, zorder=7, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    if setting == "model":
        _model_axis(ax, d)
    else:
        _pow2_ticks(ax, d["nprocs"])
    return [s[4] for s in stars], [w for w, _ in lines if w is not None]


def _under(ax, texts: list[tuple[str, str]]) -> None:
    """Write (text, colour) pieces under a panel's x label, one after the other."""
    below = ax.xaxis.label
    for text, c in texts:
        if text:
            below = ax.annotate(text, xy=(0, 0), xycoords=("axes fraction", below), xytext=(0, -4),
                                textcoords="offset points", fontsize=8, color=c, va="top", ha="left")


def _legend_handles(claim, workloads: list[str]) -> list:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_LINE, marker="o", label="median of repeats (bars: min-max)"),
               Line2D([], [], color="#555", ls="--", label=f"criterion: {claim.criterion}"),
               Line2D([], [], color=_VERDICT_COLORS["yes"], marker="*", ms=12, ls="none",
                      label="judged point: criterion met (direction)"),
               Line2D([], [], color=_VERDICT_COLORS["no"], marker="*", ms=12, ls="none",
                      label="judged point: not met"),
               Line2D([], [], color="#888", marker="*", ms=12, ls="none", label="judged point: open / not judged")]
    for w in workloads:
        c, ls, mk = WORKLOAD_STYLES.get(w, ("#333", "-", "o"))
        handles.append(Line2D([], [], color=c, ls=ls, marker=mk,
                              label=f"(c) model, {w} (bar at the largest P: 5-95% band)"))
    return handles


def _y_axes(claim, axes, series: dict) -> None:
    """One shared y axis for the measured panels, its own for the model; log where values span far."""
    def values(settings):
        return [v for s in settings if series.get(s) is not None
                for v in (*series[s]["lo"], *series[s]["hi"], *series[s]["value"])]
    for ax, settings in ((axes[0], list(SETTING_TITLES)[:-1]), (axes[-1], ["model"])):
        ax.margins(y=0.22)  # room for a judged point's label above it
        if _log_scale(values(settings), claim.threshold):
            ax.set_yscale("log")
            _log_ticks(ax)
    for ax in axes[:-1]:
        ax.set_ylabel("\n".join(textwrap.wrap(claim.ylabel or claim.short, 34)))
    axes[-1].set_ylabel("predicted (own scale)", fontsize=9)


def claim_settings(claim, series: dict, verdicts: pd.DataFrame | None = None, meta: dict | None = None,
                   notes: dict | None = None, checks: pd.DataFrame | None = None):
    """A claim's quantity vs processes in its settings (:data:`SETTING_TITLES`), two panels a row, one legend.

    ``series`` is ``{setting: DataFrame(nprocs, value, lo, hi)}`` (from
    :func:`lmdbio.lab.claims.series`; the model's has a ``workload`` column,
    one line per workload); ``verdicts`` the claim's rows of claims.csv (the
    point judged is marked with its verdict, and the text under each panel
    gives its value, range, direction and magnitude against the paper's factor:
    :func:`judgement`); ``notes`` ``{setting: text}`` printed under a panel
    (e.g. "replotted from the committed results"); ``checks`` the model's
    poster-axis rows (:func:`lmdbio.lab.claims.axis_rows`; default: the rows of
    ``verdicts`` whose claim starts with "A", else the committed ones): the
    model panel says when they fail, and names notebook 11. The measured
    panels share one y axis; the model panel has its own. The panels sit two
    to a row, so that the figure reads at a viewer's ~800 px; the legend
    takes the last row's free place.
    """
    notes = notes or {}
    n = len(SETTING_TITLES)
    rows_n = (n + 2) // 2
    fig = plt.figure(figsize=(10, 4.6 * rows_n + 0.8))
    grid = fig.add_gridspec(rows_n, 2)
    axes = [fig.add_subplot(grid[i // 2, i % 2]) for i in range(n)]
    for ax in axes[1:-1]:
        ax.sharey(axes[0])
    workloads: list[str] = []
    for ax, setting in zip(axes, SETTING_TITLES):
        ax.set_title(SETTING_TITLES[setting], fontsize=10)
        ax.axhline(claim.threshold, color="#555", ls="--", lw=1)
        rows = verdicts[verdicts["setting"] == setting] if verdicts is not None else pd.DataFrame()
        rows = rows[~_is_check(rows)] if len(rows) else rows
        under, drawn = _panel(ax, claim, setting, series.get(setting), rows)
        workloads += [w for w in drawn if w not in workloads]
        ax.set_xlabel("processes (log)" if setting == "model" else "processes")
        if setting in notes:
            under.append(f"({notes[setting]})")
        texts = [("\n".join(line for t in under for line in textwrap.wrap(t, 60)), "#333")]
        if setting == "model":
            status, failed = _model_status(_axis_checks(verdicts, checks))
            texts.append(("\n".join(textwrap.wrap(status, 60, break_on_hyphens=False)), "#a93226" if failed else "#333"))
        _under(ax, texts)
    _y_axes(claim, axes, series)
    name, cores, scale = _host(meta or {})
    factor = (f"; the paper's factor {_factor(claim, claim.paper_factor)}" if claim.paper_factor
              else "; the paper states no factor")
    title = (f"{claim.id}: {claim.statement}{factor}. (a)-(b3) measured on {name} ({cores} cores), "
             f"scale {scale or '?'}; (c) predicted by lmdbio.lab.model (notebook 11); under each panel: "
             "the judged value, its range, the direction and the magnitude against the paper")
    fig.suptitle("\n".join(textwrap.wrap(title, 100)), fontsize=11)
    fig.tight_layout(h_pad=4.0)
    free = grid[rows_n - 1, 1].get_position(fig) if n % 2 else grid[rows_n - 1, :].get_position(fig)
    fig.legend(handles=_legend_handles(claim, workloads), loc="center", fontsize=9,
               bbox_to_anchor=(free.x0 + free.width / 2, free.y0 + free.height / 2))
    return fig
