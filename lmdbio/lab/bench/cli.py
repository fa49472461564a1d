"""``lmdbio bench``: the command line, and the per-point entry point mpiexec runs."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import traceback
from pathlib import Path

from ..emulation import parse_compute_time, parse_model_bytes
from ..paths import lab_root, set_root, under_root
from .limit import RAW
from .stats import format_report
from .settings import Storage, parse_storage, point_span_counters
from .sweep import make_points, read_summary, run_sweep, variant_names

__all__ = ["add_bench_parser", "point_main"]


def _csv_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _epoch_steps(dataset: str, batch_size: int) -> int:
    """Steps of one epoch of ``dataset`` at ``batch_size`` (the last one partial)."""
    from lmdbio.format import db_file, read_meta

    return max(1, -(-int(read_meta(db_file(dataset)).entries) // batch_size))


def _cmd_bench(args) -> int:
    root = set_root(args.root) if args.root else lab_root()
    if args.report:
        print(format_report(read_summary(under_root(args.report, root))))
        return 0
    if not args.dataset or not args.out:
        raise ValueError("--dataset and --out are required (or --report DIR to print results)")
    out = under_root(args.out, root)
    datasets = _csv_list(args.dataset)
    from lmdbio.format import db_file

    for ds in datasets:
        db_file(ds)  # fail early, with the reason, on a missing dataset
    names = variant_names()
    from lmdbio.options import VARIANTS

    variants = list(VARIANTS) if args.variants.strip().lower() == "all" else _csv_list(args.variants)
    unknown = [v for v in variants if v not in names and v not in (RAW, "auto")]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; use 'all', 'auto' or names "
                         f"from {', '.join(names)}")
    try:
        procs = [int(p) for p in _csv_list(args.procs)]
    except ValueError:
        raise ValueError(f"--procs must be integers separated by commas, got {args.procs!r}") from None
    if not procs or min(procs) <= 0:
        raise ValueError(f"--procs must list positive rank counts, got {args.procs!r}")
    bad = [p for p in procs if args.batch_size % p]
    if bad:
        raise ValueError(f"--batch-size {args.batch_size} is not divisible by --procs {bad}; "
                         "each rank gets batch_size / P records")
    caches = _csv_list(args.cache)
    if not caches or any(c not in ("warm", "cold") for c in caches):
        raise ValueError(f"--cache takes warm, cold or warm,cold; got {args.cache!r}")
    if (args.iters is not None and args.iters <= 0) or args.repeats <= 0 or args.warmup < 0:
        raise ValueError("--iters and --repeats must be positive and --warmup >= 0")
    parse_storage(args.storage)
    compute = parse_compute_time(args.compute_time)
    if args.compute is not None:
        if compute:
            raise ValueError("--compute (seconds per step) and --compute-time (seconds per "
                             "sample) set the same thing: give one")
        if not args.compute >= 0:
            raise ValueError(f"--compute must be >= 0 seconds per step, got {args.compute}")
    model = parse_model_bytes(args.model_bytes)
    points = []
    for ds in datasets:
        iters = args.iters or (_epoch_steps(ds, args.batch_size) if args.compute is not None
                               else 20)
        points += make_points([ds], variants, procs, caches, args.batch_size, iters,
                              args.warmup, compute, model, args.ranks_per_node,
                              args.readers_per_node, baselines=not args.no_lmdb,
                              storage=args.storage, compute_step=args.compute)
    config = {k: v for k, v in vars(args).items() if k != "func"}
    config["argv"] = sys.argv

    def on_term(signum, frame):
        raise KeyboardInterrupt  # so the running point's mpiexec (and a PFS mount) end too

    try:
        signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave signals alone
        pass
    summary = run_sweep(points, out, repeats=args.repeats, timeout=args.timeout,
                        config=config, progress=not args.quiet, measure=not args.no_measure,
                        mpiexec_args=shlex.split(args.mpiexec_args or ""))
    print(format_report(summary))
    print(f"results: {out}/points.csv, summary.csv, meta.json")
    return 0


def add_bench_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to ``lmdbio``'s subparsers."""
    p = subparsers.add_parser(
        "bench", help="sweep variants x process counts x cache states; write tidy results",
        description="Run each point under `mpiexec -n P`, always with the raw-read limit and the "
                    "lmdb and lmdb-get baselines, and write points.csv, summary.csv and meta.json "
                    "to --out.")
    p.add_argument("--dataset", help="LMDB directory (several: comma-separated)")
    p.add_argument("--variants", default="all",
                   help="comma-separated Reader variants (the papers' seven, lmdbio-direct, "
                        "lmdb-get, auto; dali-caffe: NVIDIA DALI's reader, needs `pip install "
                        "nvidia-dali-cuda120`) or 'all' (the papers' seven, default); raw, lmdb "
                        "and lmdb-get are always added")
    p.add_argument("--procs", default="1,2,4", help="comma-separated rank counts (default 1,2,4)")
    p.add_argument("--cache", default="warm", help="warm, cold or warm,cold (default warm)")
    p.add_argument("--batch-size", type=int, default=256, help="global batch (default 256)")
    p.add_argument("--iters", type=int, default=None,
                   help="timed iterations per point (default 20; with --compute, one epoch's "
                        "steps: records / batch size)")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed batches first, rounded up to the reader's coalescing (default 1)")
    p.add_argument("--repeats", type=int, default=1, help="repeats of every point (default 1)")
    p.add_argument("--out", help="results folder (a relative one lies under --root)")
    p.add_argument("--root", help="the lab's root: relative --out and --report folders lie under "
                                  "it (default: $LMDBIO_LAB_ROOT, else the lmdbio checkout around "
                                  "the working directory, else the working directory)")
    p.add_argument("--storage", default="local",
                   help="local (default); pfs:PROFILE: read through an emulated parallel file "
                        "system (lmdbio.lab.pfs; profiles local, gpfs-2017, lustre) mounted for the "
                        "sweep; throttle:PROFILE: through throttled loop devices, one per virtual "
                        "node (lmdbio.lab.storage; profiles gpfs-2017, lustre; root); shared:PROFILE: "
                        "one throttled target S read by every virtual node through its own "
                        "direct-I/O device (lmdbio.lab.storage.shared; profile gpfs-2017; time scale "
                        "from LMDBIO_SHARED_TIME_SCALE; root)")
    p.add_argument("--ranks-per-node", type=int, default=None,
                   help="virtual nodes of K consecutive ranks (default: real nodes)")
    p.add_argument("--readers-per-node", type=int, default=1, help="readers per node (default 1)")
    p.add_argument("--compute-time", default="0",
                   help="emulated compute in seconds per sample, or alexnet / resnet50 (assumed "
                        "V100-class costs, see lmdbio.lab.emulation)")
    p.add_argument("--compute", type=float, default=None, metavar="SECONDS",
                   help="emulated accelerator compute per step on each rank, in seconds, as "
                        "DLIO's computation_time (stored as --compute-time SECONDS x P / "
                        "batch size per sample); the report adds the training-loop table: AU, "
                        "samples/s and MB/s per point, median [min-max] over repeats")
    p.add_argument("--model-bytes", default="0",
                   help="gradient bytes allreduced per iteration (e.g. 100MB), or alexnet / resnet50")
    p.add_argument("--timeout", type=float, default=600, help="seconds per point before it is "
                                                              "killed and marked failed (default 600)")
    p.add_argument("--no-lmdb", action="store_true",
                   help="do not add the lmdb and lmdb-get baselines (their speedups are then empty)")
    p.add_argument("--no-measure", action="store_true",
                   help="turn the Reader's per-phase stats off (no read/wait breakdown)")
    p.add_argument("--mpiexec-args", default="", help="extra mpiexec arguments, quoted")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--report", metavar="DIR", help="print the summary of a results folder and exit")
    p.set_defaults(func=_cmd_bench)
    return p


