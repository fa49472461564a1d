"""Per-iteration time of each variant, split into phases, for a platform and a workload.

For one iteration of the slowest reader (every reader does the same work):

- **locate**: the Python cost of one ``read_batch()`` on a reader, cursor
  steps (mechanism 2), the leaf-page faults of the walk (1, 3), extent
  planning for DIO/PROV;
- **read**: storage time of the variant's data requests through the storage
  model (3, 4, 5) plus the CPU of copying out of the map or ``pread``;
  COAL reads ``k`` batches at once and counts ``1/k`` of it per iteration;
- **distribute**: the shared-memory hand-off to the group's members (LMM);
- **wait**: DM's ring, STAG's turn, and ranks outnumbering cores (the node's
  CPU demand / cores beyond the critical path);
- **compute**, **communicate**: the training emulation (lmdbio.lab.emulation):
  compute seconds per sample and a gradient allreduce.

``setup_s`` is paid once per run (DIO's index pass and scatter); ``total_s``
= setup + iterations x the sum of the phases.
"""

from __future__ import annotations

from lmdbio.errors import ConfigurationError
from lmdbio.options import VARIANTS
from . import phases
from .calibrate import Calibration, load_calibration
from .platform import Platform, Workload, load_platform
from .point import (PHASES, Point, explicit_depth, point, shared_probe_of,
                    storage_profile)

__all__ = ["PHASES", "explicit_depth", "predict_point", "predict", "storage_profile",
           "POWERS", "shared_probe_of", "row_of", "blend"]

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
        return "locating records (index/provenance arithmetic)"
    if ph == "read":
        if o.speculative:
            return "(DM) speculative prefetch: explicit requests, streams per target"
        if o.fetch == "mmap":
            return "(1)+(3) page faults: implicit small I/O, woken waiters"
        return "(4)+(5) explicit reads: request size vs stripe, streams per target"
    return "(LMM) shared-memory hand-off"


def predict(platform: Platform | str, procs, variants=("all",), workloads=None,
            cal: Calibration | None = None, budget: int = 20000, batches=None) -> list[dict]:
    """Rows for every workload x batch reading x variant x process count of a platform.

    ``batches``: the batch readings to run ("global", "per-process"); None
    runs each workload's own (its ``batch``). A reading a workload has no
    batch for is skipped.
    """
    plat = load_platform(platform) if not isinstance(platform, Platform) else platform
    cal = cal or load_calibration()
    names = list(VARIANTS) if (not variants or "all" in variants) else list(variants)
    wls = plat.workloads if not workloads else tuple(plat.workload(w) for w in workloads)
    if not wls:
        raise ConfigurationError(f"platform {plat.name!r} defines no [[workload]]")
    rows = []
    for w in wls:
        for reading in (batches or [w.batch]):
            if (w.batch_size if reading == "global" else w.batch_per_process) <= 0:
                continue
            wr = w.reading(reading)
            for v in names:
                for p in procs:
                    if wr.global_batch(int(p)) < int(p):
                        continue   # fewer records than processes: no run at this P
                    rows.append(predict_point(plat, wr, v, int(p), cal, budget=budget))
    return rows


