"""Figures: one seaborn style, one fixed colour per variant, one function per figure kind.

Every function reads tidy results (DataFrames loaded from ``data/results``)
and returns a matplotlib Figure; nothing here measures. :func:`save` writes
``figures/NN_name.png`` and ``.svg``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

__all__ = [
    "VARIANTS", "VARIANT_COLORS", "PHASE_COLORS", "PAGE_COLORS", "label", "setup", "save",
    "load", "machine", "subtitle",
    "environment", "page_map", "record_sizes", "time_breakdown", "contention", "seek_cost",
    "io_requests", "compare_variants", "phase_compare", "prov_model", "coalescing", "timelines",
    "scaling", "speedup_table", "training",
]

VARIANTS = ("lmdb", "lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov",
            "lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag")
# Fixed colours: LMDB grey-red, then the LMDBIO stack light to dark; "raw" is the pread limit.
VARIANT_COLORS = dict(zip(VARIANTS + ("raw",), (
    "#c0392b", "#f39c12", "#8e44ad", "#2e86c1", "#17a589", "#1e8449", "#0b3d2e", "#7f8c8d")))
PHASE_COLORS = {
    "setup": "#bdc3c7", "locate": "#e67e22", "read": "#2980b9", "distribute": "#27ae60",
    "wait": "#f1c40f", "stagger_wait": "#d35400", "ring_wait": "#9b59b6", "compute": "#34495e",
    "allreduce": "#95a5a6", "other": "#ecf0f1",
}
PAGE_COLORS = {"meta": "#2c3e50", "branch": "#e74c3c", "leaf": "#f1c40f", "overflow": "#3498db",
               "free": "#ecf0f1"}
PHASE_ORDER = tuple(PHASE_COLORS)


def label(variant: str) -> str:
    """Paper spelling of a variant (``lmdbio-lmm-dio`` -> ``LMDBIO-LMM-DIO``; ``raw`` -> pread limit)."""
    return "pread limit (raw)" if variant == "raw" else variant.upper()


def setup() -> None:
    """The one style of every figure: seaborn whitegrid, readable sizes."""
    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.95)
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight",
                         "axes.titleweight": "bold", "legend.frameon": True, "svg.fonttype": "none"})


def save(fig, name: str, figures_root: str | os.PathLike = "figures") -> list[Path]:
    """Write ``figures_root/name.png`` and ``.svg``; returns the paths."""
    root = Path(figures_root)
    root.mkdir(parents=True, exist_ok=True)
    paths = [root / f"{name}.png", root / f"{name}.svg"]
    for p in paths:
        fig.savefig(p)
    return paths


def load(results_dir: str | os.PathLike, name: str = "points.csv") -> pd.DataFrame:
    """One results table; raises FileNotFoundError naming the notebook that writes it."""
    path = Path(results_dir) / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run its notebook with RUN=True first")
    return pd.read_csv(path)


def machine(results_dir: str | os.PathLike) -> dict:
    """The meta.json of a results directory ({} when absent)."""
    path = Path(results_dir) / "meta.json"
    return json.loads(path.read_text()) if path.exists() else {}


def subtitle(meta: dict) -> str:
    """'host: N cores, local disk, scale S' from a meta.json."""
    host = meta.get("host") or {}
    name = host.get("hostname") if isinstance(host, dict) else host
    cores = (host.get("cores") or host.get("cpu_count")) if isinstance(host, dict) else None
    cores = cores or meta.get("cores")
    bits = [f"{name or 'this machine'}: {cores or '?'} cores, local disk"]
    if meta.get("scale"):
        bits.append(f"scale {meta['scale']}")
    return ", ".join(bits)


def _title(fig, text: str, meta: dict | None) -> None:
    fig.suptitle(text + (f"\n{subtitle(meta)}" if meta is not None else ""), fontsize=11)


def _variant_legend(ax, **kw) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, [label(x) if x in VARIANT_COLORS else x for x in labels], **kw)


def _pow2_ticks(ax, values: Iterable[int]) -> None:
    vals = sorted(set(int(v) for v in values))
    ax.set_xscale("log", base=2)
    ax.set_xticks(vals)
    ax.set_xticklabels([str(v) for v in vals])
    ax.minorticks_off()


# --- 00 environment ---------------------------------------------------------------------------

def environment(shm: pd.DataFrame, meta: dict | None = None):
    """MPI shared-memory check: copy bandwidth from a neighbour's slice, per rank."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    colors = ["#27ae60" if ok else "#c0392b" for ok in shm["all_slices_visible"]]
    ax.bar(shm["rank"].astype(str), shm["copy_gb_per_s"], color=colors)
    ax.set_xlabel("MPI rank (engine)")
    ax.set_ylabel("copy from neighbour's slice (GB/s)")
    ok = bool(shm["all_slices_visible"].all())
    _title(fig, f"MPI-3 shared window on {shm['node_size'].max()} ranks: "
                f"{'every slice visible' if ok else 'SLICES MISSING'}", meta)
    return fig


