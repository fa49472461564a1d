"""The mechanisms of one iteration, each a function adding its seconds to a :class:`Point`'s phases.

:func:`lmdbio.lab.model.predict.predict_point` runs them in order: locate, one read path
(a warm cache reads nothing from storage), DIO's index pass, training, CPU sharing. The
equations are in ``docs/model.md``.
"""

from __future__ import annotations

import math

from . import mechanisms as mech
from .point import Point, leaf_cut_of, phase_time, speculation_of
from .streams import Stream, run_phase

__all__ = ["fixed_batch", "cursor_walk", "walked_records", "ring_turn", "mmap_copy_cpu", "explicit_cpu", "read_speculative",
           "read_walk_faults", "read_explicit", "index_setup", "epoch_reuse", "training", "cpu_sharing"]


def fixed_batch(pt: Point) -> float:
    """The fixed Python cost of one ``read_batch()`` on a reader (measured per variant family);
    COAL pays it once per ``k`` batches plus a member's cost."""
    fixed = pt.cal.fixed_batch_s(pt.family)
    if pt.k > 1:
        fixed = fixed / pt.k + pt.cal.member_batch_s
    pt.ph["locate"] += fixed
    pt.reader_cpu += fixed
    return fixed


def cursor_walk(pt: Point) -> float:
    """(2) The cursor steps a reader takes to reach its records, and their CPU."""
    pt.steps = mech.cursor_steps(pt.o.locate, pt.B, pt.g)
    pt.walk_cpu = pt.steps * pt.cal.cursor_step_s
    pt.ph["locate"] += pt.walk_cpu
    pt.reader_cpu += pt.walk_cpu
    return pt.walk_cpu


def walked_records(pt: Point) -> float:
    """Records whose pages one iteration's walk can fault: its steps, at most the data set when
    the file fits in a node's memory (a longer walk passes cached pages again)."""
    steps = pt.steps or pt.g
    mem = pt.platform.node_memory
    if mem and pt.N * pt.f <= mem:
        return min(steps, pt.N)
    return steps


def ring_turn(pt: Point) -> float:
    """(2) DM's ring without storage: a reader waits for one cycle of every other reader's walk
    and hand-over (``mechanisms.ring_cycle``) beyond its own walk."""
    pt.ring_wait = max(0.0, mech.ring_cycle(pt.R, pt.g, pt.cal.cursor_step_s, pt.alpha) - pt.walk_cpu)
    return pt.ring_wait


def mmap_copy_cpu(pt: Point) -> float:
    """Per record as measured at this record size (walk step, copy, minor faults; between the two
    measured sizes, ``Calibration.record_cpu_s``) less the step :func:`cursor_walk` counted."""
    cal = pt.cal
    cpu = pt.g * max(0.0, cal.record_cpu_s(pt.family, pt.s, cal.memcpy_byte_s, pt.k * pt.g * pt.s)
                     - cal.cursor_step_s)
    pt.reader_cpu += cpu
    return cpu


def explicit_cpu(pt: Point) -> float:
    """Planning the extents (locate) and, per record as measured at this record size (extents,
    pread, hand-out), the rest of a reader's CPU; returns the latter."""
    cal = pt.cal
    plan = pt.g * cal.plan_record_s
    pt.ph["locate"] += plan
    cpu = pt.g * max(0.0, cal.record_cpu_s(pt.family, pt.s, cal.pread_byte_s, pt.k * pt.g * pt.s)
                     - cal.plan_record_s)
    pt.reader_cpu += plan + cpu
    return cpu


def _advised_request(pt: Point) -> int:
    """The size of DM's advised (WILLNEED) requests."""
    gf = pt.g * pt.f
    if pt.probe is not None and pt.probe.willneed:
        # WILLNEED of the group's range and the read that waits for it, measured at S.
        from .requests import curve_requests

        n_w, _ = curve_requests(gf, pt.cap, pt.probe.willneed)
        return max(mech.PAGE, int(gf / max(1.0, n_w)))
    if pt.pfs:
        return min(pt.rsize, max(mech.PAGE, pt.ra))
    return mech.explicit_requests(gf, pt.rsize, pt.ra, pt.inflight)[1]


