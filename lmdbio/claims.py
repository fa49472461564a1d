"""The papers' eight claims, each with a quantity and an explicit criterion, judged from results files.

Every claim is judged in three settings, each from its own results folder
under ``results_root/NN_name/``:

- ``local``: measured on this machine's local disk (``summary.csv`` or ``rows.csv``);
- ``gpfs``: measured through the emulated GPFS, ``lmdbio.pfs`` (``gpfs/``);
- ``model``: the calibrated model at the papers' scale, ``lmdbio.model`` (``model/``).

The quantity is always taken at the setting's largest process count (cold
cache). Nothing here is fitted: the thresholds are the claims' own words
made explicit ("faster" needs at least 1.2x, noise on this machine is about
+-20%), and the papers' factors appear only in ``paper``.

``python -m lmdbio.claims`` writes ``data/results/claims.csv`` (columns
``claim, setting, measured, criterion, verdict, why``, then details) and the
table between the markers in ``figures/README.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .scales import COMMITTED_RESULTS, REPO

__all__ = ["Claim", "CLAIMS", "claim", "SETTINGS", "SETTING_LABELS", "COLUMNS", "setting_dir", "resolve",
           "series",
           "evaluate", "write", "render", "show", "readme_table", "update_readme",
           "TRAINING", "main"]

SETTINGS = ("local", "gpfs", "model")
SETTING_LABELS = {"local": "local disk, measured", "gpfs": "emulated GPFS, measured",
                  "model": "papers' scale, model"}
COLUMNS = ["claim", "setting", "measured", "criterion", "verdict", "why"]
DETAILS = ["paper", "notebook", "quantity", "nprocs", "value", "threshold", "source"]
README = REPO / "figures" / "README.md"
MARK_START = "<!-- claims.csv: rendered by `python -m lmdbio.claims`; do not edit by hand -->"
MARK_END = "<!-- end of claims.csv -->"
FULL = "lmdbio-lmm-dio-prov-coal-stag"


# --- the quantities: one function per kind of data, each returning (nprocs, value, lo, hi) ------

def _ok(df: pd.DataFrame) -> pd.DataFrame:
    if "status" in df.columns:
        df = df[df["status"].fillna("ok") == "ok"]
    return df


def _summary(d: Path) -> pd.DataFrame | None:
    f = d / "summary.csv"
    if not f.exists():
        return None
    df = _ok(pd.read_csv(f))
    return df[df["cache"] == "cold"] if "cache" in df.columns else df


def _per_repeat_ratio(df: pd.DataFrame, slow: str, fast: str, col: str, dataset: str | None) -> pd.DataFrame:
    """fast/slow of ``col`` (higher is better) per P: ratio of medians, min and max over repeats."""
    if dataset is not None and "dataset_name" in df.columns:
        df = df[df["dataset_name"] == dataset]
    keys = ["nprocs", "repeat"]
    s = df[df["variant"] == slow].groupby(keys)[col].median()
    f = df[df["variant"] == fast].groupby(keys)[col].median()
    both = pd.concat({"s": s, "f": f}, axis=1).dropna()
    if both.empty:
        return pd.DataFrame(columns=["nprocs", "value", "lo", "hi"])
    both["r"] = both["f"] / both["s"]
    g = both.groupby("nprocs")
    out = pd.DataFrame({"value": g["f"].median() / g["s"].median(), "lo": g["r"].min(),
                        "hi": g["r"].max()}).reset_index()
    return out


def _predictions(d: Path, workload: str) -> pd.DataFrame | None:
    f = d / "predictions.csv"
    if not f.exists():
        return None
    p = pd.read_csv(f)
    p = p[p["workload"] == workload]
    if "cache" in p.columns:
        p = p[p["cache"] == "cold"]
    p = p.copy()
    # I/O time: the setup and every iteration's phases other than compute and the allreduce.
    p["io_s"] = p["setup_s"] + p["iterations"] * (p["per_iteration_s"] - p["compute_s"] - p["communicate_s"])
    return p


def _model_ratio(p: pd.DataFrame, slow: str, fast: str, col: str = "io_s") -> pd.DataFrame:
    """slow/fast of a time column per P (the model has one value: lo = hi = value)."""
    t = p.pivot_table(index="nprocs", columns="variant", values=col)
    if slow not in t or fast not in t:
        return pd.DataFrame(columns=["nprocs", "value", "lo", "hi"])
    r = (t[slow] / t[fast]).rename("value").reset_index()
    r["lo"] = r["hi"] = r["value"]
    return r


def _timeline_throughput(d: Path) -> pd.DataFrame | None:
    f = d / "rows.csv"
    if not f.exists():
        return None
    rows = pd.read_csv(f)
    if "cache" in rows.columns:
        rows = rows[rows["cache"] == "cold"]
    keys = ["variant", "nprocs", "coalesce_bytes", "stagger_size"]
    pts = rows.drop_duplicates(keys)[keys + ["wall_s_total", "records"]].copy()
    pts["records_per_s"] = pts["records"] / pts["wall_s_total"]
    return pts


def _median_ratio(base: pd.DataFrame, fast: pd.DataFrame) -> pd.DataFrame:
    """fast/base of the per-P median records_per_s (timelines have one point per P: lo = hi)."""
    r = (fast.groupby("nprocs")["records_per_s"].median()
         / base.groupby("nprocs")["records_per_s"].median()).dropna().rename("value").reset_index()
    r["lo"] = r["hi"] = r["value"]
    return r


@dataclass(frozen=True)
class Claim:
    """One of the papers' claims: where it is shown, what is measured and when it holds.

    ``quantity(setting, folder)`` returns a DataFrame ``nprocs, value, lo,
    hi`` (lo/hi: the spread over repeats) or None when the folder has no
    results; the verdict compares ``value`` at the largest P with
    ``threshold`` (``criterion`` says so in words). ``why_no[setting]`` says
    what that setting lacks for the effect, and is shown only when the
    criterion is not met.
    """

    id: str
    notebook: str
    paper: str
    statement: str
    quantity_name: str
    short: str
    threshold: float
    quantity: Callable[[str, Path], pd.DataFrame | None] = field(repr=False)
    why_no: dict = field(default_factory=dict, repr=False)
    ylabel: str = ""   # the figures' y axis (default: ``short``)

    @property
    def criterion(self) -> str:
        return f"{self.short} >= {self.threshold:g} at the largest P, cold"


def _throughput_claim(slow: str, fast: str, dataset: str, workload: str):
    def q(setting: str, d: Path):
        if setting == "model":
            p = _predictions(d, workload)
            return None if p is None else _model_ratio(p, slow, fast)
        s = _summary(d)
        return None if s is None else _per_repeat_ratio(s, slow, fast, "records_per_s", dataset)
    return q


def _io_share(setting: str, d: Path):
    """LMDB's I/O (read + wait) share of one emulated training iteration."""
    if setting == "model":
        p = _predictions(d, "imagenet-caffenet")
        if p is None:
            return None
        p = p[p["variant"] == "lmdb"]
        r = pd.DataFrame({"nprocs": p["nprocs"], "value": p["io_s"] / p["total_s"]})
        r["lo"] = r["hi"] = r["value"]
        return r.reset_index(drop=True)
    s = _summary(d)
    if s is None:
        return None
    s = s[(s["variant"] == "lmdb") & (s["dataset_name"] == "imagenet")]
    parts = s[["read_s", "wait_s", "comm_s", "compute_s"]]
    s = s.assign(share=(s["read_s"] + s["wait_s"]) / parts.sum(axis=1))
    g = s.groupby("nprocs")["share"]
    return pd.DataFrame({"value": g.median(), "lo": g.min(), "hi": g.max()}).reset_index()


