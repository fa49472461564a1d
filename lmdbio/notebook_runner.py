"""Run the notebooks in order with papermill; results-file helpers the notebooks share.

    python -m lmdbio.notebook_runner --scale default --out build/notebooks
    python -m lmdbio.notebook_runner --replot --out build/replot     # RUN=False: figures only
    python -m lmdbio.notebook_runner --scale tiny --only 00 01 --out /tmp/nb \\
        --results-root /tmp/r --figures-root /tmp/f --datasets-root /tmp/d

Each notebook gets the papermill parameters ``scale``, ``RUN``,
``results_root``, ``figures_root`` and ``datasets_root`` (absolute paths),
and runs with ``notebooks/`` as its working directory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .metrics import git_commit, host_meta
from .scales import CLUSTER_ENV, REPO, SCALES as _SCALES

__all__ = ["REPO", "NOTEBOOKS", "notebooks", "run_notebooks", "save_results", "host_meta",
           "results_dir", "strip", "unstripped", "main"]

NOTEBOOKS = REPO / "notebooks"
SCALES = tuple(_SCALES)


def notebooks(only: list[str] | None = None, root: Path = NOTEBOOKS) -> list[Path]:
    """The ordered notebooks ``NN_name.ipynb``; ``only`` filters by number or name prefix."""
    found = sorted(p for p in root.glob("[0-9][0-9]_*.ipynb"))
    if only:
        found = [p for p in found if any(p.stem == o or p.stem.startswith(o) for o in only)]
    return found


#: The only notebook-level metadata a committed notebook keeps.
KEEP_METADATA = ("kernelspec", "language_info")


def strip(nb):
    """The notebook as it is committed: no outputs, no execution counts, no cell or run metadata.

    Cells keep their ``tags`` (papermill's ``parameters``); the notebook keeps
    ``kernelspec`` and the language name. Edits made in JupyterLab survive;
    only what running it adds goes.
    """
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in KEEP_METADATA}
    if "language_info" in nb.metadata:
        nb.metadata["language_info"] = {"name": nb.metadata["language_info"].get("name", "python")}
    for cell in nb.cells:
        tags = cell.metadata.get("tags")
        cell.metadata = {"tags": tags} if tags else {}
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def unstripped(path: str | os.PathLike) -> bool:
    """True when the file on disk differs from its stripped form (outputs or run metadata left)."""
    import nbformat

    text = Path(path).read_text()
    clean = nbformat.writes(strip(nbformat.reads(text, as_version=4)))
    return text.rstrip("\n") != clean.rstrip("\n")


def _strip_files(paths: list[Path], check: bool) -> int:
    import nbformat

    dirty = [p for p in paths if unstripped(p)]
    if check:
        for p in dirty:
            print(f"{p}: has outputs or run metadata; run: python -m lmdbio.notebook_runner --strip",
                  file=sys.stderr)
        return 1 if dirty else 0
    for p in dirty:
        nb = strip(nbformat.read(p, as_version=4))
        nbformat.write(nb, p)
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
    meta = {"host": host_meta(), "git_commit": git_commit(),
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "config": config,
            "scale": config.get("scale"), "files": sorted(files)}
    (out / "meta.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return out


def run_notebooks(scale: str = "default", out: str | os.PathLike = "build/notebooks", *,
                  run: bool = True, only: list[str] | None = None,
                  results_root: str | os.PathLike | None = None,
                  figures_root: str | os.PathLike | None = None,
                  datasets_root: str | os.PathLike | None = None,
                  extra: dict | None = None, timeout: int | None = None,
                  progress: bool = False, cluster: str | None = None) -> list[dict]:
    """Execute the notebooks in order; returns one ``{"notebook", "seconds", "ok"}`` per notebook.

    ``cluster`` (``"mpi"`` or ``"slurm"``) is where the notebooks' engines run:
    it is passed to every ``MPICluster()`` through ``$LMDBIO_CLUSTER`` (the
    Slurm settings come from the user's config, see ``lmdbio.cluster``).

    Stops at the first failing notebook (its executed copy, with the
    traceback, is in ``out``) and raises papermill's error.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
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
        done = _execute(notebooks(only), out, params, scale, run, progress, timeout)
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
        try:
            pm.execute_notebook(str(nb), str(out / nb.name), parameters=params, kernel_name="python3",
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
    p = argparse.ArgumentParser(prog="python -m lmdbio.notebook_runner",
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
    p.add_argument("--cluster", choices=["mpi", "slurm"], default=None,
                   help="where the engines run (default: $LMDBIO_CLUSTER or local mpi)")
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
                             cluster=args.cluster)
    except Exception as exc:
        print(f"[notebooks] stopped: {type(exc).__name__}: {str(exc)[:2000]}", file=sys.stderr)
        return 1
    print(f"[notebooks] {len(done)} notebooks in {time.monotonic() - t0:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
