"""The time-dilated emulated-GPFS sweep (issue 19, part 3): summary, ratios and where they hold still.

Reads every ``lmdbio bench`` results folder under --work (one per time scale
k and process list, as benchmarks/run_dilated_sweep.sh writes them), and
writes to --out:

- ``summary.csv``: every run's ``lmdbio bench`` summary rows (one per
  point and repeat, the bench's columns) with a ``time_scale`` column: the
  rows the scale model's validation reads (``lmdbio model validate``);
- ``ratios.csv``: one row per (time_scale, nprocs, variant): median,
  min and max records/s over the repeats, the repeats, and the ratio to
  ``lmdb`` (median of the per-repeat ratios, with min and max);
- ``convergence.csv``: per (nprocs, variant), the ratio at each k and the
  smallest k from which it stays within --tolerance of the ratio at the
  largest k ("held still"), or "moving" where even the last step moves;
- ``meta.json``; and ``figures/dilated.png`` (ratio to lmdb against k).

A ratio that stops moving as k grows is one this machine's CPU no longer
decides; the ratios at the largest k are the emulated GPFS's answer.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def load(work: Path) -> pd.DataFrame:
    frames = []
    for summary in sorted(work.glob("*/summary.csv")):
        meta = json.loads(summary.with_name("meta.json").read_text())
        pfs = meta["config"].get("pfs") or {}
        k = (pfs.get("profile") or {}).get("time_scale")
        if k is None:
            raise SystemExit(f"{summary.parent}: meta.json has no pfs profile time_scale")
        df = pd.read_csv(summary)
        frames.append(df.assign(time_scale=float(k), run=summary.parent.name,
                                git_commit=meta.get("git_commit")))
    if not frames:
        raise SystemExit(f"no results under {work} (run benchmarks/run_dilated_sweep.sh first)")
    return pd.concat(frames, ignore_index=True)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    ok = df[df["status"] == "ok"]
    base = ok[ok["variant"] == "lmdb"][["time_scale", "nprocs", "repeat", "records_per_s"]]
    ok = ok.merge(base.rename(columns={"records_per_s": "lmdb_records_per_s"}),
                  on=["time_scale", "nprocs", "repeat"], how="left")
    ok = ok.assign(ratio_vs_lmdb=ok["records_per_s"] / ok["lmdb_records_per_s"])
    g = ok.groupby(["time_scale", "nprocs", "variant"])
    out = g.agg(repeats=("records_per_s", "size"),
                records_per_s=("records_per_s", "median"),
                records_per_s_min=("records_per_s", "min"),
                records_per_s_max=("records_per_s", "max"),
                ratio_vs_lmdb=("ratio_vs_lmdb", "median"),
                ratio_vs_lmdb_min=("ratio_vs_lmdb", "min"),
                ratio_vs_lmdb_max=("ratio_vs_lmdb", "max"),
                pfs_requests=("pfs_requests", "median"),
                pfs_mean_request_bytes=("pfs_mean_request_bytes", "median"),
                first_batch_s=("first_batch_s", "median")).reset_index()
    failed = df[df["status"] != "ok"].groupby(["time_scale", "nprocs", "variant"]).size()
    out["failed"] = [int(failed.get((k, p, v), 0)) for k, p, v in
                     zip(out["time_scale"], out["nprocs"], out["variant"])]
    return out


def convergence(summary: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    rows = []
    for (p, v), g in summary.groupby(["nprocs", "variant"]):
        g = g[np.isfinite(g["ratio_vs_lmdb"])].sort_values("time_scale")   # a k without lmdb: no ratio
        if g.empty:
            continue
        ks, r = g["time_scale"].to_numpy(), g["ratio_vs_lmdb"].to_numpy()
        row = {"nprocs": p, "variant": v, **{f"ratio_k{k:g}": x for k, x in zip(ks, r)}}
        if len(ks) < 2 or not np.isfinite(r[-1]):
            row["held_still_from_k"], row["verdict"] = np.nan, "one time scale only"
        else:
            within = np.abs(r / r[-1] - 1) <= tolerance
            first = len(ks) - 1
            while first > 0 and within[first - 1]:
                first -= 1
            row["held_still_from_k"] = ks[first] if first < len(ks) - 1 else np.nan
            row["verdict"] = (f"holds still from k = {ks[first]:g}" if first < len(ks) - 1
                              else f"still moving between k = {ks[-2]:g} and {ks[-1]:g}")
        row["answer_k"], row["answer_ratio"] = ks[-1], r[-1]
        rows.append(row)
    return pd.DataFrame(rows)


def plot(summary: pd.DataFrame, figure: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    d = summary[~summary["variant"].isin(["lmdb"])]
    procs = sorted(d["nprocs"].unique())
    order = sorted(d["variant"].unique(), key=lambda v: (v != "raw", len(v), v))
    palette = dict(zip(order, sns.color_palette("tab10", len(order))))
    fig, axes = plt.subplots(1, len(procs), figsize=(4.2 * len(procs) + 2.5, 4), sharey=True, squeeze=False)
    for ax, p in zip(axes[0], procs):
        sns.lineplot(d[d["nprocs"] == p], x="time_scale", y="ratio_vs_lmdb", hue="variant", hue_order=order,
                     palette=palette, marker="o", ax=ax, legend=(p == procs[0]))
        ax.set(xscale="log", yscale="log", title=f"P = {p}", xlabel="time scale k (storage k times slower)",
               ylabel="records/s relative to lmdb")
        ax.axhline(1, color="grey", lw=0.8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    axes[0][0].get_legend().remove()
    fig.legend(handles, labels, loc="center right", fontsize=8, title="variant")
    fig.subplots_adjust(right=0.8)
    fig.suptitle("Emulated GPFS (gpfs-2017), cold cifar10, B = 256, 4 ranks per virtual node: "
                 "a ratio that stops moving with k is one the CPU no longer decides", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.82, 1))
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=str(ROOT / "build/dilated-sweep"))
    ap.add_argument("--out", default=str(ROOT / "data/results/dilated"))
    ap.add_argument("--figure", default=str(ROOT / "figures/dilated.png"))
    ap.add_argument("--tolerance", type=float, default=0.15,
                    help="a ratio within this fraction of its value at the largest k holds still")
    a = ap.parse_args(argv)
    from lmdbio.lab.meta import results_meta

    df = load(Path(a.work))
    summary = summarize(df)
    conv = convergence(summary, a.tolerance)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df.drop(columns=["run", "git_commit"]).to_csv(out / "summary.csv", index=False, float_format="%.6g")
    summary.to_csv(out / "ratios.csv", index=False, float_format="%.6g")
    conv.to_csv(out / "convergence.csv", index=False, float_format="%.4g")
    (out / "meta.json").write_text(json.dumps(results_meta({
        "runs": sorted(df["run"].unique()), "tolerance": a.tolerance,
        "sweep_commits": sorted(df["git_commit"].dropna().unique()),
        "script": "benchmarks/run_dilated_sweep.sh"}), indent=2, default=str) + "\n")
    pd.set_option("display.width", 200)
    print(summary.pivot_table(index=["nprocs", "variant"], columns="time_scale",
                              values="ratio_vs_lmdb").round(2).to_string())
    print(conv.round(2).to_string(index=False))
    plot(summary, Path(a.figure))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
