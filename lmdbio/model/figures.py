"""Figures of the scale model (notebook 11): calibration, validation, the predicted headline figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..plots import VARIANT_COLORS, VARIANTS, PHASE_COLORS, label
from .predict import PHASES

__all__ = ["calibration_figure", "validation_figure", "prediction_figure", "phases_figure"]

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
        ax.fill_between(x, x * 0.75, x * 1.25, color="#ecf0f1", label="±25%")
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
        ax.set_title(pnl)
        ax.set_xlabel("measured (s, median of repeats; bars: min-max)")
    axes[0][0].set_ylabel("predicted (s)")
    axes[0][-1].legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.suptitle("Validation: the model against sweeps it was not fitted to", fontsize=11)
    return fig


def prediction_figure(pred, platform: str = ""):
    """The poster's headline figure, predicted: log time vs processes, seven series per workload."""
    wls = list(dict.fromkeys(pred["workload"]))
    fig, axes = plt.subplots(1, len(wls), figsize=(5.2 * len(wls) + 1.8, 4.4), squeeze=False)
    for ax, w in zip(axes[0], wls):
        d = pred[pred["workload"] == w]
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
        ax.set_title(f"{w}, {it} iterations")
        ax.set_xlabel("number of processes")
    axes[0][0].set_ylabel("predicted training time (s, log)")
    axes[0][-1].legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.suptitle(f"Predicted: overall training time vs processes ({platform})", fontsize=11)
    return fig


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
