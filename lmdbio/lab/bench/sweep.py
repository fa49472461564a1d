"""Sweeps: every point under its own ``mpiexec -n P`` with a timeout; results files."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..cluster import mpich_segments, mpiexec, remove_orphan_segments
from .cache import DiskProbe
from .limit import RAW
from .point import variant_names
from .stats import SUMMARY_COLUMNS, failed_row, summarize
from .settings import (counter_delta, parse_storage, pfs_counters, verify_provenance_ahead,
                      with_prov_verify)

__all__ = ["variant_names", "make_points", "run_point_subprocess", "run_sweep", "write_results",
           "read_summary", "BASELINES"]

#: Added to every sweep before the asked-for variants: the limit and the two baselines.
BASELINES = ("lmdb", "lmdb-get")


def make_points(datasets: Sequence[str], variants: Sequence[str], procs: Sequence[int],
                caches: Sequence[str], batch_size: int, iters: int, warmup: int = 1,
                compute_time: float = 0.0, model_bytes: int = 0,
                ranks_per_node: int | None = None, readers_per_node: int = 1,
                baselines: bool = True, storage: str = "local",
                compute_step: float | None = None) -> list[dict]:
    """The points of a sweep; ``raw`` (and ``lmdb``, ``lmdb-get`` when ``baselines``) come first.

    ``compute_step`` (seconds per step and rank, DLIO's ``computation_time``)
    replaces ``compute_time`` (seconds per sample): each point gets
    ``compute_step * P / batch_size`` per sample, so every rank computes
    ``compute_step`` on its ``batch_size / P`` records of a step at any P.
    """
    known = set(variant_names())
    base = [b for b in BASELINES if b in known] if baselines else []
    order = [RAW] + base + [v for v in variants if v not in (RAW, *base)]
    points = []
    for ds in datasets:
        for p in procs:
            for cache in caches:
                for v in order:
                    points.append({"dataset": str(ds), "variant": v, "nprocs": int(p),
                                   "cache": cache, "batch_size": batch_size, "iters": iters,
                                   "warmup": warmup,
                                   "compute_time": compute_time if compute_step is None
                                   else compute_step * p / batch_size,
                                   "model_bytes": model_bytes, "ranks_per_node": ranks_per_node,
                                   "readers_per_node": readers_per_node, "storage": storage})
    return points


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_point_subprocess(point: dict, repeat: int, workdir: Path, timeout: float,
                         measure: bool = True, mpiexec_args: Sequence[str] = ()) -> tuple[list[dict], str]:
    """Run one point under ``mpiexec -n P``; returns (rows, stderr). Never raises for a bad point."""
    tag = f"{len(list(workdir.iterdir())):05d}"
    cfg_file = workdir / f"{tag}.config.json"
    res_file = workdir / f"{tag}.rows.json"
    cfg_file.write_text(json.dumps({"point": point, "repeat": repeat, "measure": measure}))
    cmd = [mpiexec(), *mpiexec_args, "-n", str(point["nprocs"]), sys.executable, "-m",
           "lmdbio.lab.bench", "_point", str(cfg_file), str(res_file)]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    segments = mpich_segments()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)

    def kill_job():
        # The whole session: mpiexec and every rank it started.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_job()
        stdout, stderr = proc.communicate()
        err = f"timeout after {timeout:g} s: {shlex.join(cmd)}\n{_tail(stderr or '')}"
        remove_orphan_segments(segments)   # killed ranks leave their MPICH segments
        return [failed_row(point, err, repeat)], stderr or ""
    except BaseException:
        kill_job()  # interrupted sweep: leave no job behind
        raise
    if proc.returncode != 0 or not res_file.exists():
        # The failing ranks' own reports first: stderr can be lost when mpiexec
        # tears the job down on MPI_Abort.
        reports = "".join(f.read_text() for f in sorted(workdir.glob(res_file.name + ".error.*")))
        err = (f"exit status {proc.returncode}: {shlex.join(cmd)}\n"
               f"{_tail(reports or (stdout or '') + chr(10) + (stderr or ''))}")
        remove_orphan_segments(segments)   # aborted ranks leave their MPICH segments
        return [failed_row(point, err, repeat)], stderr or ""
    rows = json.loads(res_file.read_text())["rows"]
    return rows, stderr or ""


def _pfs_nodes(points: Sequence[dict]) -> int:
    """Node views a PFS mount needs: the most nodes any point spreads its ranks over."""
    return max(1, max((math.ceil(p["nprocs"] / p["ranks_per_node"]) if p.get("ranks_per_node")
                       else 1) for p in points))


@contextlib.contextmanager
def _mounted(points: Sequence[dict]):
    """Mount an emulated PFS for each dataset folder the points read (pfs storage only).

    Yields ``{dataset: mount}``; every point then carries its mount and path.
    """
    kinds = {parse_storage(p.get("storage")) for p in points}
    pfs = [k for k in kinds if k[0] in ("pfs", "throttle", "shared")]
    if not pfs:
        yield {}
        return
    if len(kinds) > 1:
        raise ValueError("one storage per sweep: run local, pfs and throttle sweeps separately")
    if pfs[0][0] == "throttle":
        with _throttled(points, pfs[0][1]) as mounts:
            yield mounts
        return
    if pfs[0][0] == "shared":
        from .settings import shared_storage

        with shared_storage(points, pfs[0][1]) as mounts:
            yield mounts
        return
    profile = pfs[0][1]
    from .. import pfs as pfs_mod
    from lmdbio.format import db_file

    nodes = _pfs_nodes(points)
    mounts = {}
    with contextlib.ExitStack() as stack:
        by_src: dict[str, Any] = {}
        for ds in dict.fromkeys(p["dataset"] for p in points):
            folder = db_file(ds).parent
            src = str(folder.parent)
            if src not in by_src:
                by_src[src] = stack.enter_context(pfs_mod.mounted(src, profile=profile, nodes=nodes))
            mounts[ds] = (by_src[src], folder.name)
        for p in points:
            m, rel = mounts[p["dataset"]]
            p["pfs_mount"] = m.mnt
            p["pfs_relpath"] = rel
        yield mounts


@contextlib.contextmanager
def _throttled(points: Sequence[dict], profile: str):
    """Put the points' dataset folders on throttled loop devices, one per virtual node.

    Yields ``{dataset: (device, folder name)}``; every point then carries the
    mount, its path and the state file its ranks join their node's cgroup by.
    """
    from lmdbio.format import db_file
    from ..storage import throttled

    rpn = {p.get("ranks_per_node") for p in points}
    if None in rpn or len(rpn) != 1:
        raise ValueError("--storage throttle:PROFILE needs one --ranks-per-node for the sweep: it "
                         "sets the virtual nodes and each node's share of the profile's budget")
    folders = {ds: db_file(ds).parent for ds in dict.fromkeys(p["dataset"] for p in points)}
    with throttled(list(dict.fromkeys(folders.values())), nodes=_pfs_nodes(points),
                   profile=profile, ranks_per_node=rpn.pop()) as t:
        for p in points:
            p["pfs_mount"] = t.mnt
            p["pfs_relpath"] = folders[p["dataset"]].name
            p["throttle_state"] = t.state_file
        yield {ds: (t, f.name) for ds, f in folders.items()}


def run_sweep(points: Sequence[dict], out_dir, *, repeats: int = 1, timeout: float = 600,
              config: dict | None = None, progress: bool = True, measure: bool = True,
              mpiexec_args: Sequence[str] = ()) -> Any:
    """Run every point ``repeats`` times, each under its own mpiexec, and write the results.

    Repeats are the outer loop so slow drift hits every variant alike. The
    three files are rewritten after each point, so an interrupted sweep
    keeps what it measured. Points with ``storage="pfs:PROFILE"`` run on an
    emulated PFS mounted for the whole sweep (cold points are evicted on
    every node view; the model's counters join the rows). Sidecars that
    PROV points read are checked and stamped once before any timed run
    (:func:`~lmdbio.lab.bench.settings.verify_provenance_ahead`). Returns the
    summary DataFrame.
    """
    from tqdm.auto import tqdm

    points = [dict(p) for p in points]
    config = dict(config or {})
    config.setdefault("points", [dict(p) for p in points])
    config.setdefault("repeats", repeats)
    config.setdefault("timeout_s", timeout)
    rows: list[dict] = []
    failed = cold_warm = 0
    total = len(points) * repeats
    with tempfile.TemporaryDirectory(prefix="lmdbio-bench-") as tmp, _mounted(points) as mounts, \
            DiskProbe() as probe:
        tmp = Path(tmp)
        if mounts:   # the storage model the sweep ran on, with its sources, in meta.json
            config["pfs"] = _pfs_config(mounts)
        # PROV as a user runs it once the dataset is prepared: its sidecar checked and stamped
        # once, untimed (`lmdbio index --verify`); the cost is the rows' prov_verify_s.
        ahead = verify_provenance_ahead(points)
        if ahead:
            config["prov_verify"] = ahead
        bar = tqdm(total=total, unit="pt", disable=not progress, dynamic_ncols=True)
        try:
            for rep in range(repeats):
                for pt in points:
                    bar.set_description(f"{Path(pt['dataset']).name} {pt['cache']} "
                                        f"P={pt['nprocs']} {pt['variant']} r{rep}")
                    got = _run_once(pt, rep, mounts.get(pt["dataset"]), _pfs_nodes(points), probe,
                                    (tmp, timeout, measure, mpiexec_args))
                    failed_now, warm_now = _report_point(bar, pt, got)
                    failed += failed_now
                    cold_warm += warm_now
                    rows.extend(with_prov_verify(got, ahead))
                    write_results(out_dir, rows, config)
                    bar.update(1)
        finally:
            bar.close()
    if failed:
        print(f"lmdbio bench: {failed} of {total} points failed; see status/error in "
              f"{Path(out_dir) / 'summary.csv'}", file=sys.stderr)
    if cold_warm:
        print(f"lmdbio bench: WARNING: {cold_warm} cold point(s) were not cold (evict_ok=False)",
              file=sys.stderr)
    return read_summary(out_dir)


def _pfs_config(mounts: dict) -> dict:
    """The emulated PFS a sweep ran on, for ``meta.json``."""
    st = next(iter(mounts.values()))[0].stats()
    return {"kind": st.get("kind", "pfs"), "profile": st.get("profile"), "kernel": st.get("kernel"),
            "nodes": st.get("nodes"), "mounts": sorted({m.mnt for m, _ in mounts.values()})}


def _run_once(pt: dict, rep: int, mount, nodes: int, probe, run_args: tuple) -> list[dict]:
    """Repeat ``rep`` of point ``pt`` in its own mpiexec: its PFS node views evicted where cold,
    the disk probed, the model's counters over the point joined to its rows.

    ``mount`` is ``(mount, relpath)`` of the point's dataset (or None); ``run_args`` is
    :func:`run_point_subprocess`'s ``(tmp, timeout, measure, mpiexec_args)``.
    """
    before = {}
    if mount is not None:
        m, rel = mount
        if pt["cache"] == "cold" and hasattr(m, "evict"):
            for node in range(nodes):
                m.evict(node, rel)
        before = pfs_counters(m.stats())
    disk_bw = None
    if pt["cache"] == "cold" and str(pt.get("storage") or "local") == "local":
        # What the disk gives now (it drifts): the model's same-sitting disk_bw.
        disk_bw = probe.measure(pt["dataset"])
    got, _stderr = run_point_subprocess(pt, rep, *run_args)
    if disk_bw is not None:
        for r in got:
            r["disk_probe_bw"] = disk_bw
    if mount is not None and got and "pfs_requests" not in got[0]:
        # The model's counters over the whole point (setup and warmup too).
        span = counter_delta(before, pfs_counters(mount[0].stats()))
        for r in got:
            r.update(span, pfs_counters_span="point")
    return got


def _report_point(bar, pt: dict, got: list[dict]) -> tuple[int, int]:
    """A line under the progress bar for a failed point or a cold one that was not cold;
    returns (failed, not cold) as 0 or 1."""
    if got and got[0].get("status") == "failed":
        bar.write(f"lmdbio bench: point FAILED ({pt['variant']}, P={pt['nprocs']}, "
                  f"{pt['cache']}): {_tail(got[0]['error'], 3)}", file=sys.stderr)
        return 1, 0
    if got and got[0].get("evict_ok") is False:
        bar.write(f"lmdbio bench: WARNING: eviction did not work for {pt['variant']} "
                  f"P={pt['nprocs']}: {got[0].get('resident_fraction', float('nan')):.1%} "
                  "of the timed data was still cached", file=sys.stderr)
        return 0, 1
    return 0, 0


def write_results(out_dir, rows: Sequence[dict], config: dict) -> dict[str, Path]:
    """Write ``points.csv``, ``summary.csv`` and ``meta.json`` into ``out_dir``.

    Args:
        out_dir: folder (created).
        rows: tidy rows from :func:`run_point` (and :func:`failed_row`).
        config: the sweep's configuration, stored in meta.json.
    Returns:
        The three paths by name (``points``, ``summary``, ``meta``).
    """
    import pandas as pd

    from lmdbio.lab.meta import write_results_meta

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    points = pd.DataFrame(list(rows))
    lead = ["dataset", "dataset_name", "variant", "nprocs", "cache", "repeat", "rank",
            "is_reader", "level", "phase"]
    if len(points):
        points = points[[c for c in lead if c in points] + [c for c in points if c not in lead]]
        summary = summarize(points)
    else:
        summary = pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    paths = {"points": out / "points.csv", "summary": out / "summary.csv", "meta": out / "meta.json"}
    points.to_csv(paths["points"], index=False)
    summary.to_csv(paths["summary"], index=False)
    write_results_meta(out, config)
    return paths


def read_summary(out_dir):
    """summary.csv of a results folder as a DataFrame."""
    import pandas as pd

    f = Path(out_dir) / "summary.csv"
    if not f.exists():
        raise FileNotFoundError(f"no summary.csv in {out_dir}; run `lmdbio bench ... --out {out_dir}`")
    df = pd.read_csv(f, keep_default_na=True)
    missing = [c for c in ("variant", "nprocs", "cache", "status", "records_per_s") if c not in df.columns]
    if missing:
        raise ValueError(f"{f} is not an lmdbio bench summary (no {', '.join(missing)} column); "
                         f"give a folder that `lmdbio bench ... --out DIR` wrote")
    return df
