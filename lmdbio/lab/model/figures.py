"""Figures of the scale model (notebook 11): calibration, validation, the predicted headline figure."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from ..plots import VARIANT_COLORS, VARIANTS, PHASE_COLORS, label
from .predict import PHASES
from .validate import CRITERION

__all__ = ["calibration_figure", "validation_figure", "prediction_figure", "phases_figure",
           "verdict_map_figure", "error_distance_figure", "SETTING_MARKERS"]

_COSTS = (("cursor_step_s", "cursor step"), ("page_fault_s", "minor fault / page"),
          ("copy_record_s", "copy / record"), ("pread_call_s", "pread / call"),
          ("plan_record_s", "plan / record"), ("handoff_s", "futex hand-off"),
          ("member_batch_s", "member batch"), ("mpi_alpha_s", "MPI message"),
          ("disk_latency_s", "cold 4 KiB read"))


def calibration_figure(cal):
    """Per-operation costs measured on this machine (log scale)."""
    names = [n for _, n in _COSTS] + [f"read_batch {v.replace('lmdbio-', '')}" for v in cal.batch_s]
    vals = [getattr(cal, k) for k, _ in _COSTS] + list(cal.batch_s.values())
    fig, ax = plt.subplots(figsize=(7.4, 4.6))
    ax.barh(names, vals, color="#2e86c1")
    ax.set_xscale("log")
    ax.set_xlabel("seconds (log)")
    ax.invert_yaxis()
    per_byte = (f"memcpy {1 / cal.memcpy_byte_s / 1e9:.1f} GB/s, pread {1 / cal.pread_byte_s / 1e9:.1f} GB/s, "
                f"MPI {1 / cal.mpi_beta_s / 1e9:.1f} GB/s, disk {cal.disk_bw / 1e9:.2f} GB/s")
    d = getattr(cal, "pfs_inflight", float("nan"))
    per_byte += (f"\nexplicit-read depth on the emulated GPFS (FUSE): {d:.2f} requests in flight"
                 if d == d else "\nexplicit-read depth on the emulated GPFS: not measured (no FUSE)")
    fig.suptitle(f"Calibration: CPU-side costs on this machine ({cal.cores} cores)\n{per_byte}",
                 fontsize=9)
    return fig


def validation_figure(df):
    """Predicted vs measured time of every validation point, one panel per setting x cache."""
    d = df.copy()
    where = d["setting"] if "setting" in d.columns else d["storage"]
    d["panel"] = where.astype(str).str.replace(" (shares the storage model)", "\n(shares the storage model)",
                                               regex=False) + ", " + d["cache"].astype(str)
    panels = sorted(set(d["panel"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 1.8, 4.2), squeeze=False)
    for ax, pnl in zip(axes[0], panels):
        g = d[d["panel"] == pnl]
        lo = min(g["measured_s"].min(), g["predicted_s"].min()) * 0.7
        hi = max(g["measured_s"].max(), g["predicted_s"].max()) * 1.4
        x = np.array([lo, hi])
        ax.fill_between(x, x * (1 - CRITERION), x * (1 + CRITERION), color="#ecf0f1", label=f"±{CRITERION:.0%}")
        ax.plot(x, x, color="#7f8c8d", lw=1)
        for v in VARIANTS:
            gv = g[g["variant"] == v]
            if len(gv):
                ax.errorbar(gv["measured_s"], gv["predicted_s"],
                            xerr=[gv["measured_s"] - gv["measured_min_s"], gv["measured_max_s"] - gv["measured_s"]]
                            if "measured_min_s" in gv else None,
                            fmt="o", ms=4, color=VARIANT_COLORS[v], label=label(v), capsize=1.5, lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_title(pnl, fontsize=10)
        # Under a decade the log axes' minor labels ('2 x 10^-1 3 x 10^-1 ...') run into each other.
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            if hi / lo < 100:
                axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axes[0][0].set_ylabel("predicted (s)")
    axes[0][-1].legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.supxlabel("measured (s, median of repeats; bars: min-max)", fontsize=10)
    fig.suptitle("Validation: the model against sweeps it was not fitted to", fontsize=11)
    fig.tight_layout()
    return fig


def prediction_figure(pred, platform: str = "", axis=(10.0, 100000.0)):
    """The poster's headline figure, predicted: log time vs processes, seven series per workload
    and batch reading; the poster's time axis (10-100,000 s) shaded on the CIFAR10-Large panels."""
    pred = pred if "batch" in pred.columns else pred.assign(batch="global")
    panels = list(dict.fromkeys(zip(pred["workload"], pred["batch"])))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels) + 1.8, 4.4), squeeze=False,
                             sharey=True)
    for ax, (w, b) in zip(axes[0], panels):
        d = pred[(pred["workload"] == w) & (pred["batch"] == b)]
        if w.startswith("cifar10") and axis:
            ax.axhspan(*axis, color="#eafaf1", zorder=0, label="poster's axis")
        for v in VARIANTS:
            g = d[d["variant"] == v].sort_values("nprocs")
            if len(g):
                ax.plot(g["nprocs"], g["total_s"], "o-", ms=3, color=VARIANT_COLORS[v], label=label(v))
        ps = sorted(set(d["nprocs"]))
        ax.set_xscale("log", base=2)
        ax.set_xticks(ps)
        ax.set_xticklabels([str(p) for p in ps], rotation=60, fontsize=7)
        ax.minorticks_off()
        ax.set_yscale("log")
        it = int(d["iterations"].iloc[0])
        per = "global batch" if b == "global" else "batch per process"
        ax.set_title(f"{w}, {it} iterations\n{per}", fontsize=9)
        ax.set_xlabel("number of processes")
    axes[0][0].set_ylabel("predicted training time (s, log)")
    axes[0][-1].legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.suptitle(f"Predicted: overall training time vs processes ({platform})", fontsize=11, y=1.04)
    return fig


