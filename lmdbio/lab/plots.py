"""Figures: one seaborn style, one fixed colour per variant, one function per figure kind.

Every function reads tidy results (DataFrames loaded from ``data/results``,
shaped by :mod:`lmdbio.lab.tables`) and returns a matplotlib Figure; one line
per variant is seaborn's ``hue``. Nothing here measures. :func:`save` writes
``figures/NN_name.png`` and ``.svg``.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Callable, Iterable, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from lmdbio.options import EXTRA_VARIANTS, VARIANTS
from .tables import MMAP_VARIANTS, label, ok_rows, per_iteration, requests_per_iteration, speedup_table

__all__ = [
    "VARIANTS", "VARIANT_COLORS", "VARIANT_MARKERS", "CACHE_STYLES", "PHASE_COLORS", "PAGE_COLORS", "label", "setup", "save",
    "load", "machine", "subtitle",
    "environment", "page_map", "record_sizes", "time_breakdown", "contention",
    "seek_cost", "io_requests", "optimization",
    "prov_model", "coalescing", "timelines", "scaling", "training",
    "SETTING_TITLES", "WORKLOAD_STYLES", "claim_settings", "judgement",
    # data shaping lives in lmdbio.lab.tables; these names stay here for the notebooks that call them
    "per_iteration", "requests_per_iteration", "speedup_table", "MMAP_VARIANTS",
]

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


#: Each variant's marker, where lines are told apart by more than colour.
VARIANT_MARKERS = dict(zip(VARIANTS + ("raw",), ("o", "s", "D", "^", "v", "P", "X", "h")))
#: Cold and warm cache: line style, marker, filled marker.
CACHE_STYLES = {"cold": ("-", "o", True), "warm": ("--", "s", False)}


def _variant_order(variants: Iterable[str]) -> list[str]:
    """The variants present, in the papers' order, then any others."""
    present = list(dict.fromkeys(variants))
    known = [v for v in (*VARIANTS, *EXTRA_VARIANTS, "raw") if v in present]
    return known + [v for v in present if v not in known]


def _log_ticks(ax, lo: float | None = None, hi: float | None = None) -> None:
    """Plain tick labels ('0.02', '20,000') on a log y axis over less than 1000x, where the default
    shows one or two powers of ten or none: the coarsest of 1-2-5, 1-1.5-2-3-5-7 or finer steps per
    decade that gives at least 4 ticks."""
    if lo is None or hi is None:
        lo, hi = ax.get_ylim()
    if not (0 < lo < hi) or hi / lo >= 1000:
        return
    ticks: list[float] = []
    decades = range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
    for subs in ((1, 2, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9)):
        ticks = [float(f"{m * 10.0 ** k:.3g}") for k in decades for m in subs if lo <= m * 10.0 ** k <= hi]
        if len(ticks) >= 4:
            break
    else:
        ticks = [t for t in matplotlib.ticker.MaxNLocator(nbins=5).tick_values(lo, hi) if lo <= t <= hi and t > 0]
    ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
    ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{float(f'{v:.3g}'):,g}"))
    ax.set_ylim(lo, hi)


def _value_axis(ax, values: Iterable[float], name: str, unit: str = "") -> None:
    """A log y axis labelled ``name (unit, log)``, with plain ticks (:func:`_log_ticks`) when the
    values span less than 1000x ('2 x 10^-2' labels, or none, otherwise)."""
    vals = [float(v) for v in values if np.isfinite(v) and v > 0]
    ax.set_ylabel(f"{name} ({unit + ', ' if unit else ''}log)")
    ax.set_yscale("log")
    if vals:
        lo, hi = ax.get_ylim()
        _log_ticks(ax, min(lo, min(vals) / 1.25), max(hi, max(vals) * 1.25))


