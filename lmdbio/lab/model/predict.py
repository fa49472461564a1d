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

import math
from dataclasses import asdict, fields
from pathlib import Path

from lmdbio.errors import ConfigurationError
from lmdbio.options import VARIANTS, parse_variant
from . import mechanisms as mech
from .calibrate import Calibration, load_calibration
from .platform import Platform, Workload, load_platform
from .streams import Stream, disk_profile, run_phase

__all__ = ["PHASES", "explicit_depth", "predict_point", "predict", "write_predictions", "storage_profile",
           "POWERS", "estimate_ends", "sensitivity"]

PHASES = ("locate", "read", "distribute", "wait", "compute", "communicate")
#: The poster's x axis.
POWERS = (1, 2, 4, 8, 16, 36, 72, 144, 288, 576, 1152, 2304, 4608, 9216)


def storage_profile(platform: Platform, cal: Calibration, cache: str):
    """The storage the readers see: None for a warm page cache."""
    if cache == "warm":
        return None
    if platform.storage == "disk":
        return disk_profile(cal.disk_latency_s, cal.disk_bw, cal.disk_readahead, cal.disk_max_request)
    from dataclasses import replace

    from ..pfs.model import load_profile

    prof = load_profile(platform.storage, time_scale=platform.storage_time_scale)
    if platform.storage_overrides:
        # Values at the real system's scale, as profiles.toml holds them: scale them like the rest.
        f = prof.time_scale
        scale = {"latency_s": f, "seek_s": f, "target_bw": 1 / f, "node_link_bw": 1 / f}
        prof = replace(prof, **{k: (type(getattr(prof, k) if getattr(prof, k) is not None else 1.0)(v)
                                    * scale.get(k, 1)) for k, v in platform.storage_overrides})
    return prof


def explicit_depth(platform: Platform, cal: Calibration) -> tuple[float, str]:
    """Requests in flight for a large explicit read on this platform, and where it comes from.

    The platform's ``explicit_inflight`` when set; else, for an emulated PFS
    profile, the calibration's measured ``pfs_inflight``; else (the local
    disk, or a calibration without the PFS measurement) :data:`mech.IN_FLIGHT`.
    """
    if platform.explicit_inflight:
        return float(platform.explicit_inflight), f"platform {platform.name}: explicit_inflight"
    if platform.storage != "disk":
        d = getattr(cal, "pfs_inflight", float("nan"))
        if math.isfinite(d) and d >= 1.0:
            return float(d), ("calibration: pfs_inflight, a cold 4 MiB pread through an lmdbio.lab.pfs "
                              "mount (calibration.json: pfs_inflight_source)")
        if math.isfinite(d) and d > 0:
            return 1.0, f"calibration: pfs_inflight {d:.3f} < 1, taken as 1"
        return float(mech.IN_FLIGHT), ("estimate: mechanisms.IN_FLIGHT (the calibration has no "
                                       "pfs_inflight: " + cal.pfs_inflight_source + ")")
    return float(mech.IN_FLIGHT), "estimate: mechanisms.IN_FLIGHT (FUSE/block-layer async readahead)"


def _faulters(path: str):
    return _faulters_cached(path) if path else ()


from functools import lru_cache  # noqa: E402


@lru_cache(maxsize=8)
def _faulters_cached(path: str):
    return mech.load_faulters(path)


@lru_cache(maxsize=8)
def _requests_curve(path: str):
    from .requests import load_curve

    return load_curve(path) if path else ()


@lru_cache(maxsize=8)
def _leaf_cut(path: str):
    """The measured cached / plain time factor of ``path`` as a function of the read's bytes."""
    from .leafcut import load, ratio_at

    table = load(path)
    return lambda nbytes: ratio_at(nbytes, table)


@lru_cache(maxsize=8)
def _shared_probe(path: str):
    from .sharedprobe import load_probe

    return load_probe(path)


