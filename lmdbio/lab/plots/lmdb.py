"""Figures of notebooks 00-02: the machine, the datasets' pages and records, LMDB's costs."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..tables import (
    MMAP_VARIANTS,
    label,
    ok_rows,
    per_iteration,
    requests_per_iteration,
)
from .style import PAGE_COLORS, PHASE_COLORS, _by_variant, _pow2_ticks, _title

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


