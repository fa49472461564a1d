"""The microbenchmarks ``lmdbio model calibrate`` runs on this machine (each returns seconds,
or seconds per byte), and the MPI parts it runs under ``mpiexec`` (``python -m
lmdbio.lab.model.microbench --mpi-part | --crowded-part``). What each measures and why:
:mod:`lmdbio.lab.model.calibrate` and its ``HOW`` table."""

from __future__ import annotations

import json
import mmap
import os
import sys
import time
from pathlib import Path

import numpy as np

from lmdbio.errors import LmdbioError
from ..bench.cache import cold_read_bw, write_random_file

__all__ = ["PAGE", "FLOOR_S", "FLOOR_PER_BYTE_S", "MMAP_THRESHOLD_MAX", "FIXED_VARIANTS"]

PAGE = 4096
#: Floors the fits clamp to when noise makes a difference come out <= 0: a value AT its floor was
#: not measured (tests check that no calibrated value sits on one).
FLOOR_S = 1e-9
FLOOR_PER_BYTE_S = 1e-13
#: glibc malloc's largest dynamic mmap threshold on 64-bit Linux (mallopt(3), M_MMAP_THRESHOLD:
#: DEFAULT_MMAP_THRESHOLD_MAX = 4 * 1024 * 1024 * sizeof(long)). A batch buffer above it is a fresh
#: mapping each batch, faulted and zeroed on first touch; one below it is reused from the heap.
MMAP_THRESHOLD_MAX = 32 << 20
#: Variants whose fixed read_batch() cost is measured (COAL and STAG reuse PROV's per chunk).
FIXED_VARIANTS = ("lmdb", "lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio", "lmdbio-lmm-dio-prov")


def _best(fn, repeats: int = 15) -> float:
    """Fastest of ``repeats`` runs of ``fn()`` (seconds): the cost without interference."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _cursor_step(db: Path, n: int) -> float:
    import lmdb

    env = lmdb.open(str(db), readonly=True, lock=False, subdir=True)
    try:
        with env.begin(buffers=True) as txn:
            cur = txn.cursor()

            def walk():
                cur.first()
                nxt = cur.next
                for _ in range(n - 1):
                    nxt()
            walk()  # warm
            return _best(walk) / (n - 1)
    finally:
        env.close()


def _copy_costs(small: Path, large: Path, batches: tuple[int, int] = (128, 64)) -> tuple[float, float]:
    """Per-record and per-byte cost of copying values out of the map, as the mmap readers do.

    Values are copied ``batch`` at a time into a fresh buffer per batch
    (lmdbio.pipeline.fetch.copy_values), from two datasets of different record sizes,
    both larger than a last-level cache; each full batch is timed alone and
    the 10th percentile kept (robust to other load); ``t = n a + bytes b``
    over the two sizes gives a and b.
    """
    import lmdb

    from lmdbio.pipeline.fetch import copy_values

    rows = []
    for db, batch in zip((small, large), batches):
        env = lmdb.open(str(db), readonly=True, lock=False, subdir=True)
        try:
            with env.begin(buffers=True) as txn:
                vals = [v for _, v in txn.cursor()]
                chunks = [vals[i:i + batch] for i in range(0, len(vals) - batch + 1, batch)]
                times = []
                for _ in range(5):
                    for c in chunks:
                        t0 = time.perf_counter()
                        copy_values(c, lambda k: np.empty(k, np.uint8))
                        times.append(time.perf_counter() - t0)
                nbytes = sum(len(v) for v in chunks[0])
                rows.append((batch, nbytes, float(np.percentile(times, 10))))
                del vals, chunks
        finally:
            env.close()
    (n1, b1, t1), (n2, b2, t2) = rows
    per_byte = max(FLOOR_PER_BYTE_S, (t2 * n1 - t1 * n2) / (b2 * n1 - b1 * n2))
    per_record = max(FLOOR_S, (t1 - b1 * per_byte) / n1)
    return per_record, per_byte


def _page_fault(path: Path, nbytes: int) -> float:
    """Minor fault cost: map the (cached) file afresh and touch one byte per page."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, nbytes, 0)   # into the page cache
        npages = nbytes // PAGE

        def touch():
            m = mmap.mmap(fd, npages * PAGE, prot=mmap.PROT_READ)
            try:
                a = np.frombuffer(m, dtype=np.uint8)
                int(a[::PAGE].sum())   # one read per page: one fault each (no fault-around on a fresh map is not guaranteed)
                del a
            finally:
                m.close()
        t = _best(touch)
        # The same strided sum over memory that is already mapped: the non-fault part.
        buf = np.zeros(npages * PAGE, np.uint8)
        t0 = _best(lambda: int(buf[::PAGE].sum()))
        return max(FLOOR_S, (t - t0) / npages)
    finally:
        os.close(fd)