def _setup_saved(setting: str, d: Path):
    """1 - PROV's reader setup / DIO's (slowest rank), cold."""
    dio, prov = "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov"
    if setting == "model":
        p = _predictions(d, "cifar10-large-alexnet")
        if p is None:
            return None
        t = p.pivot_table(index="nprocs", columns="variant", values="setup_s")
        if dio not in t or prov not in t:
            return None
        r = (1 - t[prov] / t[dio].where(t[dio] > 0)).rename("value").reset_index()
        r["lo"] = r["hi"] = r["value"]
        return r
    f = d / "points.csv"
    if not f.exists():
        return None
    pts = _ok(pd.read_csv(f, low_memory=False))
    pts = pts[(pts["level"] == "setup") & (pts["phase"] == "setup") & (pts["cache"] == "cold")]
    per = pts.groupby(["variant", "nprocs", "repeat"])["wall_s"].max().unstack("variant")
    if dio not in per or prov not in per:
        return None
    per["saved"] = 1 - per[prov] / per[dio]
    g = per.groupby("nprocs")
    med = g[[dio, prov]].median()
    return pd.DataFrame({"value": 1 - med[prov] / med[dio], "lo": g["saved"].min(),
                         "hi": g["saved"].max()}).reset_index()


def _coal(setting: str, d: Path):
    """COAL at the reference default (4 MiB, or the largest size below it) over no COAL."""
    base, coal = "lmdbio-lmm-dio-prov", "lmdbio-lmm-dio-prov-coal"
    if setting == "model":
        p = _predictions(d, "cifar10-large-alexnet")
        return None if p is None else _model_ratio(p, base, coal)
    pts = _timeline_throughput(d)
    if pts is None:
        return None
    sizes = sorted(pts.loc[pts["variant"] == coal, "coalesce_bytes"].dropna().unique())
    if not sizes:
        return None
    size = max([s for s in sizes if s <= 4 << 20] or sizes[:1])
    return _median_ratio(pts[pts["variant"] == base], pts[(pts["variant"] == coal) & (pts["coalesce_bytes"] == size)])


