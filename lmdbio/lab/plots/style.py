"""The figures' one style: a fixed colour and marker per variant, setup, save, load and titles."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from lmdbio.options import EXTRA_VARIANTS, VARIANTS

from ..tables import label

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


