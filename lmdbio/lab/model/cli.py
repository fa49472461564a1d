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
    from pathlib import Path

    import pandas as pd

    from ..pfs.mount import FuseUnavailable
    from ..storage.throttle import ThrottleUnavailable, throttle_available
    from .calibrate import run_calibration, save_calibration
    from .leafcut import measure as measure_leaf_cut
    from .requests import measure
    from .walkread import measure as measure_walk

    load0 = os.getloadavg()[0]
    cal = run_calibration(args.workdir, progress=not args.quiet)
    load1 = os.getloadavg()[0]
    out = Path(save_calibration(cal, args.out, config={"workdir": args.workdir, "argv": sys.argv[1:],
                                                       "loadavg_1min": [load0, load1]}))
    # Requests per explicit read through the emulated PFS (the model's requests_per_read.csv).
    try:
        pd.DataFrame(measure(workdir=args.workdir)).to_csv(out / "requests_per_read.csv", index=False)
    except FuseUnavailable as exc:
        print(f"lmdbio: requests per read not measured (no FUSE: {exc}); the committed "
              "requests_per_read.csv stays", file=sys.stderr)
    # What a cold cursor walk reads (walk_touches_values), on a loop device: root only.
    ok, why = throttle_available()
    try:
        if not ok:
            raise ThrottleUnavailable(why)
        pd.DataFrame(measure_walk(workdir=args.workdir)).to_csv(out / "walk_reads.csv", index=False)
    except ThrottleUnavailable as exc:
        print(f"lmdbio: walk reads not measured ({exc}); the committed walk_reads.csv stays",
              file=sys.stderr)
    # What cached leaf pages cost DIO's reads on this disk (no root needed).
    pd.DataFrame(measure_leaf_cut(workdir=args.workdir)).to_csv(out / "leaf_cut.csv", index=False)
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
    import time

    from .calibrate import load_calibration
    from .platform import load_platform
    from .output import write_predictions
    from .predict import predict
    from .uncertainty import joint, verdict_maps

    plat = load_platform(args.platform)
    cal = load_calibration(args.calibration)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    procs = _procs(args.procs)
    wls = args.workloads and args.workloads.split(",")
    batches = [b.strip() for b in args.batches.split(",") if b.strip()]
    t0 = time.monotonic()
    rows = predict(plat, procs, variants, wls, cal, budget=args.budget, batches=batches, jobs=None)
    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    say(f"[predict] {len(rows)} points in {time.monotonic() - t0:.0f} s")
    band = [max(procs)] if args.band_procs in (None, "none") else _procs(args.band_procs)
    samples = maps = None
    if args.band_procs != "none" and args.samples > 0:
        t0 = time.monotonic()
        samples = joint(plat, band, variants, wls, cal, n=args.samples, seed=args.seed,
                        budget=args.budget,
                        progress=lambda i, n: say(f"[predict] joint sample {i}/{n}") if i % 8 == 0 else None)
        say(f"[predict] {args.samples} joint samples in {time.monotonic() - t0:.0f} s")
        if args.map_points > 1 and ("all" in variants or not variants):
            t0 = time.monotonic()
            maps = verdict_maps(plat, samples, cal, max(band), points=args.map_points, budget=args.budget,
                                jobs=None)
            say(f"[predict] verdict maps in {time.monotonic() - t0:.0f} s")
    out = write_predictions(rows, args.out, {"platform": args.platform, "procs": procs,
                                             "variants": variants, "budget": args.budget,
                                             "batches": batches, "band_procs": band,
                                             "samples": args.samples, "seed": args.seed,
                                             "map_points": args.map_points, "argv": sys.argv[1:]},
                            plat, cal, args.calibration, joint=samples, maps=maps)
    print(out / "predictions.csv")
    return 0


