"""Notebook 12's figure: shuffled epochs, prefetch overlap, decoding."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .style import _title

#: Notebook 12's epoch-throughput series, in legend order (the shard mode only where measured).
SERIES_12 = ("auto, file order", "auto, shuffled", "auto, shuffled (shard)", "lmdb-get, shuffled")


#: Notebook 12's decoding series and their names in panel (d).
DECODE_SERIES = {"raw": "raw read", "decoded": "decoded", "dali-caffe": "DALI"}


def _epochs_panel(a2, rate: dict) -> None:
    """(b): shuffled epochs' records/s per setting and P, one bar per series."""
    parts = []
    for setting, df in rate.items():
        if df is None or df.empty:
            continue
        shard = (df["shuffle_mode"] == "shard") if "shuffle_mode" in df else False
        d = df.assign(series=np.where(df["variant"] == "lmdb-get", "lmdb-get, shuffled",
                                      np.where(shard, "auto, shuffled (shard)",
                                               np.where(df["shuffle"], "auto, shuffled",
                                                        "auto, file order"))),
                      where=setting + ", P=" + df["nprocs"].astype(str))
        parts.append(d)
    if parts:
        d = pd.concat(parts, ignore_index=True)
        order = list(dict.fromkeys(d.sort_values(["storage", "nprocs"], kind="stable")["where"]))
        sns.barplot(data=d, x="where", y="records_per_s", hue="series", estimator="median",
                    errorbar=("pi", 100), ax=a2, order=order,
                    hue_order=[h for h in SERIES_12 if h in set(d["series"])])
        a2.set_yscale("log")
        a2.tick_params(axis="x", labelsize=7)
        a2.legend(fontsize=7)
    a2.set_xlabel("")
    a2.set_ylabel("records/s (median; bars: min-max)")
    a2.set_title("(b) epochs: file order vs shuffled", fontsize=10)


def _overlap_panel(a3, overlap: pd.DataFrame | None) -> None:
    """(c): the I/O share of an iteration per prefetch depth, emulated GPFS."""
    if overlap is not None and not overlap.empty:
        cols = ["io_share_steady", "io_share"]
        o = overlap[overlap["depth"] >= 0].groupby(["nprocs", "depth", "repeat"], as_index=False)[cols].mean()
        for i, (p, g) in enumerate(o.groupby("nprocs")):
            m = g.groupby("depth")["io_share_steady"].agg(["median", "min", "max"]).reset_index()
            a3.errorbar(m["depth"], 100 * m["median"], yerr=[100 * (m["median"] - m["min"]),
                        100 * (m["max"] - m["median"])], fmt="o-", capsize=3, color=f"C{i}",
                        label=f"P = {p}, past the first chunk")
            whole = g.groupby("depth")["io_share"].median()
            a3.plot(whole.index, 100 * whole, ":", color=f"C{i}", label=f"P = {p}, whole window")
        from ..beyond import TARGETS  # the prefetch target is 1 - the I/O share

        share = 100 * (1 - TARGETS["prefetch"][1])
        a3.axhline(share, color="#555", ls="--", lw=1, label=f"target: < {share:.3g}%")
        a3.set_xticks(sorted(o["depth"].unique()))
        a3.legend(fontsize=7)
    else:
        a3.text(0.5, 0.5, "no results", ha="center", va="center", transform=a3.transAxes, color="#888")
    a3.set_ylim(bottom=0)
    a3.set_xlabel("prefetch depth d (batches)")
    a3.set_ylabel("I/O share of an iteration (%)")
    a3.set_title("(c) overlap, emulated GPFS, cold", fontsize=10)


def beyond(randomness: pd.DataFrame, rate: dict, overlap: pd.DataFrame | None, decode: pd.DataFrame,
           meta: dict | None = None, notes: dict | None = None):
    """Notebook 12 in four panels: how random the shuffled orders are, shuffled epochs' records/s,
    the I/O share of an iteration per prefetch depth, and decoded vs raw vs DALI records/s.

    ``rate`` is ``{setting label: epoch_rate rows}``; ``overlap`` the emulated GPFS's overlap rows
    (None: none); ``notes`` ``{panel letter: text}`` printed under a panel.
    """
    notes = notes or {}
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.3))
    a1, a2, a3, a4 = axes
    r = randomness[randomness["block"] > 0].copy()
    r = r[r["note"].fillna("") == ""]
    for i, (w, g) in enumerate(r.groupby("window")):
        a1.plot(g["block"], g["distance_vs_uniform"], "o-", color=f"C{i}", label=f"window {w} blocks: distance")
        a1.plot(g["block"], g["epoch_correlation"].abs(), "x:", color=f"C{i}", label=f"window {w}: |epoch corr.|")
    a1.set_xscale("log", base=2)
    a1.set_ylim(-0.02, 1.05)
    a1.set_xlabel("records per chunk")
    a1.set_ylabel("mean distance in a batch / uniform's (o)\n|correlation of positions, epochs 0-1| (x)")
    a1.set_title("(a) randomness of the shuffled order", fontsize=10)
    a1.legend(fontsize=7)

    _epochs_panel(a2, rate)

    _overlap_panel(a3, overlap)

    dd = decode.dropna(subset=["records_per_s"])
    if not dd.empty:
        sns.barplot(data=dd, x="nprocs", y="records_per_s", hue="series", estimator="median",
                    errorbar=("pi", 100), ax=a4,
                    hue_order=[s for s in DECODE_SERIES if s in set(dd["series"])])
        a4.legend(fontsize=8)
    a4.set_xlabel("processes")
    a4.set_ylabel("records/s, warm (median; bars: min-max)")
    # The title names the series drawn: a peer that did not run (DALI not installed) gets no bar.
    shown = [n for k, n in DECODE_SERIES.items() if k in set(dd["series"])]
    absent = [n for k, n in DECODE_SERIES.items() if k in set(decode["series"]) and k not in set(dd["series"])]
    a4.set_title("(d) decoding: " + ", ".join(shown)
                 + (f"\n({', '.join(absent)} not measured: no bar)" if absent else ""), fontsize=10)
    for letter, ax in zip("abcd", axes):
        if letter in notes:
            ax.text(0.02, 0.02, "\n".join(textwrap.wrap(notes[letter], 48)), transform=ax.transAxes,
                    fontsize=7, color="#666", va="bottom")
    _title(fig, "Beyond the papers: shuffled epochs, prefetch, decoding", meta)
    fig.tight_layout()
    return fig


