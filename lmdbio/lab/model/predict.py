"""Per-iteration time of each variant, split into phases, for a platform and a workload.

One iteration of the slowest reader is locate + read + distribute + wait + compute +
communicate; ``total_s`` = ``setup_s`` (paid once per run) + iterations x their sum. Each phase's
mechanisms and equations: :mod:`lmdbio.lab.model.phases` and ``docs/model.md``.
"""

from __future__ import annotations

import multiprocessing
import os

from lmdbio.errors import ConfigurationError
from lmdbio.options import VARIANTS
from . import phases
from .calibrate import Calibration, load_calibration
from .platform import Platform, Workload, load_platform
from .point import (PHASES, Point, explicit_depth, point, shared_probe_of,
                    storage_profile)

__all__ = ["PHASES", "explicit_depth", "predict_point", "predict", "storage_profile",
           "POWERS", "shared_probe_of", "row_of", "blend", "forked_map"]

#: The poster's x axis.
POWERS = (1, 2, 4, 8, 16, 36, 72, 144, 288, 576, 1152, 2304, 4608, 9216)


def predict_point(platform: Platform, workload: Workload, variant: str, nprocs: int,
                  cal: Calibration, *, cache: str | None = None, budget: int = 20000) -> dict:
    """One row: per-iteration phases, setup and total seconds, and what dominates.

    The batch is read as ``workload.batch`` says (a fixed global batch, or a
    fixed batch per process); a run longer than the data set wraps into
    further epochs (``epochs`` in the row says how many). Each mechanism is a
    function of :mod:`lmdbio.lab.model.phases`; ``docs/model.md`` has the equations.
    """
    pt = point(platform, workload, variant, nprocs, cal, cache, budget)
    o = pt.o
    phases.fixed_batch(pt)
    phases.cursor_walk(pt)
    if o.fetch == "mmap":
        copy_cpu = phases.mmap_copy_cpu(pt)
        if o.locate == "ring" and pt.R > 1:
            phases.ring_turn(pt)
        if not pt.cold:
            pt.ph["read"] += copy_cpu
        elif o.speculative:
            phases.read_speculative(pt, copy_cpu)
        else:
            phases.read_walk_faults(pt, copy_cpu)
    else:
        cpu = phases.explicit_cpu(pt)
        if not pt.cold:
            pt.ph["read"] += cpu
        else:
            phases.read_explicit(pt, cpu)
    if o.locate == "index":
        phases.index_setup(pt)
    pt.ph["wait"] += pt.ring_wait
    # Ranks per core: a member's CPU per batch and a reader's CPU grow with it (measured at two
    # points by calibrate: alone and eight ranks per core).
    per_core = pt.n_node * (pt.nodes if platform.cores_shared else 1) / pt.cores
    member_s = cal.member_s(per_core)
    phases.training(pt, member_s)
    bound = phases.cpu_sharing(pt, member_s, cal.cpu_factor(per_core))
    row = row_of(pt, bound)
    reuse = phases.epoch_reuse(pt)
    if reuse > 0:
        warm = predict_point(platform, workload, variant, nprocs, cal, cache="warm", budget=budget)
        row = blend(row, warm, reuse)
    return row


def blend(cold: dict, warm: dict, share: float) -> dict:
    """``cold`` with a ``share`` of its iterations at ``warm``'s phases (a page cache kept across
    epochs); the setup and the storage counters of the first epoch stay."""
    row = dict(cold)
    for x in PHASES:
        row[f"{x}_s"] = (1 - share) * cold[f"{x}_s"] + share * warm[f"{x}_s"]
    row["per_iteration_s"] = sum(row[f"{x}_s"] for x in PHASES)
    row["total_s"] = row["setup_s"] + row["iterations"] * row["per_iteration_s"]
    row["storage_requests"] = (1 - share) * cold["storage_requests"]
    row["storage_bytes"] = (1 - share) * cold["storage_bytes"]
    row["epoch_cache_share"] = share
    return row


