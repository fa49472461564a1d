"""Figures of notebooks 03-10: one optimization against the variant before it, scaling, training."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from lmdbio.options import VARIANTS

from ..tables import label, ok_rows
from .style import (
    CACHE_STYLES,
    PHASE_COLORS,
    VARIANT_COLORS,
    VARIANT_MARKERS,
    _by_variant,
    _log_ticks,
    _pow2_ticks,
    _title,
    _value_axis,
    _variant_order,
)

# --- 03..06 one optimization against the variant before it ------------------------------------

def optimization(summary: pd.DataFrame, variants: Sequence[str], mechanism: pd.DataFrame | None = None,
                 meta: dict | None = None, title: str = "", mech_col: str = "", mech_label: str = "",
                 mech_log: bool = False):
    """Left: throughput vs processes, cold solid with filled circles, warm dashed with open squares
    (:data:`CACHE_STYLES`; the legend shows both). Right: the mechanism's own metric, each variant in
    its own marker, the earlier variants wider and below so that coinciding lines stay visible.

    ``mechanism`` has columns variant, nprocs and ``mech_col`` (e.g. from
    :func:`lmdbio.lab.tables.per_iteration`). Error bars: standard deviation over repeats; the
    variants' points are set a little apart along x so that their bars do not hide each other.
    """
    from matplotlib.lines import Line2D

    ncols = 2 if mechanism is not None else 1
    fig, axes = plt.subplots(1, ncols, figsize=(5.0 * ncols + 0.6, 4), squeeze=False)
    a1 = axes[0, 0]
    d = ok_rows(summary)
    d = d[d["variant"].isin(variants)]
    order = _variant_order(d["variant"])
    caches = [c for c in CACHE_STYLES if c in set(d["cache"])]
    drawn = []
    for i, v in enumerate(order):
        shift = 2 ** (0.04 * (i - (len(order) - 1) / 2))
        for c in caches:
            g = d[(d["variant"] == v) & (d["cache"] == c)].groupby("nprocs")["records_per_s"]
            m, sd = g.mean(), g.std().fillna(0)
            if m.empty:
                continue
            ls, mk, filled = CACHE_STYLES[c]
            a1.errorbar(m.index * shift, m, yerr=sd, color=VARIANT_COLORS.get(v, "#333333"), ls=ls, marker=mk,
                        mfc=None if filled else "white", capsize=3, lw=1.6, ms=6, zorder=3 + i)
            drawn += [*(m - sd), *(m + sd)]
    _pow2_ticks(a1, d["nprocs"])
    _value_axis(a1, drawn, "records delivered per second")
    a1.set_xlabel("processes")
    handles = [Line2D([], [], color=VARIANT_COLORS.get(v, "#333333"), lw=2.5, label=label(v)) for v in order]
    handles += [Line2D([], [], color="#333", ls=CACHE_STYLES[c][0], marker=CACHE_STYLES[c][1],
                       mfc=None if CACHE_STYLES[c][2] else "white", label=f"{c} cache") for c in caches]
    a1.legend(handles=handles, fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    if mechanism is not None:
        a2 = axes[0, 1]
        mech = mechanism[mechanism["variant"].isin(variants)]
        morder = _variant_order(mech["variant"])
        for i, v in enumerate(morder):
            g = mech[mech["variant"] == v].groupby("nprocs")[mech_col].mean()
            wide = len(morder) - 1 - i
            a2.plot(g.index, g, color=VARIANT_COLORS.get(v, "#333333"), marker=VARIANT_MARKERS.get(v, "o"),
                    lw=1.4 + 1.6 * wide, ms=5 + 3 * wide, alpha=0.9, label=label(v), zorder=3 + i)
        _pow2_ticks(a2, mechanism["nprocs"])
        if mech_log:
            a2.set_yscale("log")
            _log_ticks(a2)
        else:
            a2.set_ylim(bottom=0)
        a2.set_xlabel("processes")
        text = mech_label or mech_col
        # A long label wraps to the axes' height, not into the title.
        a2.set_ylabel(text if "\n" in text else "\n".join(textwrap.wrap(text, 32)), fontsize=9)
        a2.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    _title(fig, title or " vs ".join(label(v) for v in variants), meta)
    fig.tight_layout()
    fig.subplots_adjust(wspace=0.35)
    return fig


def prov_model(model: pd.DataFrame, meta: dict | None = None, clip: float = 3.0):
    """PROV: the arithmetic model's page error vs record number, with and without the commit model.

    Single records far off the rest (more than ``clip`` times the 99th percentile of |error|, at
    least 10 pages) would flatten every other line: the lines leave them out, they are drawn as
    triangles on the axis' edge, and the panel says how many records and how far off they are.
    """
    names = list(dict.fromkeys(model["dataset"])) if "dataset" in model else [None]
    fig, axes = plt.subplots(len(names), 1, figsize=(8.5, 2.9 * len(names)), squeeze=False)
    commits = VARIANT_COLORS["lmdbio-lmm-dio-prov"]
    for ax, name in zip(axes[:, 0], names):
        d = model if name is None else model[model["dataset"] == name]
        d = d.sort_values("record")
        psize = 4096
        e1 = (d["model_offset"] - d["true_offset"]) / psize
        e0 = (d["model_single_txn_offset"] - d["true_offset"]) / psize
        limit = clip * max(float(pd.concat([e0, e1]).abs().quantile(0.99)), 10.0 / clip)
        far0, far1 = e0.abs() > limit, e1.abs() > limit
        ax.plot(d["record"], e0.mask(far0), color="#7f8c8d", lw=1.2, ls="--", label="model, one transaction")
        ax.plot(d["record"], e1.mask(far1), color=commits, lw=1.6, label="model with commits")
        ax.axhline(0, color="k", lw=0.6)
        ce = int(d["commit_every"].iloc[0]) if "commit_every" in d else 0
        if ce:
            for c in range(ce, int(d["record"].max()) + 1, ce):
                ax.axvline(c, color="#bdc3c7", lw=0.6, ls=":")
        if (far0 | far1).any():
            near = pd.concat([e0[~far0], e1[~far1]])
            pad = 0.15 * max(float(near.max() - near.min()), 1.0)
            lo = min(float(near.min()), 0.0) - pad
            hi = max(float(near.max()), 0.0) + pad
            ax.set_ylim(lo if not (pd.concat([e0, e1]) < -limit).any() else lo - pad, hi)
            lo, hi = ax.get_ylim()
            for e, far, color in ((e0, far0, "#7f8c8d"), (e1, far1, commits)):
                if far.any():
                    ax.plot(d.loc[far[far].index, "record"], np.where(e[far] > 0, hi, lo), ls="none", marker="^",
                            ms=5, color=color, clip_on=False, zorder=5)
            off = pd.concat([e0[far0], e1[far1]]).abs()
            ax.text(0.99, 0.04, f"{int((far0 | far1).sum()):,} single records off by {off.min():,.0f}-"
                    f"{off.max():,.0f} pages: triangles on the edge", transform=ax.transAxes, ha="right",
                    va="bottom", fontsize=8, color="#444", bbox=dict(facecolor="white", edgecolor="none", alpha=0.85))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        exact = float((e1 == 0).mean())
        ax.set_title(f"{name or ''}: {exact:.0%} of offsets exact with commits "
                     f"(dotted: commit every {ce:,} records)", fontsize=10)
        ax.set_ylabel("model - truth (pages)")
        ax.legend(fontsize=8, loc="upper left")
    axes[-1, 0].set_xlabel("record number")
    _title(fig, "PROV's arithmetic offsets against the file", meta)
    fig.tight_layout()
    return fig


# --- 07 coalescing, 08 staggering ---------------------------------------------------------------

def coalescing(rows: pd.DataFrame, meta: dict | None = None):
    """Throughput vs coalesced request size, one line per process count (reader_timeline rows)."""
    d = rows.drop_duplicates(["variant", "nprocs", "coalesce_bytes", "cache", "repeat"]
                             if "repeat" in rows else ["variant", "nprocs", "coalesce_bytes", "cache"])
    d = d.assign(mb_per_s=d["record_bytes"] / d["wall_s_total"] / 1e6, mib=d["coalesce_bytes"] / 2**20,
                 P=d["nprocs"].map(lambda p: f"P={p}"))
    procs = [f"P={p}" for p in sorted(d["nprocs"].unique())]
    palette = dict(zip(procs, sns.color_palette("crest", len(procs))))
    fig, ax = plt.subplots(figsize=(6.6, 4))
    sns.lineplot(data=d[d["coalesce_bytes"] > 0], x="mib", y="mb_per_s", hue="P", hue_order=procs,
                 palette=palette, marker="o", errorbar=None, ax=ax)
    base = d[d["coalesce_bytes"] == 0].groupby("P")["mb_per_s"].mean()
    ax.hlines(base.to_numpy(), 0, 1, transform=ax.get_yaxis_transform(), linestyles=":", lw=1,
              colors=[palette[p] for p in base.index])
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("coalesced request target (MiB, log2)")
    ax.set_ylabel("delivered throughput (MB/s)")
    ax.set_ylim(bottom=0)
    ax.legend(title="processes (dotted: no COAL)", fontsize=8)
    _title(fig, "COAL: one read serves several iterations", meta)
    return fig


def timelines(rows: pd.DataFrame, meta: dict | None = None, phases=("read", "stagger_wait")):
    """Per-reader intervals of each phase over time, one panel per variant (reader_timeline rows;
    of repeated points, the first repeat)."""
    if "repeat" in rows:
        rows = rows[rows["repeat"] == rows["repeat"].min()]
    d = rows[rows["phase"].isin(phases) & rows["is_reader"].astype(bool)]
    variants = [v for v in VARIANTS if v in set(d["variant"])]
    fig, axes = plt.subplots(len(variants), 1, figsize=(8.5, 1.4 + 1.5 * len(variants)), sharex=True,
                             squeeze=False)
    seen = set()
    for ax, v in zip(axes[:, 0], variants):
        g = d[d["variant"] == v]
        t0 = g["t_start"].min()
        for ph in phases:
            for r, gr in g[g["phase"] == ph].groupby("rank"):
                ax.broken_barh(list(zip(gr["t_start"] - t0, (gr["t_end"] - gr["t_start"]).clip(lower=1e-5))),
                               (r - 0.4, 0.8), color=PHASE_COLORS.get(ph, "#999"),
                               label=ph if ph not in seen else None)
                seen.add(ph)
        ax.set_ylabel("reader rank")
        ax.set_title(f"{label(v)}: {g['wall_s_total'].iloc[0]:.2f} s for {g['iters'].iloc[0]} iterations",
                     fontsize=9)
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[-1, 0].set_xlabel("time since the first timed read (s)")
    h, lab = [], []
    for ax in axes[:, 0]:
        for hh, ll in zip(*ax.get_legend_handles_labels()):
            if ll not in lab:
                h.append(hh)
                lab.append(ll)
    fig.legend(h, lab, loc="upper right", fontsize=8)
    _title(fig, "When each reader hits storage (cold cache)", meta)
    fig.tight_layout()
    return fig


# --- 09 scaling, 10 training ---------------------------------------------------------------------

def scaling(summary: pd.DataFrame, meta: dict | None = None, metric: str = "wall_s",
            ylabel: str = "time for the timed iterations", unit: str = "s",
            title: str = "All variants vs processes"):
    """The poster's headline figure: time vs processes, one line per variant (+ pread limit),
    each in its colour and marker. The y axis is log, with plain ticks when the values span less
    than a decade (:func:`_value_axis`). Error bars: standard deviation over repeats.
    """
    d, hue = _by_variant(ok_rows(summary))
    limit = label("raw")
    names = dict(zip(hue["hue_order"], _variant_order(ok_rows(summary)["variant"])))
    fig, ax = plt.subplots(figsize=(7.4, 4.4))
    sns.lineplot(data=d, x="nprocs", y=metric, style="variant", style_order=hue["hue_order"],
                 dashes={v: (1, 2) if v == limit else "" for v in hue["hue_order"]},
                 markers={v: VARIANT_MARKERS.get(names[v], "o") for v in hue["hue_order"]}, errorbar="sd",
                 err_style="bars", err_kws={"capsize": 2}, lw=1.6, ms=6, ax=ax, **hue)
    _pow2_ticks(ax, d["nprocs"])
    g = d.groupby(["variant", "nprocs"])[metric]
    spread = pd.concat([g.mean() - g.std().fillna(0), g.mean() + g.std().fillna(0)])
    _value_axis(ax, spread, ylabel, unit)
    ax.set_xlabel("number of processes")
    ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    _title(fig, title, meta)
    return fig


def training(summary: pd.DataFrame, meta: dict | None = None):
    """Emulated training: time split into compute and the rest per variant and processes, and AU."""
    d = ok_rows(summary).groupby(["variant", "nprocs"], as_index=False)[["wall_s", "compute_s", "au"]].mean()
    d, hue = _by_variant(d[d["variant"].isin(VARIANTS)])
    d = d.assign(au_pct=d["au"] * 100)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.5, 4))
    # Whole bar: the training time; its lower part, paled: the compute inside it.
    sns.barplot(data=d, x="nprocs", y="wall_s", errorbar=None, saturation=1, ax=a1, **hue)
    pale = {**hue, "palette": {v: "white" for v in hue["hue_order"]}}
    sns.barplot(data=d, x="nprocs", y="compute_s", errorbar=None, alpha=0.65, legend=False, ax=a1, **pale)
    sns.lineplot(data=d, x="nprocs", y="au_pct", marker="o", errorbar=None, ax=a2, **hue)
    a1.set_xlabel("processes")
    a1.set_ylabel("training time (s)\npale: compute, solid: I/O + communication")
    a1.legend(fontsize=8)
    _pow2_ticks(a2, d["nprocs"])
    a2.set_xlabel("processes")
    a2.set_ylabel("accelerator utilization AU (%)")
    a2.set_ylim(0, 105)
    a2.legend(fontsize=8)
    _title(fig, "Emulated end-to-end training", meta)
    fig.tight_layout()
    return fig




def training_prefetch(rows: pd.DataFrame, meta: dict | None = None):
    """Emulated training with prefetch depth d: time split into I/O wait, compute and allreduce."""
    d = rows[rows["depth"] >= 0].groupby(["nprocs", "depth", "repeat"], as_index=False)[
        ["wall_s", "io_wait_s", "compute_s", "comm_s"]].mean()
    d = d.groupby(["nprocs", "depth"], as_index=False).median()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    labels = [f"P={p}\nd={q}" for p, q in zip(d["nprocs"], d["depth"])]
    x = np.arange(len(d))
    bottom = np.zeros(len(d))
    for col, name in (("compute_s", "compute"), ("comm_s", "allreduce"), ("io_wait_s", "waiting for I/O")):
        ax.bar(x, d[col], bottom=bottom, label=name)
        bottom += d[col].to_numpy()
    ax.plot(x, d["wall_s"], "k_", ms=20, mew=2, label="wall")
    ax.set_xticks(x, labels)
    ax.set_ylabel("seconds for the timed iterations (median)")
    ax.legend(fontsize=8)
    _title(fig, "Emulated training with prefetch", meta)
    fig.tight_layout()
    return fig
