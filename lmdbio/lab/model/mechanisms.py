"""The mechanisms of the scale model, one small function each, with the paper problem it models.

Problems (PAPER.md): 1 mmap's interprocess contention, 2 the cursor's
sequential access, 3 implicit small I/O, 4 I/O size mismatch, 5 storage
contention. Times in seconds, sizes in bytes. Storage service itself is not
here: it is :mod:`lmdbio.lab.pfs.model`, driven by :mod:`lmdbio.lab.model.streams`
with the requests these functions describe.
"""

from __future__ import annotations

import math

from lmdbio.lab.prov_offsets import model_parameters
from .requests import IO_PAGES, curve_requests

__all__ = ["PAGE", "geometry", "walk_faults", "fault_cpu", "faulter_factor", "load_faulters", "cursor_steps", "ring_cycle", "mmap_requests",
           "explicit_requests", "leaf_pieces", "load_speculation", "speculation_requests", "overlapped", "coalesce_factor", "stripe_pieces", "stagger_groups", "handoff",
           "allreduce", "cpu_bound"]

PAGE = 4096


def geometry(record_bytes: int, key_bytes: int = 35) -> dict:
    """LMDB layout of fixed-size records written in key order (Caffe's convert_imageset).

    Returns ``records_per_leaf``, ``pages_per_record`` (0 for inline values)
    and ``file_bytes_per_record`` (value pages plus the record's share of
    its leaf page): the bytes a reader moves per record.
    """
    try:
        p = model_parameters(record_bytes=record_bytes, key_bytes=key_bytes)
        rpl, ppr = p["records_per_leaf"], p["pages_per_record"]
    except ValueError:   # inline values: records share leaf pages
        rpl, ppr = max(1, (PAGE - 16) // (record_bytes + key_bytes + 10)), 0
    return {"records_per_leaf": rpl, "pages_per_record": ppr,
            "file_bytes_per_record": ppr * PAGE + PAGE / rpl}


def walk_faults(steps: float, records_per_leaf: int, file_bytes_per_record: float, window: int,
                touches_values: bool) -> tuple[float, float]:
    """(1)+(2)+(3) ``(faults, cover)`` of a cursor walk over ``steps`` records: a step touches its
    leaf entry and, with ``touches_values``, its value's first page (measured by
    :mod:`lmdbio.lab.model.walkread`); each fault reads a ``window``. Touches at most a window
    apart read the region whole (``cover`` 1), else ``window`` of every ``spacing``."""
    w = max(PAGE, int(window))
    f = float(file_bytes_per_record)
    spacing = f if touches_values else records_per_leaf * f
    if w >= spacing:
        return steps * f / w, 1.0
    faults = steps * (1.0 + 1.0 / records_per_leaf) if touches_values else steps / records_per_leaf
    return faults, w / spacing


def fault_cpu(waiting: int, page_fault_s: float, wake_s: float) -> float:
    """(1) Problem 1: CPU time one major fault costs a process. The I/O completion wakes every
    process waiting for page I/O on the node, so each of the other ``waiting - 1`` completions
    costs this one a context switch (``wake_s``, calibrate's futex hand-off)."""
    return page_fault_s + max(0, int(waiting) - 1) * wake_s


def load_faulters(path) -> tuple[tuple[int, float], ...]:
    """The K-faulters curve ``((K, device requests(K) / requests(1)), ...)`` from ``faulters.csv``
    (``python -m lmdbio.lab.storage faulters``: K processes of a node fault one cold file)."""
    from lmdbio.errors import ConfigurationError
    from .measured import read_measured

    d = read_measured(path, "faulters curve", "python -m lmdbio.lab.storage faulters", ("K", "dev_read_ios"))
    if 1 not in set(d["K"]):
        raise ConfigurationError(f"{path}: needs a row for K = 1")
    g = d.groupby("K")["dev_read_ios"].median()
    return tuple((int(k), float(v / g.loc[1])) for k, v in g.items())


def faulter_factor(faulters: int, curve) -> float:
    """(1) Problem 1, measured: how many more device requests K concurrent faulters of one node
    cause (on the throttled device 1.45-1.49x for K >= 2: the read-around windows split). Linear
    between measured K, flat beyond the largest (an extrapolation); ``curve`` empty: 1."""
    if not curve or faulters <= 1:
        return 1.0
    if faulters >= curve[-1][0]:
        return curve[-1][1]
    for (k0, v0), (k1, v1) in zip(curve, curve[1:]):
        if k0 <= faulters <= k1:
            return v0 + (v1 - v0) * (faulters - k0) / (k1 - k0)
    return 1.0


def load_speculation(path) -> dict:
    """DM's speculation as measured (``summary.csv`` of ``data/results/04_dm/speculation``):
    ``miss`` = missed / touched pages, ``issued`` = (touched - missed + extra) / touched (the
    pages advised), ``served`` = 1 - major faults per batch with speculation / without, in 0-1
    (a fault waiting for a page still being read is major: the share that had arrived)."""
    from lmdbio.errors import ConfigurationError
    from .measured import read_measured

    d = read_measured(path, "speculation summary", "notebook 04 / bench-dm",
                      ("mode", "touched_pages_median", "missed_pages_median", "extra_pages_median",
                       "majflt_per_batch_median"))
    spec = d[d["mode"].str.contains("speculation") & (d["touched_pages_median"] > 0)]
    ring = d[~d["mode"].str.contains("speculation")]
    if spec.empty or ring.empty:
        raise ConfigurationError(f"{path}: needs a mode with speculation (touched pages > 0) and one without")
    r, r0 = spec.iloc[0], ring.iloc[0]
    touched = float(r["touched_pages_median"])
    missed = float(r["missed_pages_median"])
    served = 1.0 - float(r["majflt_per_batch_median"]) / float(r0["majflt_per_batch_median"])
    return {"miss": missed / touched, "issued": (touched - missed + float(r["extra_pages_median"])) / touched,
            "served": min(1.0, max(0.0, served))}


def speculation_requests(group_file_bytes: float, request: int,
                         issued: float, served: float) -> tuple[float, int, float]:
    """(DM) The requests DM's speculation sends, as the fixed code issues them, and the walk's faults.

    ``posix_fadvise(WILLNEED)`` over the predicted range reads ``issued`` x
    the group's bytes (extra pages included) in requests of ``request``
    bytes: the kernel's ``force_page_cache_ra`` reads in ``io_pages`` chunks
    on a block device (the explicit-read request); through the FUSE mount
    of the emulated PFS, DM's requests were measured at 50-55 KiB with a 64
    KiB readahead window (DIO's preads 90-120 KiB), so there the caller
    passes the window. The walk, in the ring's turn, still waits for the
    ``1 - served`` share of its pages: one request of the same size per
    fault. Returns ``(advised requests, request bytes, walk faults)``.
    """
    size = max(PAGE, int(request))
    return group_file_bytes * issued / size, size, group_file_bytes * (1.0 - served) / size


def edge_readaround(readers: int, readahead: int) -> float:
    """(DM) Bytes a reader's walk reads per batch outside its advised range, on a Linux block device.

    A cold fault on a file mapping reads a window centred on the faulting page
    (``do_sync_mmap_readahead`` in ``mm/filemap.c``: ``ra->start = pgoff -
    ra_pages / 2``, ``ra->size = ra_pages``). DM's walk enters and leaves its
    group's range at leaf pages no advice covered: about half a window before
    the range and half a window past it, the neighbouring readers' bytes, read
    again into this reader's node cache. One window per reader per batch; none
    with one reader, whose next range is its own. Not for GPFS (its daemon
    serves mmap faults in its own block size). The fault at the range's start
    waits for a page the walk waits for anyway, so the window adds bytes and a
    request but no wait in the ring's turn: the model reads it alongside the
    advised reads. Seen in the device counters of DM with 4 and 16 readers
    (about 0.8 requests and 1.25 windows more per reader per batch).
    """
    return float(max(PAGE, readahead)) if readers > 1 and readahead > 0 else 0.0


def cursor_steps(locate: str, global_batch: int, group_records: int) -> int:
    """(2) Problem 2: cursor steps one reader takes per iteration. A ``walk`` (Caffe, LMM) steps
    over every other reader's records too (the global batch); DM's ``ring`` hands over a
    position (its own records); extents from an index or provenance take none."""
    if locate == "walk":
        return int(global_batch)
    if locate == "ring":
        return int(group_records)
    return 0


def ring_cycle(readers: int, group_records: int, step_s: float, alpha_s: float) -> float:
    """(2) DM's ring: one iteration's hand-offs around ``readers`` readers, one after another
    (reader k walks after k-1 has walked and sent the position; the next iteration starts when
    it is back)."""
    return readers * (group_records * step_s + alpha_s) if readers > 1 else group_records * step_s


def mmap_requests(nbytes: float, readahead: int, read_size: int) -> tuple[float, int, int]:
    """(3) Problem 3: ``(faults, request_bytes, requests_per_fault)`` of page faults over
    ``nbytes``. Each fault reads the read-around window (``readahead``; 0 = the page alone) in
    requests of at most ``read_size`` issued together; the next fault waits for this one."""
    fault_bytes = max(PAGE, int(readahead))
    req = min(fault_bytes, max(PAGE, int(read_size)))
    return nbytes / fault_bytes, req, max(1, math.ceil(fault_bytes / req))


#: Requests one reader keeps in flight for a large explicit read when nothing better is known:
#: FUSE's default max_background (12). An estimate: the model takes the depth from the
#: platform (``explicit_inflight``) or, for the emulated PFS, from calibrate's measurement.
IN_FLIGHT = 12


def explicit_requests(nbytes: float, read_size: int, readahead: int,
                      inflight: float = IN_FLIGHT, measured=None,
                      tail_reused: bool = False,
                      cap: int | None = None) -> tuple[float, int, float]:
    """(3) Explicit reads (DIO): one ``pread`` per extent, sized by the reader, not by faults.

    The kernel splits a large buffered read into requests of at most
    ``max(readahead, 128 KiB)`` (and at most ``read_size``), and keeps
    ``inflight`` of them at once on average (the effective depth: requests x
    service time / wall time of one cold read; may be fractional, e.g. 1.5
    when the readahead window lets only the next request overlap the
    current one). Returns ``(requests, request_bytes, depth)``; more depth,
    less storage time per read. ``measured``: the requests-per-read curve
    (:func:`lmdbio.lab.model.requests.load_curve`) replaces ``L / request``.
    ``cap``: the largest request of this kernel path where it was measured (the
    node device's ``max_sectors_kb`` on the shared target: a buffered read larger
    than the readahead window is read in requests up to the device's io_pages),
    instead of the formula's ``max(readahead, 128 KiB)``.
    """
    if not (inflight >= 1.0 and math.isfinite(inflight)):
        raise ValueError(f"inflight must be a finite number >= 1, got {inflight!r}")
    largest = int(cap) if cap else min(int(read_size), max(int(readahead), IO_PAGES))
    req = max(PAGE, min(largest, PAGE * math.ceil(max(1.0, nbytes) / PAGE)))
    n = nbytes / req
    if measured:
        # The measured curve: ceil(L / request) + e requests moving L x b bytes (the readahead
        # window past the read's end). ``tail_reused``: the reader's next read starts where
        # this one ends, so those bytes are not read again (only the requests count). With a
        # measured cap, e is taken against that cap at every length.
        n, moved = curve_requests(nbytes, largest if cap else req, measured)
        if tail_reused:
            moved = nbytes
        req = max(PAGE, int(round(moved / max(1.0, n))))
    return n, req, max(1.0, min(float(inflight), float(math.ceil(n))))


def leaf_pieces(nbytes: float, leaf_spacing: float) -> float:
    """(3) Into how many pieces the leaf pages DIO's index pass left cached on its node cut a
    later read of ``nbytes`` (readahead stops at a cached page): one leaf page every
    ``leaf_spacing`` bytes, ``1 + nbytes / leaf_spacing`` on average (measured:
    :mod:`lmdbio.lab.model.sharedprobe`'s ``pread-cached`` rows)."""
    return 1.0 + max(0.0, float(nbytes)) / max(float(PAGE), float(leaf_spacing))


def coalesce_factor(group_bytes: float, coalesce_bytes: int, max_batches: int) -> int:
    """(4) Problem 4: COAL's batches per request, as lmdbio.Reader picks it (a power of two with
    ``k * group_bytes`` near ``coalesce_bytes``, at most the batches the data set holds)."""
    from lmdbio.plan import coalesce_batches

    return coalesce_batches(group_bytes, coalesce_bytes, max_batches)


def overlapped(storage_s: float, cpu_s: float, readahead: int, hidden: float = 1.0) -> float:
    """(3) With a readahead window the kernel fetches the next window while the process copies
    the current one, so storage and copying overlap; without one (GPFS mmap), they add up.
    ``hidden``: the share of the shorter one the overlap hides where it was measured (calibrate's
    ``disk_read_overlap`` on the local disk); 1 = all of it (the longer one alone)."""
    if readahead <= 0:
        return storage_s + cpu_s
    return storage_s + cpu_s - min(1.0, max(0.0, hidden)) * min(storage_s, cpu_s)


def stripe_pieces(request_bytes: float, stripe: int) -> int:
    """(4) A request of ``request_bytes`` is served as this many stripe-unit pieces."""
    return max(1, math.ceil(request_bytes / max(1, stripe)))


def stagger_groups(readers: int, stagger_size: int | None) -> list[int]:
    """(5) Problem 5: the sizes of STAG's reader groups, which take turns on storage
    (``stagger_size`` 0/None: half the readers, lmdbio.Reader's default)."""
    size = int(stagger_size) if stagger_size else max(1, readers // 2)
    size = max(1, min(size, readers))
    full, rest = divmod(readers, size)
    return [size] * full + ([rest] if rest else [])


def handoff(members: int, handoff_s: float, member_batch_s: float) -> float:
    """LMM's shared-memory hand-off: one futex wake-up reaches every member (``handoff_s``), then
    a member spends ``member_batch_s`` on its batch of views (no copy); zero without members."""
    return (handoff_s + member_batch_s) if members > 0 else 0.0


def allreduce(nprocs: int, nbytes: int, alpha_s: float, beta_s: float, reduce_byte_s: float = 0.0) -> float:
    """The gradient allreduce per iteration: reduce-scatter + allgather (Rabenseifner)."""
    if nprocs <= 1 or nbytes <= 0:
        return 0.0
    frac = (nprocs - 1) / nprocs
    return (2 * math.ceil(math.log2(nprocs)) * alpha_s + 2 * frac * nbytes * beta_s
            + frac * nbytes * reduce_byte_s)


def cpu_bound(node_cpu_s: float, cores: int) -> float:
    """Ranks outnumbering cores share them: an iteration takes at least the node's CPU / cores."""
    return node_cpu_s / max(1, int(cores))
