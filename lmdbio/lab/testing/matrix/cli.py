"""``python -m lmdbio.lab.testing.matrix``: run a selection and print its failures by cause."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from .combos import BATCHES
from .refusals import auto_choice
from .report import failure_report, write_summary
from .runner import run
from .samples import selection

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m lmdbio.lab.testing.matrix {pairs,random,uneven,full}``: run a selection,
    print the failures by cause; exit 1 if any."""
    ap = argparse.ArgumentParser(prog="python -m lmdbio.lab.testing.matrix",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("run", choices=("pairs", "random", "uneven", "full"))
    ap.add_argument("--nprocs", default="4", help="rank counts, comma-separated (default 4)")
    ap.add_argument("--also", default="8", help="full: also an all-pairs cover at these rank "
                    "counts P of P/4 ranks per virtual node (default 8: 4 nodes of 2; '' for none)")
    ap.add_argument("--uneven", default="4", help="full and uneven: an all-pairs cover of the "
                    "layouts whose reader groups serve different rank counts, at these rank "
                    "counts (default 4; '' for none)")
    ap.add_argument("--count", type=int, default=150, help="random: combinations drawn")
    ap.add_argument("--seed", type=int, default=28, help="random: the seed")
    ap.add_argument("--where", action="append", default=[],
                    help="keep combinations with FIELD=V1,V2 (repeatable), e.g. variant=lmdb")
    ap.add_argument("--limit", type=int, default=0, help="only N combinations, spread evenly "
                    "over the selection (to time a run)")
    ap.add_argument("--out", help="folder for summary.csv and meta.json")
    ap.add_argument("--hang", type=float, default=90, help="seconds without progress that "
                    "count as a hang")
    args = ap.parse_args(argv)
    nprocs = [int(p) for p in args.nprocs.split(",")]
    also = [int(p) for p in args.also.split(",") if p.strip()]
    uneven = [int(p) for p in args.uneven.split(",") if p.strip()]
    # The data sets go to a temporary folder: auto reads as it does on that file system.
    auto_as = auto_choice(tempfile.gettempdir())
    combos, pool = selection(args.run, nprocs, count=args.count, seed=args.seed, where=args.where,
                             limit=args.limit, also=also, uneven=uneven, auto_as=auto_as)
    print(f"{args.run}: {len(combos)} combinations (the full matrix at P = {args.nprocs}: "
          f"{len(pool)} after collapsing)", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rows = run(combos, hang_s=args.hang)
    wall = time.perf_counter() - t0
    fails = sum(r["verdict"].startswith("FAIL") for r in rows)
    if fails:
        print(failure_report(rows))
    per = wall / max(1, len(rows))
    print(f"{len(rows)} combinations in {wall:.0f} s ({per:.2f} s each; the full matrix, "
          f"{len(pool)}: about {per * len(pool) / 60:.0f} min at that rate); {fails} FAIL, "
          f"{sum(r['verdict'] == 'refused' for r in rows)} refused as expected, "
          f"{sum(r['verdict'] == 'ok' for r in rows)} ok", flush=True)
    if args.out:
        from lmdbio.lab.meta import write_results_meta

        write_summary(rows, Path(args.out) / "summary.csv")
        write_results_meta(args.out, {"run": args.run, "nprocs": nprocs, "also": also,
                                      "uneven": uneven, "batches": BATCHES,
                                      "where": args.where, "limit": args.limit,
                                      "combinations": len(rows), "seconds": round(wall, 1),
                                      "fail": fails})
    return 1 if fails else 0