def _by_variant(df: pd.DataFrame, name: Callable[[str], str] = label) -> tuple[pd.DataFrame, dict]:
    """``df`` with its ``variant`` column spelled for a legend, and seaborn's hue arguments for it.

    Variants come in the papers' order, each in its fixed colour.
    """
    order = _variant_order(df["variant"])
    names = {v: name(v) for v in order}
    hue = dict(hue="variant", hue_order=[names[v] for v in order],
               palette={names[v]: VARIANT_COLORS.get(v, "#333333") for v in order})
    return df.assign(variant=df["variant"].map(names)), hue


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
    fig.savefig(paths[0])
    # The same figure gives the same SVG: no date, and clip-path ids salted by the name, not at
    # random (a replot of unchanged results leaves git status clean).
    with matplotlib.rc_context({"svg.hashsalt": name}):
        fig.savefig(paths[1], metadata={"Date": None})
    return paths


def load(results_dir: str | os.PathLike, name: str = "points.csv") -> pd.DataFrame:
    """One results table; raises FileNotFoundError naming the notebook that writes it."""
    path = Path(results_dir) / name
    if not path.exists() and Path(f"{path}.gz").exists():
        path = Path(f"{path}.gz")
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run its notebook with RUN=True first")
    return pd.read_csv(path)


def machine(results_dir: str | os.PathLike) -> dict:
    """The meta.json of a results directory ({} when absent)."""
    path = Path(results_dir) / "meta.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _host(meta: dict) -> tuple[str, str, str | None]:
    """(host name, cores, scale) from a meta.json."""
    host = meta.get("host") or {}
    name = host.get("hostname") if isinstance(host, dict) else host
    cores = (host.get("cores") if isinstance(host, dict) else None) or meta.get("cores")
    scale = meta.get("scale") or (meta.get("config") or {}).get("scale")
    return name or "this machine", cores or "?", scale


def subtitle(meta: dict) -> str:
    """'host: N cores, local disk, scale S' from a meta.json."""
    name, cores, scale = _host(meta)
    bits = [f"{name}: {cores} cores, local disk"]
    if scale:
        bits.append(f"scale {scale}")
    return ", ".join(bits)


