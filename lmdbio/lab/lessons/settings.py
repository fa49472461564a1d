"""A claim in every setting, in one notebook call: :func:`show_settings`.

Each claim notebook (02-10) measures its points on local disk itself, then
the same points in the other settings: the emulated GPFS (FUSE), the
throttled block device (root), the shared throttled target (``make
bench-shared``, replotted only) and the scale model (seconds). What the
settings are and why is in ``docs/storage.md``; this module is the plumbing
that used to be five cells in every notebook.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable

import pandas as pd

__all__ = ["show_settings", "measure_settings", "save_rows", "save_timelines"]

SETTING_TITLES = {
    "gpfs": "(b) emulated GPFS (FUSE, storage model)",
    "throttled": "(b2) throttled block device (root, blkio)",
    "shared": "(b3) one shared throttled target (make bench-shared)",
    "model": "(c) the scale model at the papers' scale (notebook 11)",
}


def save_rows(out_dir: Path, rows: list[dict], meta: dict) -> None:
    """Save bench rows (``lmdbio.lab.bench.write_results``: rows and summary)."""
    from ..bench import write_results

    write_results(out_dir, rows, meta)


def save_timelines(out_dir: Path, rows: list[dict], meta: dict) -> None:
    """Save per-batch timeline rows as ``rows.csv``."""
    from ..notebook_runner import save_results

    save_results(out_dir, {"rows": pd.DataFrame(rows)}, meta)


def measure_settings(cfg: dict, *, run: bool, results: Path, datasets: Path, specs: list[dict],
                     points: Callable[..., list[dict]], sweep: Callable, save: Callable,
                     throttle_dataset: str, model_variants, model_workloads,
                     results_root: Path) -> dict[str, Path]:
    """Measure ``points`` on the emulated GPFS and the throttled device, and predict the model.

    ``points(procs, iters, repeats, caches=..., rpn=...)`` builds the
    notebook's points; ``sweep(cluster, points)`` runs them; ``save(dir,
    rows, meta)`` writes them. A setting that cannot run here (no FUSE, not
    root) or is not asked for (``run`` False) is read from the committed
    results, and a line says so. Returns the folder each setting is read from.
    """
    from ..cluster import MPICluster
    from ..experiments import (emulated_pfs, ensure_datasets, model_series, pfs_unavailable,
                               settings_results, throttle_iters, throttle_unavailable, throttled_device)

    results = Path(results)
    where: dict[str, Path] = {}
    # Per measured setting: why it cannot run here (None: it can), its points' P and iterations,
    # the context that puts the points on it, the storage it records, and the line when it cannot.
    measured = (
        ("gpfs", pfs_unavailable(), cfg["pfs_procs"], cfg["pfs_iters"],
         lambda pts: emulated_pfs(datasets, pts, cfg["pfs_profile"]), "pfs:" + cfg["pfs_profile"],
         "The emulated GPFS cannot be mounted here"),
        ("throttled", throttle_unavailable(cfg), cfg["throttle_procs"], throttle_iters(cfg, throttle_dataset),
         lambda pts: throttled_device(datasets, pts, cfg["throttle_profile"]),
         "throttle:" + cfg["throttle_profile"], "The throttled device is not used here"),
    )
    for name, missing, procs, iters, on_setting, storage, cannot in measured:
        if run and missing is None:
            with MPICluster(n=cfg["n_engines"]) as cluster:
                ensure_datasets(cluster, specs)
                pts = points(procs, iters, cfg["pfs_repeats"], caches=("cold",), rpn=cfg["pfs_ranks_per_node"])
                with on_setting(pts) as pts:
                    rows = sweep(cluster, pts)
            save(results / name, rows, {**cfg, "storage": storage})
        elif run:
            print(f"{cannot}: {missing}")
        where[name] = settings_results(results, name, ran=run and missing is None)

    # make bench-shared (root, longer than make reproduce); python -m lmdbio.lab.claims copies its points here
    where["shared"] = settings_results(results, "shared", ran=False)

    if run:
        model_series(results / "model", tuple(model_variants), list(model_workloads), cfg,
                     results_root=results_root)
    where["model"] = settings_results(results, "model", ran=run)
    return where


def committed_notes(results: Path, where: dict[str, Path]) -> dict[str, str]:
    """The note under each measured panel drawn from the committed results, not from this run's.

    In a replot (``results`` is the committed folder) every panel is committed and the title
    says so; in a run, a panel read from ``data/results`` says "committed, default scale", so
    that a tiny run's title does not pass for it.
    """
    from ..scales import COMMITTED_RESULTS

    results = Path(results)
    replot = results.resolve().is_relative_to(Path(COMMITTED_RESULTS).resolve())
    notes = {}
    for setting in ("gpfs", "throttled"):
        d = where.get(setting)
        if d is not None and Path(d) != results / setting and not replot:
            notes[setting] = "committed, default scale: replotted from data/results"
    notes["shared"] = "make bench-shared, committed, default scale: replotted from data/results"
    return notes


def show_settings(claim_id: str, *, results_root: Path, results: Path, figures: Path | None, meta: dict,
                  where: dict[str, Path], name: str):
    """Draw claim ``claim_id`` in every setting (the settings figure) and save it as ``name``.

    ``where`` is what :func:`measure_settings` returned: a setting read from
    the committed results says so in its panel.
    """
    from .. import claims, plots
    from ..notebook_runner import save_figure

    claim = claims.claim(claim_id)
    results = Path(results)
    notes = committed_notes(results, where)
    fig = plots.claim_settings(claim, claims.series(claim, results_root),
                               claims.evaluate(results_root, [claim], checks=True), meta, notes)
    save_figure(fig, name, figures)
    return fig