# --- 01 datasets -------------------------------------------------------------------------------

def page_map(pages: pd.DataFrame, meta: dict | None = None, width: int = 128, max_pages: int = 65536):
    """``data.mdb`` as a grid of pages coloured by type, one panel per dataset.

    ``pages`` has columns dataset, pgno, type (meta/branch/leaf/overflow/free).
    Large files are shown by their first ``max_pages`` pages.
    """
    names = list(dict.fromkeys(pages["dataset"]))
    types = list(PAGE_COLORS)
    cmap = matplotlib.colors.ListedColormap([PAGE_COLORS[t] for t in types])
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 2.6 * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        d = pages[pages["dataset"] == name].sort_values("pgno")
        total = len(d)
        d = d.head(max_pages)
        codes = d["type"].map({t: i for i, t in enumerate(types)}).to_numpy()
        rows = -(-len(codes) // width)
        grid = np.full(rows * width, np.nan)
        grid[:len(codes)] = codes
        ax.imshow(grid.reshape(rows, width), cmap=cmap, vmin=-0.5, vmax=len(types) - 0.5,
                  aspect="auto", interpolation="nearest")
        ax.set_yticks([])
        ax.set_xticks([])
        shown = f"first {len(d):,} of {total:,} pages" if total > len(d) else f"{total:,} pages"
        ax.set_title(f"{name}: {shown}, {width} per row (page 0 top left)", fontsize=10)
        ax.grid(False)
    handles = [matplotlib.patches.Patch(color=PAGE_COLORS[t], label=t) for t in types]
    fig.legend(handles=handles, loc="lower center", ncol=len(types), bbox_to_anchor=(0.5, -0.02))
    _title(fig, "data.mdb pages by type (4 KiB each)", meta)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def record_sizes(records: pd.DataFrame, meta: dict | None = None):
    """Histogram of value sizes per dataset (columns dataset, size)."""
    names = list(dict.fromkeys(records["dataset"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names):
        s = records.loc[records["dataset"] == name, "size"] / 1024
        sns.histplot(s, ax=ax, bins=40, color="#2e86c1")
        ax.set_xlabel("record (Datum) size (KiB)")
        ax.set_ylabel("records")
        ax.set_title(f"{name}: {len(s):,} records, mean {s.mean():.1f} KiB", fontsize=10)
    _title(fig, "Record sizes", meta)
    fig.tight_layout()
    return fig


# --- 02 LMDB analysis --------------------------------------------------------------------------

def _per_batch_phase(points: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Mean over ranks and batches of each phase's wall time per batch (critical path = max over ranks)."""
    per_rank = points.groupby([*by, "batch", "phase", "rank"], as_index=False)["wall_s"].sum()
    crit = per_rank.groupby([*by, "batch", "phase"], as_index=False)["wall_s"].max()
    return crit.groupby([*by, "phase"], as_index=False)["wall_s"].mean()


def time_breakdown(points: pd.DataFrame, meta: dict | None = None, by: str = "nprocs",
                   title: str = "Where one training iteration's time goes"):
    """Stacked bars: seconds per iteration by phase (slowest rank) vs ``by``, with the I/O share."""
    d = _per_batch_phase(points[points["phase"] != "setup"], [by])
    wide = d.pivot_table(index=by, columns="phase", values="wall_s", fill_value=0.0)
    cols = [p for p in PHASE_ORDER if p in wide.columns] + [c for c in wide.columns if c not in PHASE_ORDER]
    wide = wide[cols]
    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = np.zeros(len(wide))
    x = np.arange(len(wide))
    for c in cols:
        ax.bar(x, wide[c].to_numpy() * 1e3, bottom=bottom, label=c,
               color=PHASE_COLORS.get(c, "#cccccc"), edgecolor="white", linewidth=0.5)
        bottom += wide[c].to_numpy() * 1e3
    io_cols = [c for c in cols if c not in ("compute", "allreduce")]
    share = wide[io_cols].sum(axis=1) / wide.sum(axis=1)
    for xi, tot, sh in zip(x, bottom, share):
        ax.annotate(f"I/O {sh:.0%}", (xi, tot), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [str(v) for v in wide.index])
    ax.set_xlabel("processes" if by == "nprocs" else by)
    ax.set_ylabel("time per iteration (ms, slowest rank)")
    ax.legend(title="phase", bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.margins(y=0.12)
    _title(fig, title, meta)
    return fig


def contention(points: pd.DataFrame, meta: dict | None = None):
    """Problem 1: sleep time and context switches per rank and iteration vs processes per node."""
    d = points[points["phase"].isin(["read", "locate"])]
    per = d.groupby(["nprocs", "rank", "batch"], as_index=False)[["sleep_s", "vcsw", "ivcsw"]].sum()
    m = per.groupby("nprocs", as_index=False)[["sleep_s", "vcsw", "ivcsw"]].mean()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    a1.plot(m["nprocs"], m["sleep_s"] * 1e3, "o-", color=VARIANT_COLORS["lmdb"])
    a1.set_ylabel("sleep time per rank per iteration (ms)")
    a2.plot(m["nprocs"], m["vcsw"], "o-", label="voluntary", color="#2980b9")
    a2.plot(m["nprocs"], m["ivcsw"], "s--", label="involuntary", color="#e67e22")
    a2.set_ylabel("context switches per rank per iteration")
    a2.legend()
    for a in (a1, a2):
        _pow2_ticks(a, m["nprocs"])
        a.set_xlabel("processes per node")
        a.set_ylim(bottom=0)
    _title(fig, "LMDB (mmap): sleep and context switches in locate+read", meta)
    fig.tight_layout()
    return fig


def seek_cost(points: pd.DataFrame, meta: dict | None = None):
    """Problem 2: cursor seek cost (records walked, locate time) vs rank, one line per process count."""
    d = points[points["phase"] == "locate"]
    m = d.groupby(["nprocs", "rank"], as_index=False)[["records_walked", "wall_s"]].mean()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    pal = sns.color_palette("rocket_r", m["nprocs"].nunique())
    for color, (p, g) in zip(pal, m.groupby("nprocs")):
        a1.plot(g["rank"], g["records_walked"], "o-", color=color, label=f"P={p}")
        a2.plot(g["rank"], g["wall_s"] * 1e3, "o-", color=color, label=f"P={p}")
    a1.set_ylabel("records walked by the cursor per iteration")
    a2.set_ylabel("locate time per iteration (ms)")
    for a in (a1, a2):
        a.set_xlabel("rank")
        a.set_ylim(bottom=0)
        a.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    a2.legend(title="processes")
    _title(fig, "LMDB: a rank's cursor walks past every earlier rank's records", meta)
    fig.tight_layout()
    return fig


def io_requests(points: pd.DataFrame, meta: dict | None = None):
    """Problem 3: how the data arrives: read calls/page faults per iteration and bytes per request."""
    d = points[points["phase"].isin(["read", "locate"])].copy()
    d["faults"] = d["minflt"] + d["majflt"]
    per = d.groupby(["variant", "nprocs", "rank", "batch"], as_index=False)[
        ["faults", "majflt", "calls", "bytes"]].sum()
    m = per.groupby(["variant", "nprocs"], as_index=False).mean(numeric_only=True)
    m["requests"] = np.where(m["calls"] > 0, m["calls"], m["faults"])
    m["bytes_per_request"] = m["bytes"] / m["requests"].replace(0, np.nan)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    for v, g in m.groupby("variant"):
        c = VARIANT_COLORS.get(v, "#333333")
        a1.plot(g["nprocs"], g["requests"], "o-", color=c, label=v)
        a2.plot(g["nprocs"], g["bytes_per_request"] / 1024, "o-", color=c, label=v)
    a1.set_ylabel("requests per rank per iteration\n(page faults for mmap, preads for DIO)")
    a2.set_ylabel("bytes per request (KiB)")
    for a in (a1, a2):
        _pow2_ticks(a, m["nprocs"])
        a.set_yscale("log")
        a.set_xlabel("processes")
    _variant_legend(a2, fontsize=8)
    _title(fig, "Implicit small I/O: mmap faults vs explicit reads", meta)
    fig.tight_layout()
    return fig


# --- 03..06 one optimization against the variant before it ------------------------------------

def compare_variants(summary: pd.DataFrame, variants: Sequence[str], meta: dict | None = None,
                     title: str = "", metric: str = "s_per_iter"):
    """Time per iteration vs processes for a few variants (mean +- sd over repeats), log-log."""
    d = summary[summary["variant"].isin(variants)]
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for v in variants:
        g = d[d["variant"] == v].groupby("nprocs")[metric].agg(["mean", "std"]).reset_index()
        if g.empty:
            continue
        ax.errorbar(g["nprocs"], g["mean"] * 1e3, yerr=g["std"].fillna(0) * 1e3, fmt="o-",
                    capsize=3, color=VARIANT_COLORS.get(v, "#333"), label=label(v))
    _pow2_ticks(ax, d["nprocs"])
    ax.set_yscale("log")
    ax.set_xlabel("processes")
    ax.set_ylabel("read time per iteration (ms, log)")
    ax.legend(fontsize=8)
    _title(fig, title or " vs ".join(label(v) for v in variants), meta)
    return fig


def phase_compare(points: pd.DataFrame, variants: Sequence[str], meta: dict | None = None,
                  title: str = ""):
    """Stacked phase bars per (variant, processes): what the optimization removed."""
    d = points[points["variant"].isin(variants) & (points["phase"] != "setup")]
    m = _per_batch_phase(d, ["variant", "nprocs"])
    ps = sorted(m["nprocs"].unique())
    fig, axes = plt.subplots(1, len(ps), figsize=(2.2 + 2.0 * len(ps), 3.8), sharey=True, squeeze=False)
    phases = [p for p in PHASE_ORDER if p in set(m["phase"])]
    for ax, p in zip(axes[0], ps):
        g = m[m["nprocs"] == p].pivot_table(index="variant", columns="phase", values="wall_s",
                                            fill_value=0).reindex([v for v in variants])
        bottom = np.zeros(len(g))
        for ph in phases:
            vals = g[ph].fillna(0).to_numpy() * 1e3 if ph in g else np.zeros(len(g))
            ax.bar(range(len(g)), vals, bottom=bottom, color=PHASE_COLORS[ph], label=ph,
                   edgecolor="white", linewidth=0.5)
            bottom += vals
        ax.set_xticks(range(len(g)), [label(v).replace("LMDBIO-", "") for v in g.index],
                      rotation=30, ha="right", fontsize=8)
        ax.set_title(f"P = {p}", fontsize=10)
    axes[0, 0].set_ylabel("time per iteration (ms, slowest rank)")
    h, lab = axes[0, -1].get_legend_handles_labels()
    fig.legend(h[:len(phases)], lab[:len(phases)], title="phase", loc="center left",
               bbox_to_anchor=(1.0, 0.5))
    _title(fig, title or "Phases per iteration", meta)
    fig.tight_layout()
    return fig


def prov_model(model: pd.DataFrame, meta: dict | None = None):
    """PROV: arithmetic offsets vs the true ones (columns record, true_offset, model_offset, commit)."""
    d = model.sort_values("record")
    err_pages = (d["model_offset"] - d["true_offset"]) / 4096
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True, height_ratios=(2, 1))
    a1.plot(d["record"], d["true_offset"] / 2**20, "-", color="#2c3e50", lw=2, label="truth (index walk)")
    a1.plot(d["record"], d["model_offset"] / 2**20, "--", color=VARIANT_COLORS["lmdbio-lmm-dio-prov"],
            label="arithmetic model")
    a1.set_ylabel("file offset (MiB)")
    a1.legend()
    a2.plot(d["record"], err_pages, color="#c0392b")
    a2.axhline(0, color="k", lw=0.6)
    a2.set_ylabel("model - truth (pages)")
    a2.set_xlabel("record number")
    if "commit_every" in d.columns and d["commit_every"].notna().any():
        ce = int(d["commit_every"].dropna().iloc[0])
        for c in range(ce, int(d["record"].max()) + 1, ce):
            for a in (a1, a2):
                a.axvline(c, color="#7f8c8d", lw=0.6, ls=":")
    _title(fig, "Provenance model vs the file: commits (dotted) shift the pages", meta)
    fig.tight_layout()
    return fig


# --- 07 coalescing, 08 staggering ---------------------------------------------------------------

def coalescing(summary: pd.DataFrame, meta: dict | None = None):
    """Throughput vs coalesced request size (column request_bytes), one line per process count."""
    d = summary.groupby(["nprocs", "request_bytes"], as_index=False)["mb_per_s"].mean()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    pal = sns.color_palette("crest", d["nprocs"].nunique())
    for c, (p, g) in zip(pal, d.groupby("nprocs")):
        ax.plot(g["request_bytes"] / 2**20, g["mb_per_s"], "o-", color=c, label=f"P={p}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("bytes per read request (MiB, log2)")
    ax.set_ylabel("read throughput (MB/s)")
    ax.set_ylim(bottom=0)
    ax.legend(title="processes")
    _title(fig, "COAL: bigger requests, fewer of them", meta)
    return fig


def timelines(points: pd.DataFrame, meta: dict | None = None, phases=("read", "stagger_wait")):
    """Per-reader read intervals over time (cold cache), one panel per variant."""
    d = points[points["phase"].isin(phases) & (points.get("is_reader", True) == True)]  # noqa: E712
    variants = [v for v in VARIANTS if v in set(d["variant"])]
    fig, axes = plt.subplots(len(variants), 1, figsize=(8, 1.2 + 1.3 * len(variants)), sharex=True,
                             squeeze=False)
    for ax, v in zip(axes[:, 0], variants):
        g = d[d["variant"] == v]
        t0 = g["t_start"].min()
        for ph in phases:
            gp = g[g["phase"] == ph]
            for r, gr in gp.groupby("rank"):
                ax.broken_barh(list(zip(gr["t_start"] - t0, gr["t_end"] - gr["t_start"])),
                               (r - 0.4, 0.8), color=PHASE_COLORS.get(ph, "#999"),
                               label=ph if r == gp["rank"].min() else None)
        ax.set_ylabel("reader rank")
        ax.set_title(label(v), fontsize=9)
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[-1, 0].set_xlabel("time since first read (s)")
    h, lab = [], []
    for ax in axes[:, 0]:
        for hh, ll in zip(*ax.get_legend_handles_labels()):
            if ll not in lab:
                h.append(hh)
                lab.append(ll)
    axes[0, 0].legend(h, lab, loc="upper right", fontsize=8)
    _title(fig, "When each reader hits storage (cold cache)", meta)
    fig.tight_layout()
    return fig


# --- 09 scaling, 10 training ---------------------------------------------------------------------

def scaling(summary: pd.DataFrame, meta: dict | None = None, metric: str = "total_s",
            ylabel: str = "time for the run (s, log)", title: str = "All variants vs processes"):
    """The poster's headline figure: log time vs processes, one line per variant (+ pread limit)."""
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    order = [v for v in (*VARIANTS, "raw") if v in set(summary["variant"])]
    for v in order:
        g = summary[summary["variant"] == v].groupby("nprocs")[metric].agg(["mean", "std"]).reset_index()
        ax.errorbar(g["nprocs"], g["mean"], yerr=g["std"].fillna(0), fmt="o-" if v != "raw" else "k:",
                    capsize=2, color=VARIANT_COLORS[v], label=label(v), lw=1.6 if v != "raw" else 1.2)
    _pow2_ticks(ax, summary["nprocs"])
    ax.set_yscale("log")
    ax.set_xlabel("number of processes")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    _title(fig, title, meta)
    return fig


def speedup_table(summary: pd.DataFrame, metric: str = "total_s") -> pd.DataFrame:
    """Speedup of each variant over LMDB per process count (rows variants, columns processes)."""
    m = summary.groupby(["variant", "nprocs"])[metric].mean().unstack("nprocs")
    if "lmdb" not in m.index:
        raise ValueError("speedup_table needs the 'lmdb' variant in the summary")
    sp = m.loc["lmdb"] / m
    sp = sp.reindex([v for v in (*VARIANTS, "raw") if v in sp.index])
    sp.index = [label(v) for v in sp.index]
    sp.columns = [f"P={c}" for c in sp.columns]
    return sp.round(2)


def training(summary: pd.DataFrame, meta: dict | None = None):
    """Emulated training: time split into compute and I/O per variant and processes, and AU."""
    d = summary.groupby(["variant", "nprocs"], as_index=False)[["total_s", "compute_s", "au"]].mean()
    variants = [v for v in VARIANTS if v in set(d["variant"])]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    ps = sorted(d["nprocs"].unique())
    w = 0.8 / max(1, len(variants))
    for i, v in enumerate(variants):
        g = d[d["variant"] == v].set_index("nprocs").reindex(ps)
        x = np.arange(len(ps)) + (i - (len(variants) - 1) / 2) * w
        c = VARIANT_COLORS[v]
        a1.bar(x, g["compute_s"], w, color=c, alpha=0.45, edgecolor=c)
        a1.bar(x, g["total_s"] - g["compute_s"], w, bottom=g["compute_s"], color=c, label=label(v))
        a2.plot(ps, g["au"] * 100, "o-", color=c, label=label(v))
    a1.set_xticks(np.arange(len(ps)), [str(p) for p in ps])
    a1.set_xlabel("processes")
    a1.set_ylabel("training time (s)\npale: compute, solid: I/O + communication")
    a1.legend(fontsize=8)
    _pow2_ticks(a2, ps)
    a2.set_xlabel("processes")
    a2.set_ylabel("accelerator utilization AU (%)")
    a2.set_ylim(0, 105)
    _title(fig, "Emulated end-to-end training", meta)
    fig.tight_layout()
    return fig
