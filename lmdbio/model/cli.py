"""``lmdbio model calibrate | validate | predict | absolute | platforms``."""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["add_model_parser"]


def _procs(text: str) -> list[int]:
    """``1,2,4,...,9216``: an ellipsis continues the doubling (and the x36 steps) of the poster."""
    from .predict import POWERS

    parts = [p.strip() for p in text.split(",") if p.strip()]
    out: list[int] = []
    for i, p in enumerate(parts):
        if p in ("...", "…"):
            if not out or i + 1 >= len(parts):
                raise ValueError("--procs: '...' needs a number before and after it")
            hi = int(parts[i + 1])
            nxt = [x for x in POWERS if out[-1] < x < hi]
            if not nxt:
                x = out[-1] * 2
                while x < hi:
                    nxt.append(x)
                    x *= 2
            out += nxt
            continue
        try:
            v = int(p)
        except ValueError:
            raise ValueError(f"--procs: {p!r} is not a process count") from None
        if v < 1:
            raise ValueError(f"--procs: process counts must be >= 1, got {v}")
        out.append(v)
    return sorted(set(out))


def _cmd_calibrate(args) -> int:
    from .calibrate import run_calibration, save_calibration

    load0 = os.getloadavg()[0]
    cal = run_calibration(args.workdir, progress=not args.quiet)
    load1 = os.getloadavg()[0]
    out = save_calibration(cal, args.out, config={"workdir": args.workdir, "argv": sys.argv[1:],
                                                  "loadavg_1min": [load0, load1]})
    # Requests per explicit read through the emulated PFS (the model's requests_per_read.csv).
    from pathlib import Path

    import pandas as pd

    from ..pfs.mount import FuseUnavailable
    from .requests import measure

    try:
        rows = measure(workdir=args.workdir)
        pd.DataFrame(rows).to_csv(Path(out) / "requests_per_read.csv", index=False)
    except FuseUnavailable as exc:
        print(f"lmdbio: requests per read not measured (no FUSE: {exc}); the committed "
              "requests_per_read.csv stays", file=sys.stderr)
    if max(load0, load1) > 0.5 * cal.cores:
        print(f"lmdbio: warning: load average {max(load0, load1):.1f} on {cal.cores} cores while "
              "calibrating; costs may be inflated - rerun on an idle machine", file=sys.stderr)
    print(out)
    return 0