def _title(fig, text: str, meta: dict | None) -> None:
    fig.suptitle(text + (f"\n{subtitle(meta)}" if meta is not None else ""), fontsize=11)


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
        # Counted over the whole file: a few free pages among 10^5 are too few to see in the grid.
        counts = d["type"].value_counts()
        tally = ", ".join(f"{t} {int(counts.get(t, 0)):,}" for t in types)
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
        ax.set_title(f"{name}: {shown}, {width} per row (page 0 top left)\npages by type: {tally}", fontsize=10)
        ax.grid(False)
    handles = [matplotlib.patches.Patch(color=PAGE_COLORS[t], label=t) for t in types]
    fig.legend(handles=handles, loc="lower center", ncol=len(types), bbox_to_anchor=(0.5, -0.02))
    _title(fig, "data.mdb pages by type (4 KiB each)", meta)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def record_sizes(records: pd.DataFrame, meta: dict | None = None, distinct: int = 12):
    """Value sizes per dataset (columns dataset, size): a bar per size in bytes when a dataset has
    at most ``distinct`` sizes (fixed-size records), else a histogram in KiB; the axes print plain
    numbers (no offset such as '+1.92e2')."""
    names = list(dict.fromkeys(records["dataset"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names):
        b = records.loc[records["dataset"] == name, "size"]
        counts = b.value_counts().sort_index()
        if len(counts) <= distinct:
            ax.bar(range(len(counts)), counts.to_numpy(), color="#2e86c1", width=0.6)
            ax.set_xticks(range(len(counts)), [f"{int(v):,}" for v in counts.index])
            ax.set_xlim(-0.8, len(counts) - 0.2)
            ax.set_xlabel("record (Datum) size (bytes)")
            sizes = (f"{int(counts.index[0]):,} B" if len(counts) == 1
                     else f"{len(counts)} sizes, {int(counts.index[0]):,}-{int(counts.index[-1]):,} B")
        else:
            sns.histplot(b / 1024, ax=ax, bins=40, color="#2e86c1")
            ax.set_xlabel("record (Datum) size (KiB)")
            sizes = f"mean {b.mean() / 1024:.1f} KiB"
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)
        if len(counts) > distinct:
            ax.ticklabel_format(axis="x", style="plain", useOffset=False)
        ax.set_ylabel("records")
        ax.set_title(f"{name}: {len(b):,} records, {sizes}", fontsize=10)
    _title(fig, "Record sizes", meta)
    fig.tight_layout()
    return fig


# --- 02 LMDB analysis --------------------------------------------------------------------------

def time_breakdown(summary: pd.DataFrame, meta: dict | None = None,
                   title: str = "LMDB: where one training iteration's time goes"):
    """Stacked bars of seconds per iteration (mean over ranks): I/O, waiting, allreduce, compute."""
    d = ok_rows(summary).copy()
    parts = {"read_s": ("I/O (read)", PHASE_COLORS["read"]), "wait_s": ("I/O wait", PHASE_COLORS["wait"]),
             "comm_s": ("gradient allreduce", PHASE_COLORS["allreduce"]),
             "compute_s": ("compute (emulated)", PHASE_COLORS["compute"])}
    for c in parts:
        d[c] = d[c] / d["iters"]
    m = d.groupby("nprocs")[list(parts)].mean()
    fig, ax = plt.subplots(figsize=(6.8, 4))
    x = np.arange(len(m))
    bottom = np.zeros(len(m))
    for c, (name, color) in parts.items():
        ax.bar(x, m[c] * 1e3, bottom=bottom, label=name, color=color, edgecolor="white", linewidth=0.5)
        bottom += m[c].to_numpy() * 1e3
    share = (m["read_s"] + m["wait_s"]) / m.sum(axis=1)
    for xi, tot, sh in zip(x, bottom, share):
        ax.annotate(f"I/O {sh:.0%}", (xi, tot), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [str(v) for v in m.index])
    ax.set_xlabel("processes")
    ax.set_ylabel("time per iteration (ms, mean over ranks)")
    ax.legend(bbox_to_anchor=(1.01, 1), loc="upper left", fontsize=8)
    ax.margins(y=0.12)
    _title(fig, title, meta)
    return fig


def contention(points: pd.DataFrame, meta: dict | None = None, variants: Sequence[str] = ("lmdb",)):
    """Problem 1: sleep time and context switches per iteration (summed over ranks) vs processes per node."""
    m = per_iteration(points[points["variant"].isin(variants)], "step", ["total"],
                      ["sleep_s", "vcsw", "ivcsw"])
    d, hue = _by_variant(m.assign(sleep_ms=m["sleep_s_sum"] * 1e3))
    switches = d.melt(id_vars=["variant", "nprocs"], value_vars=["vcsw_sum", "ivcsw_sum"],
                      var_name="switch", value_name="switches")
    switches["switch"] = switches["switch"].map({"vcsw_sum": "voluntary", "ivcsw_sum": "involuntary"})
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    sns.lineplot(data=d, x="nprocs", y="sleep_ms", marker="o", errorbar=None, ax=a1, **hue)
    sns.lineplot(data=switches, x="nprocs", y="switches", style="switch",
                 style_order=["voluntary", "involuntary"], markers=["o", "s"], errorbar=None, ax=a2, **hue)
    a1.set_ylabel("sleep time per iteration,\nsummed over ranks (ms)")
    a2.set_ylabel("context switches per iteration,\nsummed over ranks")
    a1.legend(fontsize=8)
    a2.legend(fontsize=7)
    for a in (a1, a2):
        _pow2_ticks(a, m["nprocs"])
        a.set_xlabel("processes per node")
        a.set_ylim(bottom=0)
    _title(fig, "Sleep and context switches during the timed iterations", meta)
    fig.tight_layout()
    return fig


def seek_cost(points: pd.DataFrame, meta: dict | None = None, variants: Sequence[str] = ("lmdb",)):
    """Problem 2: records a rank's cursor walks per iteration vs the records it keeps, vs processes."""
    d = points[points["variant"].isin(variants)]
    m = per_iteration(d, "reader", ["locate"], ["records_walked", "wall_s"])
    own = ok_rows(d).groupby(["variant", "nprocs"], as_index=False)["batch_size"].first()
    m = m.merge(own, on=["variant", "nprocs"])
    walked, hue_w = _by_variant(m, lambda v: f"{label(v)}: walked")
    timed, hue_t = _by_variant(m.assign(locate_ms=m["wall_s"] * 1e3))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    sns.lineplot(data=walked, x="nprocs", y="records_walked", marker="o", errorbar=None, ax=a1, **hue_w)
    sns.lineplot(data=timed, x="nprocs", y="locate_ms", marker="o", errorbar=None, ax=a2, **hue_t)
    keep = m.drop_duplicates("nprocs").sort_values("nprocs")
    a1.plot(keep["nprocs"], keep["batch_size"] / keep["nprocs"], "k:", label="records the rank keeps (B/P)")
    a1.set_ylabel("records per rank per iteration")
    a1.set_yscale("log", base=2)
    a2.set_ylabel("cursor locate time per rank\nper iteration (ms)")
    a2.set_ylim(bottom=0)
    for a in (a1, a2):
        _pow2_ticks(a, m["nprocs"])
        a.set_xlabel("processes")
        a.legend(fontsize=8)
    _title(fig, "Sequential access: every rank walks the whole batch to keep 1/P of it", meta)
    fig.tight_layout()
    return fig


def io_requests(points: pd.DataFrame, meta: dict | None = None,
                variants: Sequence[str] = ("lmdb", "lmdbio-lmm-dio")):
    """Problem 3: requests per iteration (page faults for mmap, preads for DIO) and their size."""
    m = requests_per_iteration(points[points["variant"].isin(variants)])
    kind = {True: "page faults", False: "pread calls"}
    count, hue_c = _by_variant(m, lambda v: f"{label(v)} ({kind[v in MMAP_VARIANTS]})")
    size, hue_s = _by_variant(m.assign(kib_per_request=m["bytes_per_request"] / 1024))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    sns.lineplot(data=count, x="nprocs", y="requests_sum", marker="o", errorbar=None, ax=a1, **hue_c)
    sns.lineplot(data=size, x="nprocs", y="kib_per_request", marker="o", errorbar=None, ax=a2, **hue_s)
    for a in (a1, a2):
        _pow2_ticks(a, m["nprocs"])
        a.set_yscale("log")
        a.set_xlabel("processes")
        a.legend(fontsize=8)
    a1.set_ylabel("requests per iteration, all ranks (log)")
    a2.set_ylabel("bytes delivered per request (KiB, log)")
    _title(fig, "Implicit small I/O: mmap page faults vs explicit reads", meta)
    fig.tight_layout()
    return fig


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


# --- the settings of a claim (notebooks 02-10) ----------------------------------------------------

SETTING_TITLES = {"local": "(a) local disk, measured", "gpfs": "(b) emulated GPFS, measured",
                  "throttled": "(b2) throttled block device, measured",
                  "shared": "(b3) shared throttled target, measured",
                  "model": "(c) papers' scale, model"}
#: The model panel's workloads: colour, line style and marker of each (one line per workload).
WORKLOAD_STYLES = {"cifar10-large-alexnet": ("#1f4e79", "-", "o"),
                   "imagenet-caffenet": ("#b9770e", "--", "s")}
_VERDICT_COLORS = {"yes": "#1e8449", "no": "#c0392b"}


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
    from . import claims as _claims
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


def claim_settings(claim, series: dict, verdicts: pd.DataFrame | None = None, meta: dict | None = None,
                   notes: dict | None = None, checks: pd.DataFrame | None = None):
    """A claim's quantity vs processes in its settings (:data:`SETTING_TITLES`), side by side, one legend.

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
    panels share one y axis; the model panel has its own.
    """
    from matplotlib.lines import Line2D

    from .claims import DATASET_OF

    notes = notes or {}
    n = len(SETTING_TITLES)
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 5.2))
    measured_axes = list(axes[:-1])
    for ax in measured_axes[1:]:
        ax.sharey(measured_axes[0])
        ax.tick_params(labelleft=False)
    color = "#1f4e79"
    workloads: list[str] = []

    def values(settings):
        return [v for s in settings if series.get(s) is not None
                for v in (*series[s]["lo"], *series[s]["hi"], *series[s]["value"])]
    vals = {"measured": values(list(SETTING_TITLES)[:-1]), "model": values(["model"])}
    for ax, setting in zip(axes, SETTING_TITLES):
        ax.set_title(SETTING_TITLES[setting], fontsize=10)
        ax.axhline(claim.threshold, color="#555", ls="--", lw=1)
        d = series.get(setting)
        rows = verdicts[verdicts["setting"] == setting] if verdicts is not None else pd.DataFrame()
        rows = rows[~_is_check(rows)] if len(rows) else rows
        under = []
        if d is None or d.empty:
            unmeasured = len(rows) and rows["verdict"].iloc[0] == "not measured"
            text = "\n".join(textwrap.wrap(rows["why"].iloc[0].split(" [committed")[0], 40)) if unmeasured \
                else "no results"
            ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#888",
                    fontsize=8 if unmeasured else None,
                    bbox=dict(facecolor="white", edgecolor="none") if unmeasured else None)
            ax.set_xticks([])
        else:
            if setting == "model" and "workload" in d.columns:
                known = list(WORKLOAD_STYLES)
                lines = sorted(d.groupby("workload", sort=False),
                               key=lambda kv: known.index(kv[0]) if kv[0] in known else len(known))
            else:
                lines = [(None, d)]
            stars = []
            for k, (w, g) in enumerate(lines):
                g = g.sort_values("nprocs")
                c, ls, mk = WORKLOAD_STYLES.get(w, (f"C{k}", "-", "o")) if w else (color, "-", "o")
                lo = (g["value"] - g["lo"]).clip(lower=0).fillna(0)
                hi = (g["hi"] - g["value"]).clip(lower=0).fillna(0)
                ax.errorbar(g["nprocs"], g["value"], yerr=[lo, hi], color=c, ls=ls, marker=mk, capsize=3,
                            lw=1.6, label=f"{w} (bar at the largest P: 5-95% band)" if w else None, zorder=3 + k)
                r = rows
                if w is not None and len(rows) and "dataset" in rows:
                    r = rows[rows["dataset"] == DATASET_OF.get(w, w)]
                if len(r) and np.isfinite(r["value"].iloc[0]):
                    row = r.iloc[0]
                    v = row["verdict"]
                    vc = _VERDICT_COLORS.get(v, "#888")
                    ax.plot([row["nprocs"]], [row["value"]], marker="*", ms=16, ls="none", color=vc,
                            markeredgecolor=c, zorder=6)
                    mag = str(row.get("magnitude", "") or "")
                    word = v + (f", {mag}" if mag in ("smaller", "larger", "reproduced", "consistent",
                                                      "uninformative") else "")
                    if w is not None:
                        word = f"{DATASET_OF.get(w, w)}: {word}"
                    stars.append((float(row["value"]), row["nprocs"], word, vc))
                    under.append(("" if w is None else f"{DATASET_OF.get(w, w)}: ") + judgement(claim, row))
            # The highest judged point's label above it, the others' below theirs.
            for i, (v, p, word, vc) in enumerate(sorted(stars, key=lambda t: -t[0])):
                ax.annotate(word, (p, v), textcoords="offset points", xytext=(-10, 10 if i == 0 else -12),
                            va="bottom" if i == 0 else "top", ha="right", fontsize=9, fontweight="bold",
                            color=vc, zorder=7, bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1))
            if setting == "model":
                ax.set_xscale("log")
                ps = sorted(set(int(p) for p in d["nprocs"]))
                ax.set_xticks([p for p in ps[::3] if p * 4 <= ps[-1]] + [ps[-1]])
                ax.get_xaxis().set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:,.0f}"))
                ax.minorticks_off()
                for w, _ in lines:
                    if w is not None and w not in workloads:
                        workloads.append(w)
            else:
                _pow2_ticks(ax, d["nprocs"])
        ax.set_xlabel("processes (log)" if setting == "model" else "processes")
        if setting in notes:
            under.append(f"({notes[setting]})")
        texts = [("\n".join(line for t in under for line in textwrap.wrap(t, 50)), "#333")]
        if setting == "model":
            status, failed = _model_status(_axis_checks(verdicts, checks))
            texts.append(("\n".join(textwrap.wrap(status, 50)), "#a93226" if failed else "#333"))
        below = ax.xaxis.label
        for text, c in texts:
            if text:
                below = ax.annotate(text, xy=(0, 0), xycoords=("axes fraction", below), xytext=(0, -4),
                                    textcoords="offset points", fontsize=8, color=c, va="top", ha="left")
    for ax in (measured_axes[0], axes[-1]):
        ax.margins(y=0.22)  # room for a judged point's label above it
    for ax, key in ((measured_axes[0], "measured"), (axes[-1], "model")):
        if _log_scale(vals[key], claim.threshold):
            ax.set_yscale("log")
            _log_ticks(ax)
    ylabel = "\n".join(textwrap.wrap(claim.ylabel or claim.short, 34))
    axes[0].set_ylabel(ylabel)
    axes[-1].set_ylabel("predicted (own scale)", fontsize=9)
    handles = [Line2D([], [], color=color, marker="o", label="median of repeats (bars: min-max)"),
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
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=8,
               bbox_to_anchor=(0.5, -0.04))
    name, cores, scale = _host(meta or {})
    factor = (f"; the paper's factor {_factor(claim, claim.paper_factor)}" if claim.paper_factor
              else "; the paper states no factor")
    fig.suptitle(f"{claim.id}: {claim.statement}{factor}\n(a)-(b3) measured on {name} ({cores} cores), "
                 f"scale {scale or '?'}; (c) predicted by lmdbio.lab.model (notebook 11); under each panel: "
                 "the judged value, its range, the direction and the magnitude against the paper", fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


# --- beyond the papers (notebook 12) ---------------------------------------------------------------

#: Typed figure text with a number or a comparison word: phrase -> its source
#: (checked by lmdbio.lab.lessons.figtext; text computed from the results needs none).
STATIC: dict[str, str] = {
    "5-95% band": "the model's band: 5-95% of the joint samples (lmdbio.lab.model.uncertainty)",
    "smaller": "lmdbio.lab.claims.magnitude's word, matched against claims.csv's magnitude column",
    "larger": "lmdbio.lab.claims.magnitude's word, matched against claims.csv's magnitude column",
}

#: Notebook 12's epoch-throughput series, in legend order (the shard mode only where measured).
SERIES_12 = ("auto, file order", "auto, shuffled", "auto, shuffled (shard)", "lmdb-get, shuffled")


#: Notebook 12's decoding series and their names in panel (d).
DECODE_SERIES = {"raw": "raw read", "decoded": "decoded", "dali-caffe": "DALI"}


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
        from .beyond import TARGETS   # the prefetch target is 1 - the I/O share

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