def shared_probe_of(platform: Platform):
    """The shared target's probe (:class:`~lmdbio.lab.model.sharedprobe.Probe`) when the
    platform's storage is a ``shared:*`` profile and names one; else None."""
    name = str(getattr(platform.storage, "name", platform.storage))
    if not (name.startswith("shared:") and platform.shared_probe):
        return None
    return _shared_probe(platform.shared_probe)


@lru_cache(maxsize=8)
def _speculation(path: str) -> dict:
    # Without a measurement: every page advised in time, nothing extra.
    return mech.load_speculation(path) if path else {"miss": 0.0, "issued": 1.0, "served": 1.0}


def _phase_time(profile, nodes, streams, budget, pagepool: int = 0) -> tuple[float, dict]:
    if profile is None or not streams:
        return 0.0, {}
    times, counters = run_phase(profile, nodes, streams, budget, cache_bytes=pagepool)
    return max(times), counters


def predict_point(platform: Platform, workload: Workload, variant: str, nprocs: int,
                  cal: Calibration, *, cache: str | None = None, budget: int = 20000) -> dict:
    """One row: per-iteration phases, setup and total seconds, and what dominates.

    The batch is read as ``workload.batch`` says (a fixed global batch, or a
    fixed batch per process); a run longer than the data set wraps into
    further epochs, each read from storage again (no cache across
    iterations: ``epochs`` in the row says how many).
    """
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive integer, got {nprocs!r}")
    o = parse_variant(variant, coalesce_bytes=platform.coalesce_bytes,
                      stagger_size=platform.stagger_size or None)
    cache = cache or platform.cache
    P = nprocs
    rpn = platform.ranks_per_node or P
    n_node = min(P, rpn)
    nodes = math.ceil(P / rpn)
    cores = platform.cores_per_node or cal.cores
    geo = mech.geometry(workload.record_bytes, workload.key_bytes)
    rpl, ppr, f = geo["records_per_leaf"], geo["pages_per_record"], geo["file_bytes_per_record"]
    s = workload.record_bytes
    B = workload.global_batch(P)
    if B < P:
        raise ConfigurationError(f"global batch {B} is smaller than {P} processes")
    b = B / P
    # The data set: fixed (its records), or as many records as the run reads.
    N = workload.records or workload.iterations * B
    profile = storage_profile(platform, cal, cache)
    ra = profile.readahead if profile is not None else 0
    inflight, _ = explicit_depth(platform, cal)
    pool = platform.pagepool
    # The requests-per-read curve and DM's speculation were measured through the emulated PFS
    # (a FUSE mount): used for PFS profiles, not for the local disk or the throttled device,
    # whose kernel paths differ (there, the formula and an advice that arrives in time).
    pfs = isinstance(platform.storage, str) and platform.storage != "disk"
    curve = _requests_curve(platform.requests_per_read) if pfs else ()
    spec_file = platform.speculation if pfs else ""
    rsize = profile.read_size if profile is not None else 1 << 20
    # The share of the CPU between cold reads that readahead hides: measured on the local disk.
    hide = (cal.disk_read_overlap if platform.storage == "disk"
            and getattr(cal, "disk_read_overlap", None) is not None else 1.0)
    # The shared target: what a node's reads become at S, measured there (sharedprobe).
    probe = shared_probe_of(platform)
    cap = probe.node_max_request if probe is not None else None
    faulters = _faulters(probe.faulters_csv) if probe is not None else _faulters(platform.faulters)
    alpha = (platform.net_alpha_s or cal.mpi_alpha_s) if nodes > 1 else cal.mpi_alpha_s
    beta = (platform.net_beta_s or cal.mpi_beta_s) if nodes > 1 else cal.mpi_beta_s

    if o.localized:
        rdr = min(platform.readers_per_node, n_node)
        R = nodes * rdr
        members = n_node // rdr - 1
        g = B / R
        waiters = rdr                     # only readers take page faults
    else:
        rdr, R, members, g, waiters = n_node, P, 0, b, n_node
    k = mech.coalesce_factor(g * s, o.coalesce_bytes, max(1, N // B)) if o.coalesce_bytes else 1
    info = {"explicit_inflight": inflight, "readers": R, "group_records": g, "coalesce": k, "records_per_leaf": rpl,
            "pages_per_record": ppr, "storage_requests": 0.0, "storage_bytes": 0.0}

    def add_counters(c, per_iter=1.0):
        info["storage_requests"] += c.get("requests", 0.0) * per_iter
        info["storage_bytes"] += c.get("bytes", 0.0) * per_iter

    ph = dict.fromkeys(PHASES, 0.0)
    setup = 0.0
    # The fixed Python cost of one read_batch() on a reader (measured per variant family).
    family = ("lmdb" if not o.localized else "lmdbio-lmm-dm" if o.locate == "ring"
              else "lmdbio-lmm" if o.locate == "walk" else "lmdbio-lmm-dio" if o.locate == "index"
              else "lmdbio-lmm-dio-prov")
    fixed = cal.fixed_batch_s(family)
    if k > 1:
        fixed = fixed / k + cal.member_batch_s
    ph["locate"] += fixed
    reader_cpu = fixed

    # ---- locate: cursor steps (2)
    steps = mech.cursor_steps(o.locate, B, g)
    walk_cpu = steps * cal.cursor_step_s
    ph["locate"] += walk_cpu
    reader_cpu += walk_cpu
    ring_wait = 0.0
    cold = profile is not None
    if o.fetch == "mmap":
        # Per record as measured at this record size (walk step, copy, minor faults; between the
        # two measured sizes, Calibration.record_cpu_s) less the step counted above.
        copy_cpu = g * max(0.0, cal.record_cpu_s(family, s, cal.memcpy_byte_s, k * g * s)
                           - cal.cursor_step_s)
        reader_cpu += copy_cpu
        if o.locate == "ring" and R > 1:
            ring_wait = max(0.0, mech.ring_cycle(R, g, cal.cursor_step_s, alpha) - walk_cpu)
        if not cold:
            ph["read"] += copy_cpu
        elif o.speculative:
            # DM: the predicted range is asked for (WILLNEED) before the ring wait. The walk runs
            # in the ring's turn (the cursor goes on only after it): the pages it must wait for
            # (1 - served of them, measured) are read in its turn, one reader after another,
            # as read-around faults. The advised reads move ``issued`` x the group's bytes; the
            # part the walk does not wait for is read alongside.
            sp = _speculation(spec_file)
            if probe is not None and probe.willneed:
                # WILLNEED of the group's range and the read that waits for it, measured at S.
                from .requests import curve_requests

                n_w, _ = curve_requests(g * f, cap, probe.willneed)
                req = max(mech.PAGE, int(g * f / max(1.0, n_w)))
            else:
                req = (min(rsize, max(mech.PAGE, ra)) if pfs
                       else mech.explicit_requests(g * f, rsize, ra, inflight)[1])
            n, size, faults = mech.speculation_requests(g * f, req, sp["issued"], sp["served"])
            depth = max(1.0, min(float(inflight), float(math.ceil(n - faults))))
            streams = []
            if faults > 0:
                streams = [Stream(node=j // rdr, n=faults, size=size, offset=int(j * g * f),
                                  spacing=size, after=j - 1) for j in range(R)]
            if n - faults > 1e-9:
                streams += [Stream(node=j // rdr, n=n - faults, size=size, depth=depth,
                                   offset=int(j * g * f + faults * size)) for j in range(R)]
            # The walk's read-around at its range's edges (block devices; mech.edge_readaround):
            # one window more per reader, read alongside the advised reads.
            W_edge = int(mech.edge_readaround(R, ra)) if not pfs else 0
            if W_edge:
                streams += [Stream(node=j // rdr, n=1, size=W_edge,
                                   offset=max(0, int(j * g * f) - W_edge // 2)) for j in range(R)]
            info["edge_readaround_bytes"] = float(W_edge)
            times, c = run_phase(profile, nodes, streams, budget, cache_bytes=pool)
            add_counters(c)
            turns = times[:R] if faults > 0 else [0.0] * R
            t_adv = max(times[R if faults > 0 else 0:], default=0.0)
            fcpu = (faults + (1 if W_edge else 0)) * mech.fault_cpu(1, cal.page_fault_s, cal.handoff_s)
            reader_cpu += fcpu
            ring = sum(walk_cpu + fcpu + x + (alpha if R > 1 else 0.0) for x in turns)
            own = walk_cpu + fcpu + turns[-1]
            ring_wait = max(0.0, ring - own)
            info.update(speculation_issued=sp["issued"], speculation_served=sp["served"])
            ph["locate"] += turns[-1] + fcpu
            # The advised reads end before the next batch only if the ring takes longer.
            ph["read"] += max(copy_cpu, t_adv - ring)
        else:
            # (1)+(3) The walk faults the leaf pages (each node's ranks wait for each: one stream
            # per walker's page cache); every fault reads the read-around window W. With W at
            # least the leaf spacing the walk streams through the whole walked region and the
            # copies find their pages cached; otherwise the copies fault what is left.
            W = max(mech.PAGE, ra)
            _, size, per = mech.mmap_requests(mech.PAGE, ra, rsize)
            # The walk's touches: leaf pages, and each value's first page when the walk touches
            # the values it steps over (platform.walk_touches_values, measured by walkread).
            leaf_faults, cover = mech.walk_faults(steps or g, rpl, f, W, platform.walk_touches_values)
            S = f if platform.walk_touches_values else rpl * f
            # (1) Problem 1, measured: concurrent faulters of a node split the read-around into
            # more, smaller requests (the K-faulters curve of the throttled device, or of the
            # shared target's probe there).
            kf = mech.faulter_factor(waiters, faulters)
            info["faulter_factor"] = kf
            size = max(mech.PAGE, int(size / kf))      # the same bytes in kf times the requests
            walkers = range(R) if o.localized else range(nodes)
            streams = [Stream(node=(j // rdr if o.localized else j), n=leaf_faults * kf * per,
                              size=size, depth=per,
                              spacing=int(min(W, S) / kf) if cover < 1.0 else 0,
                              offset=int(j * (g if o.localized else n_node * b) * f))
                       for j in walkers]
            t_leaf, c = _phase_time(profile, nodes, streams, budget, pool)
            add_counters(c)
            leaf_cpu = leaf_faults * (cal.page_fault_s + cal.handoff_s)
            data_faults = g * f * (1.0 - cover) / W
            t_data = 0.0
            if data_faults > 0:
                streams = [Stream(node=j // rdr, n=data_faults * kf * per, size=size, depth=per,
                                  offset=int(j * g * f)) for j in range(R)]
                t_data, c = _phase_time(profile, nodes, streams, budget, pool)
                add_counters(c)
            fcpu = data_faults * mech.fault_cpu(waiters, cal.page_fault_s, cal.handoff_s)
            reader_cpu += leaf_cpu + fcpu
            ph["locate"] += t_leaf + leaf_cpu
            ph["read"] += t_data + fcpu + copy_cpu
            if ra > 0:
                # (3) Readahead fetches ahead of the walk and the copies: they overlap.
                hidden = hide * min(t_leaf + t_data, walk_cpu + copy_cpu)
                take = min(hidden, ph["read"])
                ph["read"] -= take
                ph["locate"] -= hidden - take
    else:
        # ---- DIO / PROV / COAL: explicit reads of one extent per chunk (3, 4), STAG (5)
        plan = g * cal.plan_record_s
        ph["locate"] += plan
        reader_cpu += plan
        chunk = k * g * f
        # Per record as measured at this record size (extents, pread, hand-out) less the planning.
        cpu = g * max(0.0, cal.record_cpu_s(family, s, cal.pread_byte_s, k * g * s)
                      - cal.plan_record_s)
        reader_cpu += cpu
        if not cold:
            ph["read"] += cpu
        else:
            # A chunk of k batches is one file range only for a lone reader; with R > 1 a
            # reader's records of each batch are their own extent (lmdbio.plan.chunk_runs), so
            # COAL reads k extents of g records, each with its own requests and tail.
            extents = k if R > 1 else 1
            if probe is not None:
                # A lone reader's reads follow one another (the back-to-back rows); others' do not.
                curve = probe.seq if R == 1 and probe.seq else probe.pread

            def reads(length):
                return mech.explicit_requests(length, rsize, ra, inflight, measured=curve,
                                              tail_reused=R == 1, cap=cap)
            n, size, depth = reads(chunk / extents)
            n *= extents
            # DIO: the index pass left node 0's leaf pages in its page cache; they cut its readers'
            # reads (Linux's readahead, measured on a block device: not for a PFS profile).
            n0, size0, depth0 = n, size, depth
            cut_factor = None
            if o.locate == "index" and not pfs:
                cut = mech.leaf_pieces(chunk / extents, rpl * f)
                n0, size0, depth0 = reads(chunk / extents / cut)
                n0 *= cut * extents
                # On the local disk the pieces' time is measured (leafcut: one readahead pass
                # submits them all before the reader waits): the plain read's time times the
                # measured cached / plain factor; the cut still counts its requests.
                if platform.storage == "disk" and platform.leaf_cut:
                    cut_factor = _leaf_cut(platform.leaf_cut)(chunk / extents)
                    info["leaf_cut_factor"] = cut_factor
            groups = mech.stagger_groups(R, o.stagger_size) if o.staggered else [R]
            durations = {}
            for gsize in sorted(set(groups)):
                streams = [Stream(node=j // rdr, offset=int(j * chunk),
                                  **(dict(n=n0, size=size0, depth=depth0) if j < rdr
                                     else dict(n=n, size=size, depth=depth)))
                           for j in range(gsize)]
                used = max(1, min(nodes, math.ceil(gsize / rdr)))
                durations[gsize], c = _phase_time(profile, used, streams, budget, pool)
                add_counters(c, groups.count(gsize) / k)
                if cut_factor is not None:
                    plain = [Stream(node=j // rdr, offset=int(j * chunk), n=n, size=size, depth=depth)
                             for j in range(gsize)]
                    durations[gsize] = cut_factor * _phase_time(profile, used, plain, budget, pool)[0]
            turn = sum(durations[x] for x in groups[:-1]) + (len(groups) - 1) * alpha
            ph["read"] += mech.overlapped(durations[groups[-1]] / k, cpu, ra, hide)
            ph["wait"] += turn / k
        if o.locate == "index":
            # Setup: the first reader reads every leaf page once, then scatters the extents.
            leafs = N / rpl
            t = 0.0
            if cold:
                # One 4 KiB pread per leaf page; a miss reads the readahead window.
                size = min(rsize, max(mech.PAGE, ra))
                t, _ = _phase_time(profile, 1, [Stream(node=0, n=leafs, size=size,
                                                        spacing=int(rpl * f))], budget, pool)
            setup = t + N * cal.plan_record_s + (R - 1) * (alpha + (N / R) * 16 * beta)
    ph["wait"] += ring_wait
    # Ranks per core: a member's CPU per batch and a reader's CPU grow with it (measured at two
    # points by calibrate: alone and eight ranks per core).
    per_core = n_node * (nodes if platform.cores_shared else 1) / cores
    member_s = cal.member_s(per_core)
    crowd = cal.cpu_factor(per_core)
    if o.localized:
        ph["distribute"] += mech.handoff(members, cal.handoff_s / k, member_s)
    ph["compute"] = b * workload.compute_s_per_sample
    ph["communicate"] = mech.allreduce(P, workload.model_bytes, alpha, beta, cal.memcpy_byte_s)

    # Ranks outnumbering cores: the node's CPU per iteration over its cores.
    node_cpu = rdr * reader_cpu * crowd + max(0, n_node - rdr) * member_s
    critical = sum(ph[x] for x in ("locate", "read", "distribute", "wait"))
    extra = mech.cpu_bound(node_cpu * (nodes if platform.cores_shared else 1), cores) - critical
    if extra > 0:
        ph["wait"] += extra
    per_iter = sum(ph.values())
    io_phases = {x: ph[x] for x in ("locate", "read", "distribute", "wait")}
    row = {"platform": platform.name, "workload": workload.name, "variant": o.name if o.localized
           else "lmdb", "nprocs": P, "nodes": nodes, "cache": cache, "batch": workload.batch,
           "iterations": workload.iterations, "global_batch": B, "record_bytes": s, "records": N,
           "epochs": workload.iterations * B / N,
           "total_s": setup + workload.iterations * per_iter, "setup_s": setup,
           "per_iteration_s": per_iter, **{f"{x}_s": v for x, v in ph.items()},
           "dominant_phase": max(ph, key=ph.get), "dominant_io_phase": max(io_phases, key=io_phases.get),
           **info}
    row["dominant_mechanism"] = dominant_mechanism(row, o, extra > 0)
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


def estimate_ends(platform: Platform):
    """``(name, end, value, why, platform at that end)`` for every estimate's low and high end.

    The storage profile's ranges (``profiles.toml``), the platform's
    (``[ranges]``; ``compute`` applies to every workload) and each
    workload's (``[workload.ranges]``). Ends equal to the central value
    are skipped: they cannot move a prediction.
    """
    from dataclasses import replace

    from ..emulation import parse_compute_time, parse_model_bytes
    from ..pfs.model import PROFILES, profile_ranges

    if platform.storage in PROFILES:
        prof = storage_profile(platform, None, "cold") if platform.storage != "disk" else None
        for key, (lo, hi, why) in profile_ranges(platform.storage).items():
            central = getattr(prof, key) / ({"latency_s": prof.time_scale, "seek_s": prof.time_scale,
                                             "target_bw": 1 / prof.time_scale,
                                             "node_link_bw": 1 / prof.time_scale}.get(key, 1))
            for end, v in (("low", lo), ("high", hi)):
                if float(v) != float(central):
                    yield (f"{platform.storage}.{key}", end, v, why,
                           platform.with_(storage_overrides=platform.storage_overrides + ((key, v),)))
    for key, (lo, hi, why) in platform.ranges.items():
        for end, v in (("low", lo), ("high", hi)):
            if key == "compute":
                sec = parse_compute_time(v)
                wls = tuple(replace(w, compute_s_per_sample=sec) for w in platform.workloads)
                if all(w.compute_s_per_sample == sec for w in platform.workloads):
                    continue
                yield ("compute", end, v, why, platform.with_(workloads=wls))
                continue
            if not hasattr(platform, key):
                raise ConfigurationError(f"platform {platform.name!r}: a range for {key!r}, which is "
                                         "not a platform value")
            cur = getattr(platform, key)
            if type(cur)(v) == cur:
                continue
            yield (key, end, v, why, platform.with_(**{key: type(cur)(v)}))
    for i, w in enumerate(platform.workloads):
        for key, (lo, hi, why) in w.ranges.items():
            field_ = {"compute": "compute_s_per_sample", "model": "model_bytes"}.get(key, key)
            conv = {"compute": parse_compute_time, "model": parse_model_bytes}.get(key, int)
            for end, v in (("low", lo), ("high", hi)):
                if conv(v) == getattr(w, field_):
                    continue
                wls = list(platform.workloads)
                wls[i] = replace(w, **{field_: conv(v)})
                yield (f"{w.name}.{key}", end, v, why, platform.with_(workloads=tuple(wls)))


def sensitivity(platform: Platform | str, procs, variants=("all",), workloads=None,
                cal: Calibration | None = None, budget: int = 20000) -> list[dict]:
    """:func:`predict` rows at each end of every estimate's range (one estimate at a time).

    Each row carries ``estimate``, ``end`` (low/high), ``estimate_value`` and
    the prediction's columns. The band of a quantity is its smallest and
    largest value over these rows and the central prediction: one estimate
    moved at a time, the others central (joint extremes are not explored).
    """
    plat = load_platform(platform) if not isinstance(platform, Platform) else platform
    cal = cal or load_calibration()
    rows = []
    for name, end, value, _why, p in estimate_ends(plat):
        for r in predict(p, procs, variants, workloads, cal, budget):
            rows.append({"estimate": name, "end": end, "estimate_value": value, **r})
    return rows


def band_columns(rows: list[dict], sens: list[dict]) -> list[dict]:
    """``rows`` with ``total_s_low``/``total_s_high`` (and per iteration): the extremes over ``sens``."""
    import pandas as pd

    if not sens:
        return rows
    s = pd.DataFrame(sens)
    keys = ["workload", "variant", "nprocs"]
    g = s.groupby(keys)
    lo, hi = g[["total_s", "per_iteration_s"]].min(), g[["total_s", "per_iteration_s"]].max()
    out = []
    for r in rows:
        k = (r["workload"], r["variant"], r["nprocs"])
        r = dict(r)
        for col in ("total_s", "per_iteration_s"):
            if k in lo.index:
                r[f"{col}_low"] = min(r[col], float(lo.loc[k, col]))
                r[f"{col}_high"] = max(r[col], float(hi.loc[k, col]))
            else:
                r[f"{col}_low"] = r[f"{col}_high"] = float("nan")
        out.append(r)
    return out


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


def write_predictions(rows: list[dict], out_dir, config: dict, platform: Platform,
                      cal: Calibration, cal_dir=None, sens: list[dict] | None = None,
                      joint: list[dict] | None = None, maps: list[dict] | None = None) -> Path:
    """``predictions.csv`` (tidy, one row per workload x batch reading x variant x P) and ``meta.json``.

    With ``joint`` (:func:`lmdbio.lab.model.uncertainty.joint` rows) also
    ``joint.csv``, the samples every band and verdict is taken from; with
    ``maps`` (:func:`lmdbio.lab.model.uncertainty.verdict_map` rows)
    ``verdict_map.csv``; with ``sens`` (:func:`sensitivity`, one estimate at
    a time) predictions.csv gets ``total_s_low``/``total_s_high`` and
    ``sensitivity.csv`` holds the rows. A file a run does not write is
    removed: a stale band would not match these predictions.
    """
    import pandas as pd

    from lmdbio.metrics import write_results_meta
    from .estimates import BAND, estimates

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(band_columns(rows, sens or [])).to_csv(out / "predictions.csv", index=False)
    written = ["predictions.csv"]
    for name, data in (("sensitivity.csv", sens), ("joint.csv", joint), ("verdict_map.csv", maps)):
        if data:
            pd.DataFrame(data).to_csv(out / name, index=False)
            written.append(name)
        elif (out / name).exists():
            (out / name).unlink()
    prof = storage_profile(platform, cal, platform.cache)
    meta = {"platform": {"file": platform.path, "name": platform.name,
                         "ranks_per_node": platform.ranks_per_node,
                         "cores_per_node": platform.cores_per_node,
                         "readers_per_node": platform.readers_per_node,
                         "storage": platform.storage, "cache": platform.cache,
                         "net_alpha_s": platform.net_alpha_s, "net_beta_s": platform.net_beta_s,
                         "explicit_inflight": explicit_depth(platform, cal)[0],
                         "explicit_inflight_from": explicit_depth(platform, cal)[1],
                         "sources": dict(platform.sources),
                         "workloads": [{**{fl.name: getattr(w, fl.name) for fl in fields(w)
                                           if fl.name not in ("sources", "ranges")},
                                        "ranges": {k: list(v) for k, v in w.ranges.items()},
                                        "sources": dict(w.sources)} for w in platform.workloads]},
            "default_batch": {w.name: w.batch for w in platform.workloads},
            "storage_profile": prof.as_dict() if prof is not None else None,
            "calibration": asdict(cal), "calibration_dir": str(cal_dir or ""),
            "files": written,
            "estimates": [{"estimate": e.name, "low": e.low, "high": e.high, "central": e.central,
                           "drawn": e.kind, "why": e.why} for e in estimates(platform)],
            "band": f"{int(100 * BAND[0])}-{int(100 * BAND[1])}% of the joint samples (joint.csv)",
            "phases": list(PHASES),
            "note": "model parameters come from the platform file's sources and this machine's "
                    "microbenchmarks; nothing is fitted to the papers' speedups"}
    write_results_meta(out, config, **meta)
    return out
