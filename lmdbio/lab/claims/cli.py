"""``python -m lmdbio.lab.claims``: judge the claims, write the tables, or compare two runs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ..scales import COMMITTED_RESULTS
from .judge import write
from .render import CLAIMS_DOC, README, update_readme
from .shared import shared_results
from .split import write_split

__all__ = ["compare_runs", "main"]


def compare_runs(first, second) -> pd.DataFrame:
    """Two claims.csv files (two runs of ``make reproduce``) side by side, one row per claim and
    measured setting: each run's verdict and measured value, and ``changed`` (the verdicts differ).
    The model setting is left out (its inputs are the same in both runs unless calibration moved)."""
    a, b = pd.read_csv(first), pd.read_csv(second)
    keys = ["claim", "setting"]
    both = a[keys + ["verdict", "measured"]].merge(b[keys + ["verdict", "measured"]], on=keys,
                                                    how="outer", suffixes=("_first", "_second"))
    both = both[both["setting"] != "model"].fillna({"verdict_first": "absent", "verdict_second": "absent"})
    both["changed"] = both["verdict_first"] != both["verdict_second"]
    return both.reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lmdbio.lab.claims",
                                description="Judge the papers' claims C1-C8 from the results files.")
    p.add_argument("--results", default=str(COMMITTED_RESULTS), help="results root (default: data/results)")
    p.add_argument("--readme", default=str(README),
                   help="README whose claims table to rewrite (the default also rewrites docs/claims.md)")
    p.add_argument("--no-readme", action="store_true", help="only write claims.csv and claims_split.csv")
    p.add_argument("--compare", nargs=2, metavar=("FIRST", "SECOND"),
                   help="only compare two claims.csv files (two runs) and print the verdicts that differ")
    p.add_argument("--out", help="with --compare: also write the comparison to this CSV")
    p.add_argument("--shared-only", action="store_true",
                   help="only rewrite every NN_name/shared/ from the bench-shared sweep (RESULTS/shared/)")
    args = p.parse_args(argv)
    if args.compare:
        cmp = compare_runs(*args.compare)
        if args.out:
            cmp.to_csv(args.out, index=False)
        changed = cmp[cmp["changed"]]
        print(f"{len(changed)} of {len(cmp)} measured verdicts differ between the two runs")
        for r in changed.itertuples():
            print(f"{r.claim:11s} {r.setting:9s} {r.verdict_first} ({r.measured_first}) -> "
                  f"{r.verdict_second} ({r.measured_second})")
        return 0
    shared = shared_results(args.results)
    if args.shared_only:
        print(f"{len(shared)} shared folders written from {Path(args.results) / 'shared'}")
        return 0
    df = write(args.results)
    split = write_split(args.results)
    if not args.no_readme:
        update_readme(df, args.readme, args.results)
        if Path(args.readme).resolve() == README.resolve():
            update_readme(df, CLAIMS_DOC, args.results, require=("claims summary",))
            update_readme(df, CLAIMS_DOC.with_name("model.md"), args.results, require=("model criterion",))
    for r in df.itertuples():
        where = f"{r.setting}:{r.dataset}" if r.setting == "model" else r.setting
        print(f"{r.claim:14s} {where:15s} {r.verdict:12s} {r.magnitude:10s} {r.measured}")
    for r in split.itertuples():
        print(f"{r.workload:22s} {r.ratio:16s} model {r.model_factor:9.3g} ({r.band_low:.3g}-{r.band_high:.3g})"
              f"  paper {r.paper_factor:g} ({r.paper}): {r.magnitude}")
    return 0