def _stag(setting: str, d: Path):
    """STAG over the same stack without it, the largest P, cold."""
    base, stag = "lmdbio-lmm-dio-prov-coal", FULL
    if setting == "model":
        p = _predictions(d, "imagenet-caffenet")
        return None if p is None else _model_ratio(p, base, stag)
    pts = _timeline_throughput(d)
    if pts is None:
        return None
    return _median_ratio(pts[pts["variant"] == base], pts[pts["variant"] == stag])


def _training(setting: str, d: Path):
    """Full LMDBIO over LMDB in emulated training time (compute, allreduce and I/O)."""
    if setting == "model":
        p = _predictions(d, "imagenet-caffenet")
        return None if p is None else _model_ratio(p, "lmdb", FULL, "total_s")
    s = _summary(d)
    if s is None:
        return None
    s = s.assign(inv_wall=1.0 / s["wall_s"])
    return _per_repeat_ratio(s, "lmdb", FULL, "inv_wall", "imagenet")


_LOCAL_ONE_NODE = ("one 2-core node with a local disk: all ranks share one page cache and one "
                   "device, and more than 2 ranks time-share the cores")
_GPFS_SMALL = ("the emulated GPFS has the papers' storage costs but only this machine's few ranks "
               "(2 cores), so the effects that grow with the rank count stay small")