def _pread_costs(path: Path, nbytes: int) -> tuple[float, float]:
    """A cached pread per call and per byte, into a destination as large as the file (as a slot)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, nbytes, 0)
        dst = np.zeros(nbytes, np.uint8)   # touched: no first-touch faults in the timing
        mv = memoryview(dst)
        sizes = [4096, 1 << 20, 8 << 20]
        times = []
        for s in sizes:
            reps = max(2, nbytes // s)

            def run(reps=reps, s=s):   # bound now; run() is timed in this iteration only
                for i in range(reps):
                    off = (i * s) % (nbytes - s + 1)
                    os.preadv(fd, [mv[off:off + s]], off)
            times.append(_best(run) / reps)
        # Per byte: the slope between the two largest sizes; per call: what is left at 4 KiB.
        slope = max(FLOOR_PER_BYTE_S, (times[-1] - times[-2]) / (sizes[-1] - sizes[-2]))
        return max(FLOOR_S, times[0] - sizes[0] * slope), slope
    finally:
        os.close(fd)


def _plan_cost() -> float:
    from lmdbio.plan import plan_extents

    n = 200_000
    sizes = np.full(n, 3100, np.int64)
    offsets = np.arange(n, dtype=np.int64) * 4096 + 16
    return _best(lambda: plan_extents(offsets, sizes)) / n


def _handoff(rounds: int = 2000) -> float:
    """One-way futex hand-off between two processes (ping-pong over a shared word)."""
    from lmdbio.waiting import HAVE_FUTEX, wait_word, wake_word

    shared = mmap.mmap(-1, 64)
    word = np.frombuffer(shared, dtype=np.int64, count=2)
    word[:] = 0
    pid = os.fork()
    if pid == 0:   # child: answers every odd value with the next even one
        try:
            for i in range(rounds):
                v = 2 * i + 1
                wait_word(word, 0, lambda x, v=v: x >= v)
                word[0] = v + 1
                wake_word(word, 0)
        finally:
            os._exit(0)
    try:
        t0 = time.perf_counter()
        for i in range(rounds):
            word[0] = 2 * i + 1
            wake_word(word, 0)
            wait_word(word, 0, lambda x, v=2 * i + 2: x >= v)
        t = time.perf_counter() - t0
    finally:
        os.waitpid(pid, 0)
        del word
        shared.close()
    if not HAVE_FUTEX:
        raise LmdbioError("no futex on this platform: the hand-off microbenchmark needs Linux")
    return t / (2 * rounds)


def _disk(path: Path, nbytes: int) -> tuple[float, float]:
    """Cold 4 KiB random-read latency and cold sequential bandwidth of the scratch file's disk."""
    from lmdbio.lab.pagecache import evict

    bw = cold_read_bw(path, nbytes)
    fd = os.open(path, os.O_RDONLY)
    try:
        evict(path)
        rng = np.random.default_rng(1)
        pages = rng.choice(nbytes // PAGE, size=256, replace=False)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        t0 = time.perf_counter()
        for p in pages.tolist():
            os.pread(fd, PAGE, p * PAGE)
        lat = (time.perf_counter() - t0) / len(pages)
        return lat, bw
    finally:
        os.close(fd)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _read_overlap(path: Path, nbytes: int, read: int = 1 << 20, repeats: int = 3) -> float:
    """How much of the CPU between cold back-to-back preads of ``read`` bytes the disk hides.

    Three timings over the evicted scratch file: the reads alone (t_io), the
    CPU alone (one busy wait of t_io / reads per read: as much CPU as I/O,
    where an overlap shows most) and both interleaved (t_both). Median over
    ``repeats`` of (t_io + t_cpu - t_both) / min(t_io, t_cpu), within 0-1.
    """
    from lmdbio.lab.pagecache import evict

    n = nbytes // read
    buf = bytearray(read)
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(repeats):
            evict(path)
            t0 = time.perf_counter()
            for i in range(n):
                os.preadv(fd, [buf], i * read)
            t_io = time.perf_counter() - t0
            per = t_io / n
            t0 = time.perf_counter()
            for _ in range(n):
                _spin(per)
            t_cpu = time.perf_counter() - t0
            evict(path)
            t0 = time.perf_counter()
            for i in range(n):
                os.preadv(fd, [buf], i * read)
                _spin(per)
            t_both = time.perf_counter() - t0
            out.append(min(1.0, max(0.0, (t_io + t_cpu - t_both) / min(t_io, t_cpu))))
    finally:
        os.close(fd)
    return float(np.median(out))


def _mean_value_bytes(db: Path) -> int:
    import lmdb

    env = lmdb.open(str(db), readonly=True, lock=False, subdir=True)
    try:
        with env.begin(buffers=True) as txn:
            sizes = [len(v) for _, v in txn.cursor()]
    finally:
        env.close()
    return int(round(sum(sizes) / max(1, len(sizes))))


def _queue_limits(path: Path) -> tuple[int, int]:
    """The block device's readahead window and largest request (sysfs), for the disk profile."""
    st = os.stat(path)
    dev = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    for q in (dev / "queue", dev.parent / "queue"):   # a partition's queue is its disk's
        try:
            ra = int((q / "read_ahead_kb").read_text()) * 1024
            mx = int((q / "max_sectors_kb").read_text()) * 1024
            return ra, mx
        except (OSError, ValueError):
            continue
    return 128 << 10, 1 << 20   # Linux defaults (VM_READAHEAD_PAGES; a common max_sectors_kb)


PFS_PROFILE = "gpfs-2017"
PFS_READ = 4 << 20


def _pfs_inflight(tmp: Path, reads: int = 8, budget_s: float = 12.0) -> tuple[float, str]:
    """Effective depth of a cold 4 MiB buffered ``preadv`` through an lmdbio.lab.pfs mount.

    Mounts a 32 MiB scratch file through the gpfs-2017 profile (one node, the
    profile's own time scale), and for each of ``reads`` distinct 4 MiB
    regions: evicts the node's cache, times one ``preadv`` and takes the
    daemon's counters before and after. Depth = sum of the requests'
    unqueued service times (response - queue wait) / wall time: 1 when the
    kernel sends one request at a time, more when it overlaps them. Returns
    ``(median depth, source text)``; ``(nan, reason)`` when FUSE is not
    available or the mount fails. Takes a few seconds (at most ``budget_s``
    of reads after the mount).
    """
    from ..pfs.model import load_profile
    from ..pfs.mount import FuseUnavailable, check_fuse, mounted

    try:
        check_fuse()
    except FuseUnavailable as exc:
        return float("nan"), f"skipped: {exc}"
    src = tmp / "pfs-src"
    src.mkdir(exist_ok=True)
    region = PFS_READ
    write_random_file(src / "depth.bin", reads * region, seed=2)
    prof = load_profile(PFS_PROFILE)
    depths, walls, reqs, kernel, inflight_max = [], [], [], {}, 0
    try:
        with mounted(src, profile=PFS_PROFILE, nodes=1, time_scale=prof.time_scale) as m:
            fd = os.open(m.path(0, "depth.bin"), os.O_RDONLY)
            try:
                buf = bytearray(region)
                t_end = time.monotonic() + budget_s
                for i in range(reads):
                    if time.monotonic() > t_end:
                        break
                    m.evict(0, "depth.bin")
                    c0 = m.counters()["total"]
                    t0 = time.perf_counter()
                    got = os.preadv(fd, [buf], i * region)
                    wall = time.perf_counter() - t0
                    c1 = m.counters()["total"]
                    if got != region:
                        raise LmdbioError(f"short read through the pfs mount ({got} of {region} bytes)")
                    service = ((c1["service_s"] - c0["service_s"])
                               - (c1["queue_wait_s"] - c0["queue_wait_s"]))
                    depths.append(service / wall)
                    walls.append(wall)
                    reqs.append(c1["requests"] - c0["requests"])
            finally:
                os.close(fd)
            st = m.stats()
            kernel, inflight_max = st.get("kernel", {}), st.get("served", {}).get("inflight_max", 0)
    except LmdbioError as exc:
        return float("nan"), f"skipped: the pfs mount failed ({exc})"
    if not depths:
        return float("nan"), "skipped: no read finished within the time budget"
    d = float(np.median(depths))
    src_text = (f"measured: {len(depths)} cold {region >> 20} MiB buffered preadv through an lmdbio.lab.pfs "
                f"mount of profile {PFS_PROFILE} (time_scale {prof.time_scale}, latency "
                f"{prof.latency_s} s, {prof.targets} targets, stripe {prof.stripe}, read_size "
                f"{prof.read_size}, readahead {prof.readahead}; kernel {kernel}); "
                f"depth = sum of unqueued request service times / wall, median {d:.3f} "
                f"(min {min(depths):.3f}, max {max(depths):.3f}); requests per read "
                f"{int(np.median(reqs))}, median wall {np.median(walls) * 1e3:.1f} ms; daemon's "
                f"inflight_max {inflight_max}")
    return d, src_text


# ------------------------------------------------------------------ the MPI part (mpiexec -n 2)

def _batch_cost(db, c, variant, iters=400, per_rank=2):
    """(wall, CPU) seconds per read_batch() of ``per_rank``-record batches on this rank.

    Wall: the median of single calls (robust to a call the scheduler interrupted); CPU: process
    time over all calls / calls (slow calls and garbage collection included).
    """
    import lmdbio

    with lmdbio.Reader(db, batch_size=per_rank * c.size, comm=c, variant=variant) as r:
        for _ in range(20):
            r.read_batch()
        c.Barrier()
        walls = np.empty(iters)
        c0 = time.process_time()
        for i in range(iters):
            t0 = time.perf_counter()
            r.read_batch()
            walls[i] = time.perf_counter() - t0
        cpu = (time.process_time() - c0) / iters
        return float(np.percentile(walls, 50)), cpu


def _crowded_part(db: str, out: str) -> None:
    """Members' CPU per read_batch() in one group of all ranks (mpiexec -n 8 on a small machine)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    cpu = _batch_cost(db, comm, "lmdbio-lmm-dio-prov", iters=200)[1]
    cpus = comm.gather(cpu, root=0)
    if comm.rank == 0:
        Path(out).write_text(json.dumps({"member_crowded_s": float(np.mean(cpus[1:])),
                                         "reader_crowded_cpu_s": float(cpus[0])}))


def _mpi_part(db: str, out: str, large: str | None = None) -> None:
    """Ping-pong latency and bandwidth; read_batch() costs of a lone reader and of a member.

    ``db`` is larger than a last-level cache (24,000 CIFAR-10 records), so
    per-record costs include memory traffic as a real dataset's do.
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.rank
    res = {}
    for size in (8, 4 << 20):
        buf = np.zeros(size, np.uint8)
        reps = 500 if size < 1024 else 10
        best = float("inf")
        for _ in range(4):   # best of four windows
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(reps):
                if rank == 0:
                    comm.Send(buf, 1)
                    comm.Recv(buf, 1)
                else:
                    comm.Recv(buf, 0)
                    comm.Send(buf, 0)
            best = min(best, (MPI.Wtime() - t0) / (2 * reps))
        res[size] = comm.bcast(best, root=0)
    alpha = res[8]
    beta = max(FLOOR_PER_BYTE_S, (res[4 << 20] - alpha) / (4 << 20))

    def batch_cost(c, variant):
        return _batch_cost(db, c, variant)
    # Reader + member of one group: the member's CPU per batch (it sleeps while it waits).
    pair = comm.gather(batch_cost(comm, "lmdbio-lmm-dio-prov"), root=0)
    solo = comm.Split(rank, 0)
    fixed, per_record, batch_cpu, batch_cpu_large, batch_cpu_large16 = {}, {}, {}, {}, {}
    solo_cpu = None
    if rank == 0:
        solo_cpu = batch_cost(solo, "lmdbio-lmm-dio-prov")[1]
        for v in FIXED_VARIANTS:
            fixed[v] = batch_cost(solo, v)[0]
            big, batch_cpu[v] = _batch_cost(db, solo, v, iters=300, per_rank=256)
            per_record[v] = max(FLOOR_S, (big - fixed[v]) / 254)
            if large:
                batch_cpu_large[v] = _batch_cost(large, solo, v, iters=24, per_rank=256)[1]
                batch_cpu_large16[v] = _batch_cost(large, solo, v, iters=96, per_rank=16)[1]
    solo.Free()
    if rank == 0:
        Path(out).write_text(json.dumps({
            "mpi_alpha_s": alpha, "mpi_beta_s": beta, "batch_s": fixed, "record_s": per_record,
            "batch_cpu_s": batch_cpu, "batch_cpu_large_s": batch_cpu_large or None,
            "batch_cpu_large16_s": batch_cpu_large16 or None,
            "reader_solo_cpu_s": solo_cpu,
            "member_batch_s": pair[1][1]}))


def main(argv) -> int:
    """The MPI parts of the calibration, run by :func:`lmdbio.lab.model.calibrate.run_calibration`."""
    if len(argv) in (4, 5) and argv[1] == "--mpi-part":
        _mpi_part(argv[2], argv[3], argv[4] if len(argv) == 5 else None)
    elif len(argv) == 4 and argv[1] == "--crowded-part":
        _crowded_part(argv[2], argv[3])
    else:
        print("usage: lmdbio model calibrate", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
