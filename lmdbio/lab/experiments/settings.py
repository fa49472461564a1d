"""The settings of a claim notebook: local disk, emulated GPFS, throttled devices, the model."""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

from lmdbio.errors import LmdbioError

__all__ = ["NO_PFS_ENV", "pfs_unavailable", "emulated_pfs", "throttle_iters",
           "throttle_unavailable", "throttled_device", "setting_table", "settings_results",
           "model_series"]

#: Set to 1 to run the notebooks as on a machine without FUSE (their GPFS panels are replotted).
NO_PFS_ENV = "LMDBIO_NO_PFS"


def pfs_unavailable() -> str | None:
    """Why an emulated PFS cannot be mounted here (one sentence), or None when it can."""
    if os.environ.get(NO_PFS_ENV, "") not in ("", "0"):
        return f"${NO_PFS_ENV} is set (unset it to measure through the emulated GPFS)"
    try:
        from ..pfs.mount import check_fuse

        check_fuse()
    except LmdbioError as exc:
        return str(exc)
    return None


def _with_ranks_per_node(points: list[dict], ranks_per_node: int | None) -> list[dict]:
    """Copies of the points; a point without its own ``ranks_per_node`` takes ``ranks_per_node``."""
    return [{**p, "ranks_per_node": p.get("ranks_per_node") or ranks_per_node} for p in points]


@contextlib.contextmanager
def emulated_pfs(datasets_root: str | os.PathLike, points: list[dict], profile: str = "gpfs-2017",
                 ranks_per_node: int | None = None):
    """Mount ``datasets_root`` as an emulated PFS; yield the points rewritten to read through it.

    Each point keeps its ``ranks_per_node`` (or takes ``ranks_per_node``):
    ranks ``[k*rpn, (k+1)*rpn)`` form virtual node ``k`` and read through
    that node's view, with its own page cache, so a cold point evicts every
    node. The mount has as many node views as the widest point needs and is
    gone after the block (also if the client dies).
    """
    from .. import pfs
    from ..bench.settings import Storage

    pts = _with_ranks_per_node(points, ranks_per_node)
    nodes = max(math.ceil(q["nprocs"] / q["ranks_per_node"]) if q.get("ranks_per_node") else 1
                for q in pts)
    root = Path(datasets_root).resolve()
    with pfs.mounted(root, profile=profile, nodes=nodes) as m:
        for q in pts:
            rel = str(Path(q["dataset"]).resolve().relative_to(root))
            q["storage"] = Storage(f"pfs:{profile}", m.mnt, rel, q.get("ranks_per_node"))
        yield pts


def throttle_iters(cfg: dict, dataset: str) -> int:
    """Timed iterations of a throttled-device point of ``dataset``: ``pfs_iters``,
    raised to the scale's ``throttle_iters[dataset]`` where that is larger."""
    return max(int(cfg["pfs_iters"]), int(cfg.get("throttle_iters", {}).get(dataset, 0)))


def throttle_unavailable(cfg: dict | None = None) -> str | None:
    """Why throttled loop devices cannot be used here (one sentence), or None when they can.

    With ``cfg`` (a notebook's settings), an empty ``throttle_procs`` is a reason too.
    """
    if cfg is not None and not cfg.get("throttle_procs"):
        return f"the {cfg.get('scale', '?')} scale runs no throttled points here (throttle_procs is empty)"
    from ..storage import throttle_available

    ok, why = throttle_available()
    return None if ok else why