CLAIMS: tuple[Claim, ...] = (
    Claim("C1", "02_lmdb_analysis", "TOPC 2019",
          "With LMDB, I/O takes up to 90% of training time",
          "LMDB's I/O share of an emulated training iteration (ImageNet records, AlexNet compute)",
          "I/O share", 0.5, _io_share,
          {"local": "a local disk reads 196 KB records quickly, and with more ranks than its 2 cores the "
                    "emulated compute and allreduce take most of an iteration",
           "gpfs": _GPFS_SMALL + "; the emulated compute and allreduce still outweigh the reads",
           "model": "the model's compute (AlexNet on a V100-class GPU) and 244 MB allreduce "
                    "outweigh LMDB's reads at this P"},
          ylabel="I/O share of an iteration"),
    Claim("C2", "03_lmm", "HPCC 2017",
          "LMDBIO-LMM (one reader per node) is up to 20x faster than LMDB",
          "LMM/LMDB read throughput (ImageNet records)",
          "LMM/LMDB", 1.2, _throughput_claim("lmdb", "lmdbio-lmm", "imagenet", "imagenet-caffenet"),
          {"local": _LOCAL_ONE_NODE + "; one LMM reader copies for all while LMDB's ranks fault "
                    "in parallel from one fast device",
           "gpfs": _GPFS_SMALL + "; with a few ranks per virtual node the waiters LMM removes are few",
           "model": "both variants are dominated by the same storage and cursor costs at this P: "
                    "LMM removes the woken waiters but not the walk or the faults' latency"}),
    Claim("C3", "04_dm", "ICPADS 2017",
          "LMDBIO-DM (cursor handed around a ring) is 2x faster than LMDBIO-LMM",
          "DM/LMM read throughput, one reader per rank (CIFAR-10 records)",
          "DM/LMM", 1.2, _throughput_claim("lmdbio-lmm", "lmdbio-lmm-dm", "cifar10",
                                                   "cifar10-large-alexnet"),
          {"local": _LOCAL_ONE_NODE + "; the walk DM saves costs well under a millisecond per "
                    "iteration here while the ring serializes the readers",
           "gpfs": _GPFS_SMALL + "; with a few readers the walk past earlier readers' records "
                   "is short, and the ring's hand-offs cost about as much",
           "model": "the ring's sequential hand-offs grow with the readers and offset the shorter walk"}),
    Claim("C4", "05_dio", "TOPC 2019",
          "Direct I/O removes mmap's page-fault overheads (problem 3) and is faster",
          "DIO/LMM read throughput (ImageNet records)",
          "DIO/LMM", 1.2, _throughput_claim("lmdbio-lmm", "lmdbio-lmm-dio", "imagenet",
                                                    "imagenet-caffenet"),
          {"local": _LOCAL_ONE_NODE + "; kernel readahead already turns the faults into large "
                    "sequential reads from a fast device",
           "gpfs": _GPFS_SMALL + "; the index pass DIO adds is paid before the timed batches",
           "model": "DIO's index pass at setup (one reader walks every leaf) outweighs the cheaper "
                    "reads at this P"}),
    Claim("C5", "06_prov", "TOPC 2019",
          "Provenance removes DIO's sequential index pass",
          "reader setup PROV saves over DIO: 1 - setup(PROV)/setup(DIO), slowest rank",
          "setup saved", 0.5, _setup_saved,
          {"local": "the index pass over a 60k-record file takes milliseconds from a warm or local "
                    "file, about what reading and checking the sidecar costs",
           "gpfs": "reading the sidecar and checking it against the meta page costs small requests "
                   "to the emulated storage, about as much as the index pass at this size",
           "model": "the model's setup is the same for both at this P"},
          ylabel="setup saved by PROV"),
    Claim("C6", "07_coal", "TOPC 2019",
          "Coalescing several iterations into MiB-sized requests raises throughput (problem 4)",
          "COAL (about 4 MiB requests)/no COAL read throughput (CIFAR-10 records)",
          "COAL/no COAL", 1.2, _coal,
          {"local": "a local disk with kernel readahead serves 0.8 MB requests about as fast as MiB ones",
           "gpfs": "requests of one iteration's share already span several stripes of the emulated GPFS",
           "model": "with 36 ranks per node a reader's share of one iteration (256 records per rank) "
                    "already exceeds COAL's 4 MiB target, so COAL issues the same requests as no COAL"}),
    Claim("C7", "08_stag", "TOPC 2019",
          "Staggering the readers' I/O in groups reduces storage contention (problem 5)",
          "STAG/no STAG read throughput, one reader per rank (ImageNet records)",
          "STAG/no STAG", 1.2, _stag,
          {"local": "a local disk and 2 cores suffer little from a few concurrent readers, so the turns "
                    "only add waiting",
           "gpfs": "with no more readers than storage targets the interleaving STAG avoids is small, and "
                   "waiting for turns costs more than it saves",
           "model": "groups of half the readers still interleave many streams per storage target, "
                    "so the seeks stay and the turns add waiting"}),
    Claim("C8", "09_scaling", "Poster 2018, TOPC 2019",
          "The full LMDBIO stack is 65-77x faster than LMDB at 9,216 processes",
          "LMDBIO-LMM-DIO-PROV-COAL-STAG/LMDB read throughput (CIFAR-10 records)",
          "full stack/LMDB", 10.0, _throughput_claim("lmdb", FULL, "cifar10", "cifar10-large-alexnet"),
          {"local": _LOCAL_ONE_NODE + "; LMDB's costs that grow with P (the walk, the waiters, "
                    "storage contention) are small at a few ranks",
           "gpfs": _GPFS_SMALL + "; the papers' factor comes from LMDB's costs growing with "
                   "thousands of ranks",
           "model": "the model's storage bounds the optimized stack at this P"}),
)