def _cmd_validate(args) -> int:
    from .calibrate import load_calibration
    from .validate import DEFAULT_SOURCES, error_table, find_summaries, validate, write_validation

    cal = load_calibration(args.calibration)
    summaries = find_summaries(args.sources or DEFAULT_SOURCES)
    if not summaries:
        raise ValueError("no summary.csv under " + ", ".join(map(str, args.sources or DEFAULT_SOURCES))
                         + "; run `lmdbio bench` (or make bench-issue6) first")
    df = validate(summaries, args.platform, cal, budget=args.budget)
    out = write_validation(df, args.out, {"sources": [str(s) for s in summaries],
                                          "platform": args.platform, "budget": args.budget},
                           cal_dir=args.calibration)
    t = error_table(df)
    print(t.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(out)
    return 0


def _cmd_predict(args) -> int:
    from .calibrate import load_calibration
    from .platform import load_platform
    from .predict import predict, sensitivity, write_predictions

    plat = load_platform(args.platform)
    cal = load_calibration(args.calibration)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    procs = _procs(args.procs)
    wls = args.workloads and args.workloads.split(",")
    rows = predict(plat, procs, variants, wls, cal, budget=args.budget)
    band = [max(procs)] if args.band_procs in (None, "none") else _procs(args.band_procs)
    sens = sensitivity(plat, band, variants, wls, cal, budget=args.budget) if args.band_procs != "none" else []
    out = write_predictions(rows, args.out, {"platform": args.platform, "procs": procs,
                                             "variants": variants, "budget": args.budget,
                                             "band_procs": band, "argv": sys.argv[1:]},
                            plat, cal, args.calibration, sens=sens)
    print(out / "predictions.csv")
    return 0


def _cmd_absolute(args) -> int:
    from .absolute import absolute_table, write_absolute
    from .calibrate import load_calibration

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    t = absolute_table(args.platform, _procs(args.procs), variants, args.workload,
                       load_calibration(args.calibration), budget=args.budget)
    out = write_absolute(t, args.out)
    show = t[["variant", "nprocs", "predicted_s", "low_s", "high_s", "bound", "bound_s", "verdict"]]
    print(show.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(out)
    return 0


def _cmd_platforms(args) -> int:
    from .platform import PLATFORM_DIR, list_platforms

    for name in list_platforms():
        print(f"{name}\t{PLATFORM_DIR / (name + '.toml')}")
    return 0


def add_model_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``model`` and its subcommands to the ``lmdbio`` command."""
    from .calibrate import DEFAULT_DIR
    from .validate import REPO

    p = subparsers.add_parser("model", help="the calibrated scale model: calibrate, validate, predict")
    sub = p.add_subparsers(dest="model_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])

    c = sub.add_parser("calibrate", help="microbenchmarks of this machine (about a minute)")
    c.add_argument("--out", default=str(DEFAULT_DIR), help="results directory (default %(default)s)")
    c.add_argument("--workdir", default=None, help="scratch directory on the disk to measure "
                   "(default build/ in the repository)")
    c.add_argument("--quiet", action="store_true")
    c.set_defaults(func=_cmd_calibrate)

    v = sub.add_parser("validate", help="predict measured sweeps and report the errors")
    v.add_argument("sources", nargs="*", help="summary.csv files or directories (default: "
                   "data/results/bench_issue6 and data/results/pfs_sweep)")
    v.add_argument("--platform", default="this-machine")
    v.add_argument("--calibration", default=str(DEFAULT_DIR))
    v.add_argument("--out", default=str(REPO / "data" / "results" / "model_validation"))
    v.add_argument("--budget", type=int, default=20000,
                   help="storage-model pieces simulated per phase (default %(default)s)")
    v.set_defaults(func=_cmd_validate)

    r = sub.add_parser("predict", help="predict a platform's variants over process counts")
    r.add_argument("--platform", required=True, help="a name in lmdbio/platforms/ or a TOML file")
    r.add_argument("--procs", default="1,2,4,8,16,36,72,...,9216",
                   help="process counts; '...' continues the poster's axis (default %(default)s)")
    r.add_argument("--variants", default="all", help="'all' or comma-separated variant names")
    r.add_argument("--workloads", default=None, help="comma-separated workload names (default all)")
    r.add_argument("--calibration", default=str(DEFAULT_DIR))
    r.add_argument("--out", required=True, help="directory for predictions.csv and meta.json")
    r.add_argument("--budget", type=int, default=20000,
                   help="storage-model pieces simulated per phase (default %(default)s)")
    r.add_argument("--band-procs", default=None,
                   help="process counts at which every estimate is also run at both ends of its range "
                        "(low/high columns, sensitivity.csv); default: the largest of --procs; 'none': skip")
    r.set_defaults(func=_cmd_predict)

    a = sub.add_parser("absolute", help="predicted total times and their bands against bounds "
                       "that do not come from the papers' speedups (walltime, bandwidth, compute)")
    a.add_argument("--platform", default="bebop", help="a name in lmdbio/platforms/ or a TOML file")
    a.add_argument("--procs", default="1,36,288,9216", help="process counts (default %(default)s)")
    a.add_argument("--variants", default="all", help="'all' or comma-separated variant names")
    a.add_argument("--workload", default="cifar10-large-alexnet")
    a.add_argument("--calibration", default=str(DEFAULT_DIR))
    a.add_argument("--out", default=str(REPO / "data" / "results" / "model_prediction" / "absolute.csv"))
    a.add_argument("--budget", type=int, default=20000,
                   help="storage-model pieces simulated per phase (default %(default)s)")
    a.set_defaults(func=_cmd_absolute)

    ls = sub.add_parser("platforms", help="list the platform files")
    ls.set_defaults(func=_cmd_platforms)
    return p
