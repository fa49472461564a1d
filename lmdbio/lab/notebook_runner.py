"""Run the notebooks in order with papermill; results-file helpers the notebooks share.

    python -m lmdbio.lab.notebook_runner --scale default --out build/notebooks
    python -m lmdbio.lab.notebook_runner --replot --out build/replot     # RUN=False: figures only
    python -m lmdbio.lab.notebook_runner --scale tiny --only 00 01 --out /tmp/nb \\
        --results-root /tmp/r --figures-root /tmp/f --datasets-root /tmp/d

Each notebook gets the papermill parameters ``scale``, ``RUN``,
``results_root``, ``figures_root`` and ``datasets_root`` (absolute paths),
and runs with ``notebooks/`` as its working directory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from lmdbio.metrics import host_meta, write_results_meta
from .scales import CLUSTER_ENV, REPO, SCALES as _SCALES

__all__ = ["REPO", "NOTEBOOKS", "notebooks", "run_notebooks", "save_results", "host_meta",
           "results_dir", "strip", "unstripped", "STRIP_EXTRA_KEYS", "main"]

NOTEBOOKS = REPO / "notebooks"
SCALES = tuple(_SCALES)


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
                  jobs: int = 1) -> list[dict]:
    """Execute the notebooks in order; returns one ``{"notebook", "seconds", "ok"}`` per notebook.

    ``jobs`` > 1 replots (``run=False`` only) that many notebooks side by side:
    they read results and write their own figures. Measuring notebooks always
    run one after the other (later ones read earlier ones' results, and two
    would share the cores they measure).

    ``cluster`` (``"mpi"`` or ``"slurm"``) is where the notebooks' engines run:
    it is passed to every ``MPICluster()`` through ``$LMDBIO_CLUSTER`` (the
    Slurm settings come from the user's config, see ``lmdbio.lab.cluster``).

    Stops at the first failing notebook (its executed copy, with the
    traceback, is in ``out``) and raises papermill's error.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if jobs > 1 and run:
        raise ValueError("jobs > 1 replots side by side; measuring notebooks (run=True) run one at a time")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    params = {
        "scale": scale, "RUN": run,
        "results_root": str(Path(results_root or REPO / "data" / "results").resolve()),
        "figures_root": str(Path(figures_root or REPO / "figures").resolve()),
        "datasets_root": str(Path(datasets_root or REPO / "data" / "datasets").resolve()),
        **(extra or {}),
    }
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
            pm.execute_notebook(str(nb), str(out / nb.name), parameters=mine, kernel_name="python3",
                                cwd=str(nb.parent), progress_bar=progress, execution_timeout=timeout)
        except Exception:
            done.append({"notebook": nb.name, "seconds": time.monotonic() - t0, "ok": False})
            print(f"[notebooks] {nb.name} FAILED after {done[-1]['seconds']:.0f} s; "
                  f"see {out / nb.name}", flush=True)
            raise
        done.append({"notebook": nb.name, "seconds": round(time.monotonic() - t0, 1), "ok": True})
        print(f"[notebooks] {nb.name} done in {done[-1]['seconds']:.0f} s", flush=True)
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lmdbio.lab.notebook_runner",
                                description="Run the lmdbio notebooks in order with papermill.")
    p.add_argument("--scale", choices=SCALES, default="default")
    p.add_argument("--out", default="build/notebooks", help="where the executed notebooks go")
    p.add_argument("--replot", action="store_true",
                   help="RUN=False: only replot figures from the results files (no MPI)")
    p.add_argument("--only", nargs="*", help="notebook numbers or names, e.g. 00 09_scaling")
    p.add_argument("--results-root", help="default: data/results")
    p.add_argument("--figures-root", help="default: figures")
    p.add_argument("--datasets-root", help="default: data/datasets")
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
    t0 = time.monotonic()
    try:
        done = run_notebooks(args.scale, args.out, run=not args.replot, only=args.only,
                             results_root=args.results_root, figures_root=args.figures_root,
                             datasets_root=args.datasets_root, timeout=args.timeout,
                             cluster=args.cluster, jobs=args.jobs,
                             extra={"model_ready": True} if args.model_ready else None)
    except Exception as exc:
        print(f"[notebooks] stopped: {type(exc).__name__}: {str(exc)[:2000]}", file=sys.stderr)
        return 1
    print(f"[notebooks] {len(done)} notebooks in {time.monotonic() - t0:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