#: Not a claim of its own: the training view of C1 and C8 that notebook 10 shows.
TRAINING = Claim("T", "10_training", "TOPC 2019",
                 "LMDBIO brings Caffe's total training time down (up to 65x on 9,216 cores)",
                 "LMDB/full LMDBIO emulated training time (ImageNet records, AlexNet compute)",
                 "full stack/LMDB training time", 1.2, _training,
                 ylabel="training time LMDB / full stack")

_BY_ID = {c.id: c for c in (*CLAIMS, TRAINING)}


def claim(claim_id: str) -> Claim:
    """The claim ``C1`` .. ``C8`` (or ``T``, notebook 10's training view)."""
    try:
        return _BY_ID[claim_id]
    except KeyError:
        raise KeyError(f"no claim {claim_id!r}; the claims are {', '.join(_BY_ID)}") from None


def setting_dir(results_root: str | Path, notebook: str, setting: str) -> Path:
    """Where a setting's results are: ``NN_name/``, ``NN_name/gpfs/`` or ``NN_name/model/``."""
    base = Path(results_root) / notebook
    return base if setting == "local" else base / setting


def resolve(results_root, notebook: str, setting: str, fallback: bool = True) -> tuple[Path, str]:
    """A setting's results folder and where it is: ``"here"``, or ``"committed"`` when
    ``results_root`` has none and ``fallback`` allows the repository's copy."""
    d = setting_dir(results_root, notebook, setting)
    if (d / "meta.json").exists() or not fallback:
        return d, "here"
    return setting_dir(COMMITTED_RESULTS, notebook, setting), "committed"


def series(claim: Claim | str, results_root=COMMITTED_RESULTS, *, fallback: bool = True) -> dict:
    """``{setting: DataFrame(nprocs, value, lo, hi)}`` of a claim's quantity (settings with data)."""
    claim = _BY_ID[claim] if isinstance(claim, str) else claim
    out = {}
    for s in SETTINGS:
        d, _ = resolve(results_root, claim.notebook, s, fallback)
        df = claim.quantity(s, d)
        if df is not None and len(df):
            out[s] = df.sort_values("nprocs").reset_index(drop=True)
    return out


def _rel(d: Path) -> str:
    d = Path(d).resolve()
    return str(d.relative_to(REPO)) if d.is_relative_to(REPO) else str(d)