def read_speculative(pt: Point, copy_cpu: float) -> None:
    """DM: the predicted range is advised (WILLNEED) before the ring's turn; the pages the walk
    must wait for (1 - served, measured) are read in its turn, one reader after another; the
    advised reads move ``issued`` x the group's bytes alongside. On a block device the walk's
    read-around at its range's edges adds one window per reader (``mech.edge_readaround``)."""
    sp = speculation_of(pt.spec_file)
    gf, R, rdr = pt.g * pt.f, pt.R, pt.rdr
    n, size, faults = mech.speculation_requests(gf, _advised_request(pt), sp["issued"], sp["served"])
    depth = max(1.0, min(float(pt.inflight), float(math.ceil(n - faults))))
    streams = []
    if faults > 0:
        streams = [Stream(node=j // rdr, n=faults, size=size, offset=int(j * gf), spacing=size,
                          after=j - 1) for j in range(R)]
    if n - faults > 1e-9:
        streams += [Stream(node=j // rdr, n=n - faults, size=size, depth=depth,
                           offset=int(j * gf + faults * size)) for j in range(R)]
    w_edge = int(mech.edge_readaround(R, pt.ra)) if not pt.pfs else 0
    if w_edge:
        streams += [Stream(node=j // rdr, n=1, size=w_edge, offset=max(0, int(j * gf) - w_edge // 2))
                    for j in range(R)]
    pt.info["edge_readaround_bytes"] = float(w_edge)
    times, c = run_phase(pt.profile, pt.nodes, streams, pt.budget, cache_bytes=pt.platform.pagepool)
    pt.add_counters(c)
    turns = times[:R] if faults > 0 else [0.0] * R
    t_adv = max(times[R if faults > 0 else 0:], default=0.0)
    fcpu = (faults + (1 if w_edge else 0)) * mech.fault_cpu(1, pt.cal.page_fault_s, pt.cal.handoff_s)
    pt.reader_cpu += fcpu
    ring = sum(pt.walk_cpu + fcpu + x + (pt.alpha if R > 1 else 0.0) for x in turns)
    pt.ring_wait = max(0.0, ring - (pt.walk_cpu + fcpu + turns[-1]))
    pt.info.update(speculation_issued=sp["issued"], speculation_served=sp["served"])
    pt.ph["locate"] += turns[-1] + fcpu
    # The advised reads end before the next batch only if the ring takes longer.
    pt.ph["read"] += max(copy_cpu, t_adv - ring)


def read_walk_faults(pt: Point, copy_cpu: float) -> None:
    """(1)+(3) The walk faults the leaf pages (and, with ``walk_touches_values``, each value's
    first page); every fault reads the read-around window W, split by the node's concurrent
    faulters (problem 1, the measured K-faulters curve). With W at least the touches' spacing the
    walk streams through its region and the copies find their pages cached; otherwise the copies
    fault what is left. Readahead overlaps the faults with the walk's and copies' CPU. Without
    LMM, a node's ranks share each page's read unless ``mmap_per_process``."""
    o, cal, rdr, R = pt.o, pt.cal, pt.rdr, pt.R
    touches = pt.platform.walk_touches_values
    W = max(mech.PAGE, pt.ra)
    _, size, per = mech.mmap_requests(mech.PAGE, pt.ra, pt.rsize)
    leaf_faults, cover = mech.walk_faults(walked_records(pt), pt.rpl, pt.f, W, touches)
    S = pt.f if touches else pt.rpl * pt.f
    kf = mech.faulter_factor(pt.waiters, pt.faulters)
    pt.info["faulter_factor"] = kf
    size = max(mech.PAGE, int(size / kf))      # the same bytes in kf times the requests
    # One walk per reader; without LMM the node's ranks share each page's read (one walk per
    # node), unless every process reads its own faults (``mmap_per_process``).
    own = o.localized or pt.platform.mmap_per_process
    walkers = range(R) if own else range(pt.nodes)
    stride = pt.g if own else pt.n_node * pt.b
    streams = [Stream(node=(j // rdr if own else j), n=leaf_faults * kf * per, size=size,
                      depth=per, spacing=int(min(W, S) / kf) if cover < 1.0 else 0,
                      offset=int(j * stride * pt.f)) for j in walkers]
    # Per-process faults go through GPFS's mmap path, apart from its pagepool: nothing cached there.
    pool = 0 if pt.platform.mmap_per_process else pt.platform.pagepool
    if pt.platform.server_cache and len(streams) > 1:
        # Every walker steps over the same global batch: the servers read its leaf pages once,
        # for the first walker; the others' identical requests come from the servers' cache.
        t_leaf, c = phase_time(pt.profile, 1, streams[:1], pt.budget, pool)
        c = {key: v * len(streams) for key, v in c.items()}
    else:
        t_leaf, c = phase_time(pt.profile, pt.nodes, streams, pt.budget, pool)
    pt.add_counters(c)
    leaf_cpu = leaf_faults * (cal.page_fault_s + cal.handoff_s)
    data_faults = pt.g * pt.f * (1.0 - cover) / W
    t_data = 0.0
    if data_faults > 0:
        streams = [Stream(node=j // rdr, n=data_faults * kf * per, size=size, depth=per,
                          offset=int(j * pt.g * pt.f)) for j in range(R)]
        t_data, c = pt.time(pt.nodes, streams)
        pt.add_counters(c)
    fcpu = data_faults * mech.fault_cpu(pt.waiters, cal.page_fault_s, cal.handoff_s)
    pt.reader_cpu += leaf_cpu + fcpu
    pt.ph["locate"] += t_leaf + leaf_cpu
    pt.ph["read"] += t_data + fcpu + copy_cpu
    if pt.ra > 0:
        hidden = pt.hide * min(t_leaf + t_data, pt.walk_cpu + copy_cpu)
        take = min(hidden, pt.ph["read"])
        pt.ph["read"] -= take
        pt.ph["locate"] -= hidden - take


def _explicit_reads(pt: Point, length: float, curve):
    return mech.explicit_requests(length, pt.rsize, pt.ra, pt.inflight, measured=curve,
                                  tail_reused=pt.R == 1, cap=pt.cap)


def read_explicit(pt: Point, cpu: float) -> None:
    """(3)+(4)+(5) DIO/PROV/COAL: explicit reads of one extent per chunk; STAG's groups take
    turns on storage. DIO's index pass leaves node 0's leaf pages cached, which cut its readers'
    reads on a block device (measured on the local disk: ``leaf_cut``)."""
    rdr, R, k = pt.rdr, pt.R, pt.k
    chunk = k * pt.g * pt.f
    # A chunk of k batches is one file range only for a lone reader (lmdbio.plan.chunk_runs).
    extents = k if R > 1 else 1
    curve = pt.curve
    if pt.probe is not None:
        # A lone reader's reads follow one another (the back-to-back rows); others' do not.
        curve = pt.probe.seq if R == 1 and pt.probe.seq else pt.probe.pread
    n, size, depth = _explicit_reads(pt, chunk / extents, curve)
    n *= extents
    n0, size0, depth0 = n, size, depth
    cut_factor = None
    if pt.o.locate == "index" and not pt.pfs:
        cut = mech.leaf_pieces(chunk / extents, pt.rpl * pt.f)
        n0, size0, depth0 = _explicit_reads(pt, chunk / extents / cut, curve)
        n0 *= cut * extents
        if pt.platform.storage == "disk" and pt.platform.leaf_cut:
            cut_factor = leaf_cut_of(pt.platform.leaf_cut)(chunk / extents)
            pt.info["leaf_cut_factor"] = cut_factor
    groups = mech.stagger_groups(R, pt.o.stagger_size) if pt.o.staggered else [R]
    durations = {}
    for gsize in sorted(set(groups)):
        streams = [Stream(node=j // rdr, offset=int(j * chunk),
                          **(dict(n=n0, size=size0, depth=depth0) if j < rdr
                             else dict(n=n, size=size, depth=depth))) for j in range(gsize)]
        used = max(1, min(pt.nodes, math.ceil(gsize / rdr)))
        durations[gsize], c = pt.time(used, streams)
        pt.add_counters(c, groups.count(gsize) / k)
        if cut_factor is not None:
            plain = [Stream(node=j // rdr, offset=int(j * chunk), n=n, size=size, depth=depth)
                     for j in range(gsize)]
            durations[gsize] = cut_factor * pt.time(used, plain)[0]
    turn = sum(durations[x] for x in groups[:-1]) + (len(groups) - 1) * pt.alpha
    pt.ph["read"] += mech.overlapped(durations[groups[-1]] / k, cpu, pt.ra, pt.hide)
    pt.ph["wait"] += turn / k


def index_setup(pt: Point) -> float:
    """DIO's setup, once per run: the first reader reads every leaf page once (one 4 KiB pread per
    leaf page; a miss reads the readahead window), plans every record, scatters the extents."""
    leafs = pt.N / pt.rpl
    t = 0.0
    if pt.cold:
        size = min(pt.rsize, max(mech.PAGE, pt.ra))
        t, _ = pt.time(1, [Stream(node=0, n=leafs, size=size, spacing=int(pt.rpl * pt.f))])
    pt.setup = (t + pt.N * pt.cal.plan_record_s
                + (pt.R - 1) * (pt.alpha + (pt.N / pt.R) * 16 * pt.beta))
    return pt.setup


def epoch_reuse(pt: Point) -> float:
    """The share of a run's iterations whose reads a node's page cache serves (``epoch_cache``):
    after the first epoch, when the file fits in ``node_memory``, all of them on one node (or
    when every epoch gives a node the same records), else the node's ``1 / nodes``."""
    plat, w = pt.platform, pt.workload
    if not (plat.epoch_cache and pt.cold and plat.node_memory and pt.N * pt.f <= plat.node_memory):
        return 0.0
    first = min(float(w.iterations), pt.N / pt.B)
    same = pt.nodes == 1 or plat.cores_shared or pt.N % pt.B == 0
    return (w.iterations - first) / w.iterations * (1.0 if same else 1.0 / pt.nodes)


def training(pt: Point, member_s: float) -> None:
    """LMM's shared-memory hand-off to the group's members, the training emulation's compute
    (seconds per sample x the process's batch) and the gradient allreduce."""
    if pt.o.localized:
        pt.ph["distribute"] += mech.handoff(pt.members, pt.cal.handoff_s / pt.k, member_s)
    pt.ph["compute"] = pt.b * pt.platform.compute_s(pt.workload)
    pt.ph["communicate"] = mech.allreduce(pt.P, pt.workload.model_bytes, pt.alpha, pt.beta,
                                          pt.cal.memcpy_byte_s)


def cpu_sharing(pt: Point, member_s: float, crowd: float) -> bool:
    """Ranks outnumbering cores: an iteration's I/O phases take at least the node's CPU over its
    cores; the excess is waiting. True when it binds."""
    shared = pt.nodes if pt.platform.cores_shared else 1
    node_cpu = pt.rdr * pt.reader_cpu * crowd + max(0, pt.n_node - pt.rdr) * member_s
    critical = sum(pt.ph[x] for x in ("locate", "read", "distribute", "wait"))
    extra = mech.cpu_bound(node_cpu * shared, pt.cores) - critical
    if extra > 0:
        pt.ph["wait"] += extra
    return extra > 0
