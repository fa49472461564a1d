"""Tables of the shared-target sweep (benchmarks/run_shared_sweep.sh): per variant, per P, per k.

Reads ``OUT/cifar10-cold-k*/{summary.csv, s_counters.csv, meta.json}`` and writes
``OUT/table.csv`` (median records/s, the repeats' spread, the ratio to LMDB and S's
requests), ``OUT/two_k.csv`` (the ratios to LMDB at each P run at two time scales and
their difference) and ``OUT/note.md`` (both as Markdown).

Usage: python benchmarks/shared_report.py data/results/shared
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

ORDER = ["raw", "lmdb", "lmdb-get", "lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio",
         "lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag"]


def _load(run: Path) -> pd.DataFrame:
    s = pd.read_csv(run / "summary.csv")
    s = s[s["status"] == "ok"]
    meta = json.loads((run / "meta.json").read_text())
    k = float(meta["config"]["pfs"]["profile"]["time_scale"])
    c = pd.read_csv(run / "s_counters.csv") if (run / "s_counters.csv").exists() else None
    g = s.groupby(["nprocs", "variant"])["records_per_s"]
    t = pd.DataFrame({"repeats": g.size(), "records_per_s": g.median(),
                      "spread": (g.max() - g.min()) / g.median()}).reset_index()
    t.insert(0, "k", k)
    if c is not None:
        cg = c.groupby(["nprocs", "variant"])
        extra = pd.DataFrame({
            "budget_MBps": cg["s_budget_bps"].median() / 1e6,
            "budget_iops": cg["s_budget_iops"].median(),
            "s_ios": cg["timed_s_ios"].median(),
            "s_MB": cg["timed_s_bytes"].median() / 1e6,
            "s_KiB_per_io": cg["timed_s_mean_bio_bytes"].median() / 1024,
            "s_dev_requests": cg["timed_s_dev_requests"].median(),
            "s_point_ios": cg["point_s_ios"].median(),
        }).reset_index()
        t = t.merge(extra, on=["nprocs", "variant"], how="left")
    lmdb = t[t["variant"] == "lmdb"].set_index("nprocs")["records_per_s"]
    t["vs_lmdb"] = t["records_per_s"] / t["nprocs"].map(lmdb)
    # the time the timed batches spent, against what S's budget allows for its requests and bytes
    if "s_ios" in t:
        wall = s.groupby(["nprocs", "variant"])["wall_s"].median().rename("wall_s").reset_index()
        t = t.merge(wall, on=["nprocs", "variant"], how="left")
        t["s_bound_s"] = pd.concat([t["s_ios"] / t["budget_iops"],
                                    t["s_MB"] / t["budget_MBps"]], axis=1).max(axis=1)
        t["s_busy"] = t["s_bound_s"] / t["wall_s"]
    t["order"] = t["variant"].map({v: i for i, v in enumerate(ORDER)}).fillna(99)
    return t.sort_values(["nprocs", "order"]).drop(columns="order")


def _md(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        out.append("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v)
                                      for v in r) + " |")
    return "\n".join(out)


def main(out: str) -> int:
    out = Path(out)
    runs = sorted(p for p in out.glob("cifar10-cold-k*") if (p / "summary.csv").exists())
    if not runs:
        print(f"no cifar10-cold-k*/summary.csv under {out}", file=sys.stderr)
        return 1
    table = pd.concat([_load(r) for r in runs], ignore_index=True)
    table.to_csv(out / "table.csv", index=False)
    ks = sorted(table["k"].unique())
    two = pd.DataFrame()
    if len(ks) >= 2:
        a, b = ks[0], ks[1]
        ta = table[table["k"] == a].set_index(["nprocs", "variant"])["vs_lmdb"]
        tb = table[table["k"] == b].set_index(["nprocs", "variant"])["vs_lmdb"]
        both = ta.index.intersection(tb.index)
        two = pd.DataFrame({f"vs_lmdb_k{a:g}": ta[both], f"vs_lmdb_k{b:g}": tb[both]})
        two["rel_diff"] = (two.iloc[:, 1] - two.iloc[:, 0]) / two.iloc[:, 0]
        two["within_10pct"] = two["rel_diff"].abs() <= 0.10
        two = two.reset_index()
        two.to_csv(out / "two_k.csv", index=False)
    cols = ["k", "nprocs", "variant", "repeats", "records_per_s", "spread", "vs_lmdb",
            "s_ios", "s_KiB_per_io", "s_busy"]
    text = ["# Shared storage target: cifar10, cold, 4 ranks per virtual node", "",
            "Medians over repeats; `spread` = (max - min) / median of records/s over the repeats; "
            "`vs_lmdb` = ratio of medians to LMDB at the same P and k; `s_ios` = requests the "
            "blkio rule charged on S in the timed batches, `s_KiB_per_io` their mean size; "
            "`s_busy` = the time S's budget needs for those requests and bytes over the timed "
            "wall time (near 1: storage-bound).", "",
            _md(table[[c for c in cols if c in table]])]
    wide = table[table["spread"] > 0.05]
    text += ["", f"Repeats agreeing within 5%: {len(table) - len(wide)} of {len(table)} points; "
             "wider: " + (", ".join(f"{r.variant} P={r.nprocs} k={r.k:g} ({r.spread:.0%})"
                                   for r in wide.itertuples()) or "none") + "."]
    failed = []
    for r in runs:
        s = pd.read_csv(r / "summary.csv")
        for f in s[s["status"] != "ok"].itertuples():
            failed.append(f"{r.name}: {f.variant} P={f.nprocs} repeat {f.repeat}: "
                          f"{str(f.error).splitlines()[0]}")
    if failed:
        text += ["", "Failed points (left out of the medians):", ""] + [f"- {x}" for x in failed]
    if len(two):
        text += ["", "## Two time scales", "", _md(two)]
    (out / "note.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "data/results/shared"))