@contextlib.contextmanager
def throttled_device(datasets_root: str | os.PathLike, points: list[dict], profile: str = "gpfs-2017",
                     ranks_per_node: int | None = None):
    """Put the points' datasets on throttled loop devices; yield the points rewritten to read there.

    The throttled twin of :func:`emulated_pfs`: one read-only loop device,
    mount and blkio cgroup per virtual node of ``ranks_per_node`` ranks
    (:func:`lmdbio.lab.storage.throttled`), each node's budget a share of the
    profile's client; each rank joins its node's cgroup for the point. Only
    the datasets the points read go on the image. Everything is gone after
    the block.
    """
    from ..bench.settings import Storage
    from ..storage import throttled

    pts = _with_ranks_per_node(points, ranks_per_node)
    rpn = {q["ranks_per_node"] for q in pts}
    if len(rpn) != 1 or None in rpn:
        raise ValueError(f"throttled points need one ranks_per_node (it sets each node's share), got {rpn}")
    rpn = rpn.pop()
    nodes = max(math.ceil(q["nprocs"] / rpn) for q in pts)
    dirs = sorted({str(Path(q["dataset"]).resolve()) for q in pts})
    with throttled(dirs, nodes=nodes, profile=profile, ranks_per_node=rpn) as t:
        for q in pts:
            q["storage"] = Storage(f"throttle:{profile}", t.mnt, Path(q["dataset"]).resolve().name,
                                   rpn, t.state_file)
        yield pts


def setting_table(folder: str | os.PathLike):
    """One setting's throughput per variant and P: median, min and max over the repeats.

    Reads ``summary.csv`` (a sweep) or ``rows.csv`` (timelines: records over
    the point's wall time, per coalescing and stagger size).
    """
    import pandas as pd

    folder = Path(folder)
    if (folder / "summary.csv").exists():
        df = pd.read_csv(folder / "summary.csv")
        df = df[df["status"] == "ok"] if "status" in df else df
        keys = ["variant", "nprocs"]
    else:
        rows = pd.read_csv(folder / "rows.csv")
        keys = [k for k in ("variant", "nprocs", "coalesce_bytes", "stagger_size") if k in rows]
        point = keys + [k for k in ("cache", "repeat") if k in rows]
        df = rows.groupby(point, dropna=False).agg(records=("records", "first"),
                                                    wall=("wall_s_total", "max")).reset_index()
        df["records_per_s"] = df["records"] / df["wall"]
    cols = {"records_per_s": ["median", "min", "max", "size"]}
    if "speedup_vs_lmdb" in df:
        cols["speedup_vs_lmdb"] = ["median", "min", "max"]
    table = df.groupby(keys, dropna=False).agg(cols)
    table.columns = [f"{a}_{b}" if b != "size" else "repeats" for a, b in table.columns]
    return table


def settings_results(results: str | os.PathLike, name: str, *, ran: bool) -> Path:
    """The folder a setting's results are read from: ``results/name``, else the committed copy.

    ``results`` is the notebook's results folder (``results_root/NN_name``).
    When nothing was written there (``ran`` False and no results), the
    committed ``data/results/NN_name/name`` is used and a line says so
    (:func:`lmdbio.lab.claims.resolve` decides, as it does for the verdicts).
    """
    from ..claims import resolve
    from ..scales import REPO

    results = Path(results)
    d, source = resolve(results.parent, results.name, name, fallback=not ran)
    if source == "committed":
        print(f"{name}: replotted from the committed results in {d.relative_to(REPO)}")
    return d


def model_series(out_dir: str | os.PathLike, variants, workloads, cfg: dict, *,
                 results_root: str | os.PathLike | None = None) -> Path:
    """Predict ``variants`` x ``workloads`` at ``cfg["model_procs"]`` on ``cfg["model_platform"]``.

    Uses the calibration in ``results_root/model_calibration`` when there
    (notebook 11 writes it), else the committed one; writes
    ``out_dir/predictions.csv`` and ``meta.json`` (calibration and platform
    sources included). Pure Python: no MPI, no FUSE, seconds.
    """
    from ..model import load_calibration, load_platform, predict, write_predictions
    from ..scales import COMMITTED_RESULTS

    cal_dir = Path(results_root or COMMITTED_RESULTS) / "model_calibration"
    if not (cal_dir / "calibration.json").exists():
        cal_dir = COMMITTED_RESULTS / "model_calibration"
    cal = load_calibration(cal_dir)
    plat = load_platform(cfg["model_platform"])
    rows = predict(plat, cfg["model_procs"], list(variants), workloads=list(workloads), cal=cal,
                   budget=cfg["model_budget"])
    write_predictions(rows, out_dir, {**cfg, "variants": list(variants),
                                      "workloads": list(workloads)}, plat, cal, cal_dir)
    return Path(out_dir)