def row_of(pt: Point, cpu_bound: bool) -> dict:
    """The prediction row of a point whose phases are filled in."""
    ph, w = pt.ph, pt.workload
    per_iter = sum(ph.values())
    io_phases = {x: ph[x] for x in ("locate", "read", "distribute", "wait")}
    row = {"platform": pt.platform.name, "workload": w.name,
           "variant": pt.o.name if pt.o.localized else "lmdb", "nprocs": pt.P, "nodes": pt.nodes,
           "cache": pt.cache, "batch": w.batch, "iterations": w.iterations, "global_batch": pt.B,
           "record_bytes": pt.s, "records": pt.N, "epochs": w.iterations * pt.B / pt.N,
           "total_s": pt.setup + w.iterations * per_iter, "setup_s": pt.setup,
           "per_iteration_s": per_iter, **{f"{x}_s": v for x, v in ph.items()},
           "dominant_phase": max(ph, key=ph.get), "dominant_io_phase": max(io_phases, key=io_phases.get),
           **pt.info}
    row["dominant_mechanism"] = dominant_mechanism(row, pt.o, cpu_bound)
    return row


def dominant_mechanism(row: dict, o, cpu_bound: bool) -> str:
    """The mechanism behind the largest I/O phase, in the papers' words."""
    ph = row["dominant_io_phase"]
    if ph == "wait":
        if cpu_bound:
            return "ranks outnumber cores (CPU sharing)"
        if o.locate == "ring":
            return "(2) DM's cursor ring, one reader after another"
        return "(5) STAG's turns / storage contention"
    if ph == "locate":
        if o.locate == "walk":
            return "(2) cursor walk past earlier ranks' records (+ its page faults)"
        if o.locate == "ring":
            return "(2) DM's cursor walk from the cursor handed over (+ its page faults)"
        return "locating records (index/provenance arithmetic)"
    if ph == "read":
        if o.speculative:
            return "(DM) speculative prefetch: explicit requests, streams per target"
        if o.fetch == "mmap":
            return "(1)+(3) page faults: implicit small I/O, woken waiters"
        return "(4)+(5) explicit reads: request size vs stripe, streams per target"
    return "(LMM) shared-memory hand-off"


def predict(platform: Platform | str, procs, variants=("all",), workloads=None,
            cal: Calibration | None = None, budget: int = 20000, batches=None,
            jobs: int | None = 1) -> list[dict]:
    """Rows for every workload x batch reading x variant x process count of a platform.

    ``batches``: the batch readings to run ("global", "per-process"); None
    runs each workload's own (its ``batch``). A reading a workload has no
    batch for is skipped. ``jobs``: processes (:func:`forked_map`; None: every core).
    """
    plat = load_platform(platform) if not isinstance(platform, Platform) else platform
    cal = cal or load_calibration()
    names = list(VARIANTS) if (not variants or "all" in variants) else list(variants)
    wls = plat.workloads if not workloads else tuple(plat.workload(w) for w in workloads)
    if not wls:
        raise ConfigurationError(f"platform {plat.name!r} defines no [[workload]]")
    points = []
    for w in wls:
        for reading in (batches or [w.batch]):
            if (w.batch_size if reading == "global" else w.batch_per_process) <= 0:
                continue
            wr = w.reading(reading)
            # Fewer records than processes: no run at that P.
            points += [(wr, v, int(p)) for v in names for p in procs if wr.global_batch(int(p)) >= int(p)]
    return list(forked_map(lambda x: predict_point(plat, *x, cal, budget=budget), points, jobs))


def forked_map(fn, items, jobs: int | None = None):
    """``fn`` over ``items``, results in order, in ``jobs`` forked processes (default: every core).

    Forked workers inherit ``fn`` and the items (a platform and a calibration do not pickle);
    only the items' indices and the results travel. ``jobs`` 1 runs here.
    """
    items = list(items)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(items)))
    if jobs == 1:
        yield from map(fn, items)
        return
    _FORKED[0] = lambda k: fn(items[k])
    pool = multiprocessing.get_context("fork").Pool(jobs)
    try:
        yield from pool.imap(_forked, range(len(items)))
    finally:
        pool.close()
        pool.join()
        _FORKED[0] = None


_FORKED: list = [None]


def _forked(k: int):
    return _FORKED[0](k)