def _fmt(v: float, threshold: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return f"{v:.2f}" if threshold < 2 else f"{v:.1f}"


def evaluate(results_root=COMMITTED_RESULTS, claims=CLAIMS, *, fallback: bool = True) -> pd.DataFrame:
    """One row per claim and setting: the measured value at the largest P, the verdict and why."""
    rows = []
    for c in claims:
        for s in SETTINGS:
            d, source = resolve(results_root, c.notebook, s, fallback)
            df = c.quantity(s, d)
            df = None if df is None else df.dropna(subset=["value"])
            base = {"claim": c.id, "setting": s, "criterion": c.criterion, "paper": c.paper,
                    "notebook": c.notebook, "quantity": c.quantity_name, "threshold": c.threshold,
                    "source": _rel(d)}
            if df is None or df.empty:
                rows.append({**base, "measured": "no data", "verdict": "no data", "nprocs": np.nan,
                             "value": np.nan,
                             "why": f"no results in {_rel(d)} (run notebook {c.notebook} with RUN=True)"})
                continue
            last = df.loc[df["nprocs"].idxmax()]
            p, v = int(last["nprocs"]), float(last["value"])
            spread = (f" (repeats {_fmt(last['lo'], c.threshold)}-{_fmt(last['hi'], c.threshold)})"
                      if last["lo"] != last["hi"] and np.isfinite(last["lo"]) else "")
            measured = f"{_fmt(v, c.threshold)} at P={p}{spread}"
            met = v >= c.threshold
            verdict = "yes" if met else "no"
            if met:
                why = f"{_fmt(v, c.threshold)} >= {c.threshold:g}"
            else:
                why = f"{_fmt(v, c.threshold)} < {c.threshold:g}"
                if c.why_no.get(s):
                    why += f": {c.why_no[s]}"
            if source == "committed":
                why += " [committed results: this run did not measure this setting]"
            rows.append({**base, "measured": measured, "verdict": verdict, "nprocs": p, "value": v,
                         "why": why})
    return pd.DataFrame(rows, columns=COLUMNS + DETAILS)


def write(results_root=COMMITTED_RESULTS, out: str | Path | None = None, *,
          fallback: bool = True) -> pd.DataFrame:
    """Evaluate every claim and write ``claims.csv`` (default: ``results_root/claims.csv``)."""
    df = evaluate(results_root, fallback=fallback)
    out = Path(out) if out else Path(results_root) / "claims.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    return df


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(df: pd.DataFrame, ids=None) -> str:
    """A Markdown table of claims.csv rows (all, or those of ``ids``)."""
    if ids is not None:
        df = df[df["claim"].isin(list(ids))]
    lines = ["| claim | paper | setting | measured | criterion | verdict | why |",
             "|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        c = _BY_ID.get(r.claim)
        name = f"{r.claim}: {c.statement}" if c else r.claim
        lines.append("| " + " | ".join(_cell(x) for x in (
            name, r.paper, SETTING_LABELS.get(r.setting, r.setting), r.measured, r.criterion,
            f"**{r.verdict}**", r.why)) + " |")
    return "\n".join(lines)


def show(results_root, ids):
    """A notebook's closing cell: rewrite claims.csv, then show its claims' rows as Markdown."""
    from IPython.display import Markdown, display

    df = write(results_root)
    rows = df[df["claim"].isin(list(ids))]
    display(Markdown(f"## Verdicts (from `{Path(results_root).name}/claims.csv`)\n\n" + render(rows)))
    return rows


def readme_table(df: pd.DataFrame) -> str:
    return f"{MARK_START}\n{render(df)}\n{MARK_END}"


def update_readme(df: pd.DataFrame, readme: str | Path = README) -> Path:
    """Replace the table between the markers in ``figures/README.md`` with ``df`` rendered."""
    readme = Path(readme)
    text = readme.read_text()
    if MARK_START not in text or MARK_END not in text:
        raise ValueError(f"{readme} lacks the claims markers ({MARK_START!r} ... {MARK_END!r})")
    head, rest = text.split(MARK_START, 1)
    _, tail = rest.split(MARK_END, 1)
    readme.write_text(head + readme_table(df) + tail)
    return readme


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lmdbio.claims",
                                description="Judge the papers' claims C1-C8 from the results files.")
    p.add_argument("--results", default=str(COMMITTED_RESULTS), help="results root (default: data/results)")
    p.add_argument("--readme", default=str(README), help="README whose claims table to rewrite")
    p.add_argument("--no-readme", action="store_true", help="only write claims.csv")
    args = p.parse_args(argv)
    df = write(args.results)
    if not args.no_readme:
        update_readme(df, args.readme)
    for r in df.itertuples():
        print(f"{r.claim} {r.setting:6s} {r.verdict:8s} {r.measured}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