def point_main(argv: list[str]) -> int:
    """``python -m lmdbio.lab.bench _point CONFIG RESULT``: one point under mpiexec (internal)."""
    from mpi4py import MPI

    from .point import _plain, run_point

    comm = MPI.COMM_WORLD
    cfg_file, res_file = argv
    try:
        cfg = json.loads(Path(cfg_file).read_text())
        pt = cfg["point"]
        storage = Storage.from_point(pt)
        storage.enter_node(comm)   # a throttled device: this rank joins its node's cgroup
        s_before = point_span_counters(storage) if comm.rank == 0 else {}
        rows = run_point(comm, pt["dataset"], pt["variant"], pt["batch_size"], pt["iters"],
                         pt["cache"], pt["compute_time"], pt["model_bytes"], pt["ranks_per_node"],
                         pt["readers_per_node"], pt["warmup"], repeat=cfg["repeat"],
                         measure=cfg.get("measure", True), storage=storage)
        if s_before:   # shared storage: S's counters before and after the whole point
            span = point_span_counters(storage, s_before)
            for r in rows:
                r.update(span)
    except BaseException as exc:
        # One rank's failure must end the job, not leave the others in a collective.
        text = f"rank {comm.rank}: " + traceback.format_exc()
        sys.stderr.write(text)
        sys.stderr.flush()
        # Also to a file: mpiexec may end the job on Abort before it forwards this
        # rank's stderr, and the sweep must still say what went wrong.
        try:
            Path(f"{res_file}.error.{comm.rank}").write_text(text)
        except OSError:
            pass
        from lmdbio.collective import abort_job
        abort_job(comm, exc)   # pauses so the launcher can forward the traceback first
        return 1
    if comm.rank == 0:
        tmp = Path(res_file + ".tmp")
        tmp.write_text(json.dumps({"rows": rows, "mpi": MPI.Get_library_version().strip()},
                                  default=_plain))
        tmp.replace(res_file)
    return 0