def _cmd_absolute(args) -> int:
    from pathlib import Path

    import pandas as pd

    from .absolute import absolute_table, axis_check, write_absolute
    from .calibrate import load_calibration

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    wls = args.workloads and args.workloads.split(",")
    joint_csv = Path(args.joint) if args.joint else Path(args.out).with_name("joint.csv")
    joint_rows = pd.read_csv(joint_csv) if joint_csv.exists() else None
    t = absolute_table(args.platform, _procs(args.procs), variants, wls,
                       load_calibration(args.calibration), budget=args.budget, joint_rows=joint_rows,
                       jobs=None)
    out = write_absolute(t, args.out)
    axis = axis_check(t)
    show = t.drop_duplicates(["workload", "batch", "variant", "nprocs"])
    show = show[show["nprocs"].isin([1, 36, 576, 9216])]
    print(show.pivot_table(index=["workload", "batch", "variant"], columns="nprocs",
                           values="predicted_s").to_string(float_format=lambda x: f"{x:.4g}"))
    for r in axis.itertuples():
        state = "inside" if r.inside else f"FAILED: outside at P = {r.outside_procs}"
        print(f"poster axis 10-100,000 s: {r.workload} {r.batch:11s} {r.variant:32s} {state}; "
              f"{r.min_s:.3g}-{r.max_s:.3g} s; worst P={r.worst_nprocs} ({r.worst_mechanism})")
    print(out)
    return 0


def _cmd_platforms(args) -> int:
    from .platform import PLATFORM_DIR, list_platforms

    for name in list_platforms():
        print(f"{name}\t{PLATFORM_DIR / (name + '.toml')}")
    return 0


def _common(p, points: bool = False) -> None:
    """The calibration and budget options (and with ``points`` the procs, variants, workloads)."""
    from .calibrate import DEFAULT_DIR

    p.add_argument("--calibration", default=str(DEFAULT_DIR))
    p.add_argument("--budget", type=int, default=20000,
                   help="storage-model pieces simulated per phase (default %(default)s)")
    if points:
        p.add_argument("--procs", default="1,2,4,8,16,36,72,...,9216",
                       help="process counts; '...' continues the poster's axis (default %(default)s)")
        p.add_argument("--variants", default="all", help="'all' or comma-separated variant names")
        p.add_argument("--workloads", default=None, help="comma-separated workload names (default all)")


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
    v.add_argument("--out", default=str(REPO / "data" / "results" / "model_validation"))
    _common(v)
    v.set_defaults(func=_cmd_validate)

    r = sub.add_parser("predict", help="predict a platform's variants over process counts")
    r.add_argument("--platform", required=True, help="a name in lmdbio/lab/platforms/ or a TOML file")
    _common(r, points=True)
    r.add_argument("--batches", default="global,per-process",
                   help="batch readings to predict: a fixed global batch (strong scaling) and/or a "
                        "fixed batch per process (weak); default %(default)s")
    r.add_argument("--out", required=True, help="directory for predictions.csv and meta.json")
    r.add_argument("--band-procs", default=None,
                   help="process counts at which the joint samples run (joint.csv, the bands and "
                        "verdicts); default: the largest of --procs; 'none': skip")
    r.add_argument("--samples", type=int, default=512,
                   help="joint samples (a seeded Latin hypercube over every estimate's range; about "
                        "1 s of CPU each at 9,216 processes, on every core; default %(default)s, enough "
                        "for the first-order Sobol indices of sobol.csv)")
    r.add_argument("--seed", type=int, default=1, help="the joint samples' seed (default %(default)s)")
    r.add_argument("--map-points", type=int, default=6,
                   help="grid points per estimate of the verdict maps (verdict_map.csv; 0: none)")
    r.add_argument("--quiet", action="store_true")
    r.set_defaults(func=_cmd_predict)

    a = sub.add_parser("absolute", help="predicted total times of both workloads and both batch readings "
                       "against the poster's axis and bounds that do not come from the papers' "
                       "speedups (walltime, bandwidth, compute)")
    a.add_argument("--platform", default="bebop", help="a name in lmdbio/lab/platforms/ or a TOML file")
    _common(a, points=True)
    a.add_argument("--joint", default=None, help="joint.csv for the bands (default: next to --out)")
    a.add_argument("--out", default=str(REPO / "data" / "results" / "model_prediction" / "absolute.csv"))
    a.set_defaults(func=_cmd_absolute)

    ls = sub.add_parser("platforms", help="list the platform files")
    ls.set_defaults(func=_cmd_platforms)
    return p