def verdict_map_figure(maps):
    """Each verdict map: the ratio over a grid of two estimates (the others central; a third, a
    switch, at each end in its own panel), coloured on one scale around the threshold (green
    above, red below), with the threshold's contour where the grid crosses it."""
    from matplotlib.colors import TwoSlopeNorm

    maps = maps.assign(z_estimate=maps["z_estimate"].fillna("") if "z_estimate" in maps else "",
                       z=maps["z"] if "z" in maps else float("nan"))
    keys = list(dict.fromkeys(zip(maps["claim"], maps["z"].fillna(-1))))
    # One colour scale for every panel: log10(ratio / threshold), 0 at the threshold.
    rel = np.log10(maps["ratio"].to_numpy(float) / maps["threshold"].to_numpy(float))
    lim = max(0.3, float(np.nanmax(np.abs(rel))))
    norm = TwoSlopeNorm(vmin=-lim, vcenter=0.0, vmax=lim)
    fig, axes = plt.subplots(1, len(keys), figsize=(3.9 * len(keys) + 1.2, 4.6), squeeze=False,
                             constrained_layout=True)
    im = None
    for ax, (k, zv) in zip(axes[0], keys):
        g = maps[(maps["claim"] == k) & (maps["z"].fillna(-1) == zv)]
        thr = float(g["threshold"].iloc[0])
        t = g.pivot_table(index="y", columns="x", values="ratio")
        xs, ys = t.columns.to_numpy(float), t.index.to_numpy(float)
        z = np.log10(t.to_numpy(float) / thr)
        im = ax.pcolormesh(xs, ys, z, shading="nearest", cmap="RdYlGn", norm=norm)
        if z.min() < 0 < z.max() and len(xs) > 1 and len(ys) > 1:
            cs = ax.contour(xs, ys, z, levels=[0.0], colors="k", linewidths=1.5)
            ax.clabel(cs, fmt={0.0: f"{thr:g}x"}, fontsize=8)
        for (yi, xi), v in np.ndenumerate(t.to_numpy(float)):
            ax.text(xs[xi], ys[yi], f"{v:.3g}", ha="center", va="center", fontsize=6, zorder=3)
        ax.set_xlabel(g["x_estimate"].iloc[0], fontsize=8)
        ax.set_ylabel(g["y_estimate"].iloc[0], fontsize=8)
        if len(ys) and ys.min() > 0 and ys.max() / ys.min() >= 4:
            ax.set_yscale("log")
        w, p = g["workload"].iloc[0], int(g["nprocs"].iloc[0])
        side = "above" if z.min() >= 0 else "below" if z.max() < 0 else "on both sides of"
        zname = g["z_estimate"].iloc[0]
        ztxt = f"\n{zname} = its {'low' if zv == 0 else 'high'} end" if zname else ""
        ax.set_title(f"{k}: {SHORT_FAST.get(g['fast'].iloc[0], g['fast'].iloc[0])} / LMDB, {w}\n"
                     f"P = {p:,}: grid {side} {thr:g}x{ztxt}", fontsize=8)
    cb = fig.colorbar(im, ax=axes[0].tolist(), shrink=0.85)
    cb.set_label("log10(ratio / threshold): green above, red below", fontsize=8)
    fig.suptitle("Verdict maps: the ratio over the estimates that decide it (every other estimate central)",
                 fontsize=10)
    return fig


