"""Run the notebooks in order with papermill; where they write, and results-file helpers they share.

    python -m lmdbio.lab.notebook_runner --committed --scale default --out build/notebooks
    python -m lmdbio.lab.notebook_runner --committed --replot --out build/replot   # RUN=False
    python -m lmdbio.lab.notebook_runner --scale tiny --only 00 01 --out /tmp/nb   # build/scratch/
    python -m lmdbio.lab.notebook_runner --scale tiny --only 00 01 --out /tmp/nb \\
        --results-root /tmp/r --figures-root /tmp/f --datasets-root /tmp/d

Each notebook gets the papermill parameters ``scale`` and ``RUN``, and
``results_root``, ``figures_root`` and ``datasets_root`` (absolute paths)
where they are given, and runs with ``notebooks/`` as its working directory.
A root not given is the notebook's own choice (:func:`workspace`): a run
writes to ``build/scratch/NN/``, a replot writes nothing. ``--committed``
names ``data/results`` and ``figures``: ``make reproduce`` and ``make figures``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from lmdbio.lab.meta import host_meta, write_results_meta
from .scales import CLUSTER_ENV, COMMITTED_RESULTS, REPO, SCALES as _SCALES, settings

__all__ = ["REPO", "NOTEBOOKS", "notebooks", "run_notebooks", "save_results", "host_meta",
           "results_dir", "strip", "unstripped", "STRIP_EXTRA_KEYS", "SCRATCH", "COMMITTED_FIGURES",
           "DATASETS", "Workspace", "workspace", "save_figure", "main"]

NOTEBOOKS = REPO / "notebooks"
SCALES = tuple(_SCALES)
#: Where a notebook run writes when it is given no results or figures root: ``SCRATCH/NN/``
#: (``build/`` is ignored by git).
SCRATCH = REPO / "build" / "scratch"
#: The figures committed with the repository (``make reproduce`` and ``make figures`` write them).
COMMITTED_FIGURES = REPO / "figures"
#: The default scale's datasets (``make datasets``); another scale's are in ``DATASETS/<scale>``.
DATASETS = REPO / "data" / "datasets"


def notebooks(only: list[str] | None = None, root: Path = NOTEBOOKS) -> list[Path]:
    """The ordered notebooks ``NN_name.ipynb``; ``only`` filters by number or name prefix."""
    found = sorted(p for p in root.glob("[0-9][0-9]_*.ipynb"))
    if only:
        found = [p for p in found if any(p.stem == o or p.stem.startswith(o) for o in only)]
    return found


#: What nbstripout removes besides outputs, counts and its own list (widgets, cell execution
#: times, ...): what papermill and JupyterLab add. Cell ids stay (they are stable, e.g. "03-01").
STRIP_EXTRA_KEYS = (
    "metadata.papermill", "cell.metadata.papermill", "cell.metadata.trusted", "metadata.vscode",
    *(f"metadata.language_info.{k}" for k in ("codemirror_mode", "file_extension", "mimetype",
                                              "nbconvert_exporter", "pygments_lexer", "version")),
)


def _nbstripout(paths: list[Path], *flags: str) -> subprocess.CompletedProcess:
    """Run nbstripout on ``paths`` with this project's settings; raises on a file it cannot read."""
    cmd = [sys.executable, "-m", "nbstripout", "--keep-id", "--extra-keys", " ".join(STRIP_EXTRA_KEYS),
           *flags, *map(str, paths)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in (0, 1) or done.stderr.strip():
        raise RuntimeError(f"nbstripout failed on {', '.join(map(str, paths))}: {done.stderr.strip()}")
    return done


def strip(paths: list[str | os.PathLike]) -> None:
    """Strip notebooks in place as they are committed: no outputs, counts or run metadata.

    nbstripout does it; cells keep their ``tags`` (papermill's
    ``parameters``) and ids, the notebook its ``kernelspec``.
    """
    if paths:
        _nbstripout([Path(p) for p in paths])


def unstripped(paths: str | os.PathLike | list[str | os.PathLike]) -> list[Path]:
    """The files nbstripout would change (outputs or run metadata left); one nbstripout run."""
    paths = [Path(paths)] if isinstance(paths, (str, os.PathLike)) else [Path(p) for p in paths]
    if not paths:
        return []
    said = _nbstripout(paths, "--verify").stdout
    return [p for p in paths if f"would have stripped {p}\n" in said]


def _strip_files(paths: list[Path], check: bool) -> int:
    dirty = unstripped(paths)
    if check:
        for p in dirty:
            print(f"{p}: has outputs or run metadata; run: make strip", file=sys.stderr)
        return 1 if dirty else 0
    strip(dirty)
    for p in dirty:
        print(f"stripped {p}")
    return 0


class Workspace(NamedTuple):
    """Where a notebook reads and writes (:func:`workspace`); ``figures_root`` None: save none."""

    results_root: Path
    figures_root: Path | None
    datasets_root: Path


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def workspace(notebook: str, scale: str, run: bool, results_root: str | os.PathLike | None = None,
              figures_root: str | os.PathLike | None = None,
              datasets_root: str | os.PathLike | None = None) -> Workspace:
    """Where a notebook reads and writes: a root that is given is used as given.

    A root left at None (a run from JupyterLab: papermill injects nothing):

    - ``run`` True: results go to ``build/scratch/NN/results``, figures to
      ``build/scratch/NN/figures``, never over ``data/results/`` or ``figures/``;
      what the run does not measure is read from the committed results, as
      :func:`lmdbio.lab.claims.resolve` does for every setting;
    - ``run`` False: the committed ``data/results`` are read and nothing is
      written: ``figures_root`` is None (:func:`save_figure` saves nothing; the
      figures are shown), and the closing cell does not rewrite ``claims.csv``;
    - datasets: ``data/datasets`` at the default scale (what ``make datasets``
      makes), ``data/datasets/<scale>`` at the others, so a tiny run never
      replaces the default datasets.

    ``make reproduce`` and ``make figures`` give ``data/results`` and ``figures``
    (``--committed``). Prints one line saying where this run reads and writes.
    """
    scratch = SCRATCH / notebook[:2]
    given = {"results": results_root is not None, "figures": figures_root is not None}
    results = Path(results_root if given["results"] else scratch / "results" if run else COMMITTED_RESULTS)
    figures = (Path(figures_root) if given["figures"] else scratch / "figures" if run else None)
    if datasets_root is not None:
        datasets = Path(datasets_root)
    else:
        datasets = DATASETS if scale == "default" else DATASETS / scale
    results, datasets = results.resolve(), datasets.resolve()
    figures = figures.resolve() if figures is not None else None
    if run:
        print(f"RUN = True: results go to {_shown(results)}/, figures to {_shown(figures)}/"
              + ("" if given["results"] else "; settings this run does not measure are read from "
                 "data/results/"))
    else:
        print(f"RUN = False: replotting the results in {_shown(results)}/; "
              + (f"figures go to {_shown(figures)}/" if figures is not None else "nothing is written"))
    return Workspace(results, figures, datasets)


def save_figure(fig, name: str, figures_root: str | os.PathLike | None) -> list[Path]:
    """Write ``figures_root/name.png`` and ``.svg`` (:func:`lmdbio.lab.plots.save`); with
    ``figures_root`` None (:func:`workspace` of a replot) write nothing: the figure is only shown."""
    if figures_root is None:
        return []
    from .plots import save

    return save(fig, name, figures_root)


def results_dir(results_root: str | os.PathLike, name: str) -> Path:
    """``results_root/name``, created."""
    d = Path(results_root) / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def save_results(out_dir: str | os.PathLike, tables: dict, config: dict) -> Path:
    """Write each DataFrame of ``tables`` as ``name.csv`` (``.csv.gz`` when large) and ``meta.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, df in tables.items():
        # Large tables (a row per page or record) are committed gzipped; plots.load reads both.
        f = out / (f"{name}.csv.gz" if len(df) > 20_000 else f"{name}.csv")
        for stale in (out / f"{name}.csv", out / f"{name}.csv.gz"):
            stale.unlink(missing_ok=True)
        df.to_csv(f, index=False)
        files.append(f.name)
    write_results_meta(out, config, scale=config.get("scale"), files=sorted(files))
    return out


def run_notebooks(scale: str = "default", out: str | os.PathLike = "build/notebooks", *,
                  run: bool = True, only: list[str] | None = None,
                  results_root: str | os.PathLike | None = None,
                  figures_root: str | os.PathLike | None = None,
                  datasets_root: str | os.PathLike | None = None,
                  extra: dict | None = None, timeout: int | None = None,
                  progress: bool = False, cluster: str | None = None,
                  jobs: int = 1, committed: bool = False) -> list[dict]:
    """Execute the notebooks in order; returns one ``{"notebook", "seconds", "ok"}`` per notebook.

    Each root given is passed to every notebook; one not given is left to the
    notebook (:func:`workspace`: ``build/scratch/NN/`` for a run, nothing
    written by a replot). ``committed`` gives ``data/results`` and ``figures``
    where ``results_root`` and ``figures_root`` are not given.

    ``jobs`` > 1 replots (``run=False`` only) that many notebooks side by side:
    they read results and write their own figures. Measuring notebooks always
    run one after the other (later ones read earlier ones' results, and two
    would share the cores they measure).

    ``cluster`` (``"mpi"`` or ``"slurm"``) is where the notebooks' engines run:
    it is passed to every ``MPICluster()`` through ``$LMDBIO_CLUSTER`` (the
    Slurm settings come from the user's config, see ``lmdbio.lab.cluster``).
    A measuring notebook gets one cluster of its ``n_engines`` for all its
    cells (:func:`lmdbio.lab.cluster.mpicluster.shared_cluster`), stopped after it,
    unless the caller holds a fitting one around this call: that one serves each
    notebook in turn (the tests' run of every notebook).

    Stops at the first failing notebook (its executed copy, with the
    traceback, is in ``out``) and raises papermill's error.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if jobs > 1 and run:
        raise ValueError("jobs > 1 replots side by side; measuring notebooks (run=True) run one at a time")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if committed:
        results_root = results_root or COMMITTED_RESULTS
        figures_root = figures_root or COMMITTED_FIGURES
    roots = {"results_root": results_root, "figures_root": figures_root, "datasets_root": datasets_root}
    params = {"scale": scale, "RUN": run,
              **{k: str(Path(v).resolve()) for k, v in roots.items() if v is not None}, **(extra or {})}
    # The engines' mpiexec and python come from this interpreter's environment.
    env_path = str(Path(sys.executable).parent)
    if env_path not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = env_path + os.pathsep + os.environ.get("PATH", "")
    old_cluster = os.environ.get(CLUSTER_ENV)
    if cluster:
        os.environ[CLUSTER_ENV] = cluster   # the kernels inherit it
    try:
        paths = notebooks(only)
        if jobs > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(jobs) as pool:
                parts = list(pool.map(lambda nb: _execute([nb], out, params, scale, run, progress, timeout),
                                      paths))
            done = [d for part in parts for d in part]
        else:
            done = _execute(paths, out, params, scale, run, progress, timeout)
    finally:
        if cluster:
            if old_cluster is None:
                os.environ.pop(CLUSTER_ENV, None)
            else:
                os.environ[CLUSTER_ENV] = old_cluster
    (out / "timings.json").write_text(json.dumps(
        {"scale": scale, "RUN": run, "total_s": round(sum(d["seconds"] for d in done), 1),
         "notebooks": done}, indent=2) + "\n")
    return done


def _execute(paths: list[Path], out: Path, params: dict, scale: str, run: bool, progress: bool,
             timeout: int | None) -> list[dict]:
    import papermill as pm

    done = []
    for nb in paths:
        t0 = time.monotonic()
        print(f"[notebooks] {nb.name} (scale={scale}, RUN={run}) ...", flush=True)
        mine = {k: v for k, v in params.items() if k != "model_ready" or nb.name.startswith("11_")}
        try:
            with _notebook_cluster(nb, scale, run, mine):
                # The kernel starts in notebooks/ (nbclient's resources path), never by papermill's
                # cwd=, which chdirs this process: with jobs > 1 one thread's chdir back would
                # start another's kernel in the wrong folder.
                pm.execute_notebook(str(nb), str(out / nb.name), parameters=mine, kernel_name="python3",
                                    resources={"metadata": {"path": str(nb.parent)}},
                                    progress_bar=progress, execution_timeout=timeout)
        except Exception:
            done.append({"notebook": nb.name, "seconds": time.monotonic() - t0, "ok": False})
            print(f"[notebooks] {nb.name} FAILED after {done[-1]['seconds']:.0f} s; "
                  f"see {out / nb.name}", flush=True)
            raise
        done.append({"notebook": nb.name, "seconds": round(time.monotonic() - t0, 1), "ok": True})
        print(f"[notebooks] {nb.name} done in {done[-1]['seconds']:.0f} s", flush=True)
    return done


def _notebook_cluster(nb: Path, scale: str, run: bool, params: dict):
    """One cluster for a measuring notebook's cells, of its ``n_engines`` (the most any cell asks).

    Starting one costs seconds and a notebook opens several ``MPICluster``
    blocks; a cell that asks for more engines starts its own. A replot or a
    notebook without engines gets none. A caller that already holds a fitting
    cluster (:func:`lmdbio.lab.cluster.shared_cluster` around ``run_notebooks``,
    as the tests' run of every notebook does) lends it to each notebook in turn,
    while its engines live.
    """
    from contextlib import nullcontext

    if not run or "MPICluster" not in nb.read_text():
        return nullcontext()
    from .cluster import shared, shared_cluster
    from .procs import pid_alive
    from .scales import cluster_kind

    n = settings(nb.stem, scale, n_engines=params.get("n_engines"))["n_engines"]
    held = shared.fitting(n, cluster_kind(), None, str(nb.parent))
    if held is not None and all(pid_alive(p["pid"]) for p in held["processes"]):
        return nullcontext()   # the kernel inherits $LMDBIO_SHARED_CLUSTER and attaches
    return shared_cluster(n, work_dir=nb.parent)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lmdbio.lab.notebook_runner",
                                description="Run the lmdbio notebooks in order with papermill.")
    p.add_argument("--scale", choices=SCALES, default="default")
    p.add_argument("--out", default="build/notebooks", help="where the executed notebooks go")
    p.add_argument("--replot", action="store_true",
                   help="RUN=False: only replot figures from the results files (no MPI)")
    p.add_argument("--only", nargs="*", help="notebook numbers or names, e.g. 00 09_scaling")
    p.add_argument("--committed", action="store_true",
                   help="write the committed data/results/ and figures/ (make reproduce, make figures); "
                        "without it, and without --results-root/--figures-root, each notebook writes "
                        "build/scratch/NN/ (RUN=True) or nothing (--replot)")
    p.add_argument("--results-root", help="default: data/results with --committed, else the notebook's")
    p.add_argument("--figures-root", help="default: figures with --committed, else the notebook's")
    p.add_argument("--datasets-root",
                   help="default: data/datasets at the default scale, else data/datasets/SCALE")
    p.add_argument("--timeout", type=int, default=None, help="seconds per cell (default: none)")
    p.add_argument("--jobs", type=int, default=1, help="with --replot: notebooks replotted side by side")
    p.add_argument("--cluster", choices=["mpi", "slurm"], default=None,
                   help="where the engines run (default: $LMDBIO_CLUSTER or local mpi)")
    p.add_argument("--model-ready", action="store_true",
                   help="the model's calibration and prediction in the results root were just made "
                        "(make reproduce's first step): notebook 11 shows them instead of redoing them")
    p.add_argument("--strip", action="store_true",
                   help="only strip outputs and run metadata from notebooks/*.ipynb (before committing)")
    p.add_argument("--check-stripped", action="store_true",
                   help="only check that notebooks/*.ipynb are stripped (exit 1 if not)")
    args = p.parse_args(argv)
    if args.strip or args.check_stripped:
        return _strip_files(notebooks(args.only), check=args.check_stripped)
    if args.model_ready and not (args.committed or args.results_root):
        p.error("--model-ready shows the model results in the results root: "
                "give --committed or --results-root")
    t0 = time.monotonic()
    try:
        done = run_notebooks(args.scale, args.out, run=not args.replot, only=args.only,
                             results_root=args.results_root, figures_root=args.figures_root,
                             datasets_root=args.datasets_root, timeout=args.timeout,
                             cluster=args.cluster, jobs=args.jobs, committed=args.committed,
                             extra={"model_ready": True} if args.model_ready else None)
    except Exception as exc:
        print(f"[notebooks] stopped: {type(exc).__name__}: {str(exc)[:2000]}", file=sys.stderr)
        return 1
    print(f"[notebooks] {len(done)} notebooks in {time.monotonic() - t0:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