SHORT_FAST = {"lmdbio-lmm-dio-prov-coal-stag": "full stack", "lmdbio-lmm": "LMM", "lmdbio-lmm-dm": "DM"}


def phases_figure(pred, workload: str, procs):
    """Per-iteration time of each variant split into phases, at a few process counts."""
    d = pred[pred["workload"] == workload]
    procs = [p for p in procs if p in set(d["nprocs"])]
    fig, axes = plt.subplots(1, len(procs), figsize=(3.2 * len(procs) + 3.2, 4.4), squeeze=False,
                             sharey=True)
    colors = {**PHASE_COLORS, "communicate": PHASE_COLORS["allreduce"]}
    for ax, p in zip(axes[0], procs):
        g = d[d["nprocs"] == p].set_index("variant").reindex([v for v in VARIANTS if v in set(d["variant"])])
        left = np.zeros(len(g))
        for ph in PHASES:
            vals = g[f"{ph}_s"].to_numpy()
            ax.barh([label(v).replace("LMDBIO-", "") for v in g.index], vals, left=left,
                    color=colors.get(ph, "#999999"), label=ph)
            left += vals
        ax.set_title(f"P = {p}")
        ax.set_xlabel("s per iteration")
    axes[0][0].invert_yaxis()
    axes[0][-1].legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.suptitle(f"Where the time goes, predicted ({workload})", fontsize=11)
    return fig


#: One marker per validation setting (error_distance_figure); a setting not listed gets "o".
SETTING_MARKERS = {"local disk": "o", "throttled block device": "s", "shared storage target": "D",
                   "emulated GPFS (shares the storage model)": "^",
                   "time-dilated emulated GPFS (shares the storage model)": "v"}
_SOURCE_STYLE = {"calibrated": dict(color="#5d6d7e", s=16, alpha=0.55, edgecolors="none"),
                 "held-out": dict(color="#c0392b", s=46, alpha=0.9, edgecolors="black", linewidths=0.6)}


def error_distance_figure(pts):
    """|signed error| of every validation and held-out point against its distance from the
    calibration: P over the largest calibrated P of its setting, ranks per node, and the measured
    mean bytes per storage request (only where the storage counted its requests).

    ``pts``: :func:`lmdbio.lab.model.criterion.points`. Marker: the setting; colour: calibrated or
    held-out. Each variant's points are nudged sideways by a few percent so equal x stay visible.
    """
    axes_of = (("p_relative", "P / largest calibrated P of its setting"),
               ("ranks_per_node", "ranks per node"),
               ("bytes_per_request", "measured mean bytes per storage request"))
    fig, axes = plt.subplots(1, 3, figsize=(14.0, 4.6), sharey=True)
    nudge = {v: 2 ** (0.05 * (i - 3)) for i, v in enumerate(VARIANTS)}
    for ax, (col, xlabel) in zip(axes, axes_of):
        d = pts[pts[col].notna()]
        for (src, st), g in d.groupby(["source", "setting"], sort=False):
            ax.scatter(g[col] * g["variant"].map(nudge).fillna(1.0), g["rel_error"].abs(),
                       marker=SETTING_MARKERS.get(st, "o"), **_SOURCE_STYLE.get(src, {}))
        ax.axhline(CRITERION, color="#7f8c8d", lw=1, ls="--")
        if col == "bytes_per_request":
            ax.set_xscale("log")
        else:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel(xlabel)
        left = pts[pts[col].isna()]
        where = ", ".join(sorted({f"{s} {st}" for s, st in zip(left["source"], left["setting"])}))
        ax.set_title(f"{len(d)} points; not drawn, {len(left)} without this quantity:\n{where}"
                     if len(left) else f"all {len(d)} points", fontsize=8 if len(left) else 9)
    axes[0].axvline(1.0, color="#7f8c8d", lw=1, ls=":")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("|relative error| (predicted - measured) / measured")
    handles = [plt.Line2D([], [], ls="", marker=m, color="#5d6d7e", label=st)
               for st, m in SETTING_MARKERS.items() if st in set(pts["setting"])]
    handles += [plt.Line2D([], [], ls="", marker="o", color=s["color"], label=f"{src} points")
                for src, s in _SOURCE_STYLE.items() if src in set(pts["source"])]
    handles.append(plt.Line2D([], [], color="#7f8c8d", ls="--", label=f"criterion, {CRITERION:.0%}"))
    axes[-1].legend(handles=handles, fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.suptitle("Error against distance from the calibration: every validation and held-out point",
                 fontsize=11)
    fig.tight_layout()
    return fig
